"""Package exports resolved on first use, so importing a package (or a light module inside it, such
as a config) does not import torch, TransformerLens or sae_lens until a heavy name is touched."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys


def lazy_exports(package: str, exports: dict[str, str], modules: dict[str, str] | None = None):
    """(__getattr__, __dir__) for a package whose public `name` lives in module `exports[name]`, and whose
    `modules[name]` is a module kept by its old name after it moved into a subpackage; any other attribute is
    tried as a submodule.

    The value is cached in the package's namespace on first access, so later lookups are plain
    attribute reads.
    """
    namespace = importlib.import_module(package).__dict__
    modules = modules or {}

    def __getattr__(name: str):
        if name in modules:
            value = namespace[name] = importlib.import_module(modules[name])
            return value
        if name not in exports:  # a submodule (circuits.export) loads on first use too
            try:
                return importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as e:
                if e.name != f"{package}.{name}":
                    raise
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(exports[name]), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports) | set(modules))

    return __getattr__, __dir__


def after_import(name: str, target: str) -> None:
    """Call `target` ("module:function") once module `name` is imported: now if it already is, else right
    after its import finishes, so a light package can hook a heavy library without importing it.

    When the target's own module is what imports `name` (it is still being executed, its function not yet
    defined), the call is left to that module, which makes it at its end: calling into it half-made would fail
    inside the library's import and leave the library half-registered for the next import."""

    def call() -> None:
        module, _, fn = target.partition(":")
        own = sys.modules.get(module)
        if own is not None and getattr(getattr(own, "__spec__", None), "_initializing", False):
            return
        getattr(importlib.import_module(module), fn)()

    if name in sys.modules:
        call()
    else:
        sys.meta_path.insert(0, _AfterImport(name, call))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds `name` with the other finders, and wraps its loader so `call` runs after the module executed."""

    def __init__(self, name: str, call):
        self.name, self.call = name, call

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once, and so the lookup below does not come back here
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            exec_module = spec.loader.exec_module

            def run(module) -> None:
                exec_module(module)
                self.call()

            spec.loader.exec_module = run
        return spec
