"""Package exports resolved on first use, so importing a package (or a light module inside it, such
as a config) does not import torch, TransformerLens or sae_lens until a heavy name is touched."""

from __future__ import annotations

import importlib


def lazy_exports(package: str, exports: dict[str, str]):
    """(__getattr__, __dir__) for a package whose public `name` lives in module `exports[name]`;
    any other attribute is tried as a submodule.

    The value is cached in the package's namespace on first access, so later lookups are plain
    attribute reads.
    """
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str):
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
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
