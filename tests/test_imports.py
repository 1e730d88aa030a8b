"""Import hygiene: the light layers stay light, and the package has no import cycles."""

import ast
import functools
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformer_lens", "sae_lens")


@pytest.mark.parametrize(
    "code",
    [
        "import workbench.workspace, workbench.browse, workbench.errors, workbench.steps, workbench.demo.config",
        "from workbench.cli import build_parser; build_parser().parse_args(['ls'])",
        # every command's --help but `model train`'s (its flags come from TinyConfig, beside TransformerLens)
        "import argparse; from workbench.cli import build_parser\n"
        "def walk(p, path=()):\n"
        "    for a in p._actions:\n"
        "        if isinstance(a, argparse._SubParsersAction):\n"
        "            for n, s in a.choices.items():\n"
        "                if (*path, n) != ('model', 'train'):\n"
        "                    s.format_help(); walk(s, (*path, n))\n"
        "walk(build_parser())",
        "from workbench.sae.config import SAEConfig, TrainConfig; from workbench.cache.config import CacheConfig; "
        "from workbench.circuits.config import SearchConfig",
        "import workbench.attention.claims",  # the app's Compare page reads stored comparisons through it
    ],
)
def test_light_layers_import_no_torch(code):
    probe = (
        f"import sys, json\n{code}\nprint(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def _target(base: str, name: str) -> str:
    """`from base import name` -> the module it really loads (a lazy package export counts as its module)."""
    try:
        exports = getattr(importlib.import_module(base), "_EXPORTS", {})
    except ImportError:
        return base
    return exports.get(name, f"{base}.{name}")


def _module_imports(path: Path, name: str) -> set[str]:
    """Modules of the workbench package that `path` imports anywhere (module level or inside functions)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.add(base)
            found |= {_target(base, a.name) for a in node.names if base.startswith("workbench")}
    return {m for m in found if m.split(".")[0] == "workbench"}


@functools.cache
def _graph() -> dict[str, set[str]]:
    modules = {}
    for path in sorted((ROOT / "workbench").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return {
        name: {m for m in _module_imports(path, name) if m in modules and m != name} for name, path in modules.items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle found by a depth-first search (each reported once, from its first module)."""
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return cycles


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c", "a"]]


def test_the_package_has_no_import_cycle():
    graph = _graph()
    assert "workbench.circuits.component.types" in graph and "workbench.errors" in graph["workbench.workspace"]
    assert _cycles(graph) == []


TOP = ("steps", "demo", "cli")  # the layers over the engine: the steps record artifacts, the demo and the CLI run them


def _top(module: str) -> bool:
    return module.split(".")[1:2] in ([layer] for layer in TOP)


def test_only_the_top_layers_import_the_steps_the_demo_or_the_cli():
    """The method packages and the shared modules (interventions, browse, the workspace) are the engine; the steps, the
    demo and the CLI sit on top of them, never below (interventions imports no demo code: the demo's examples live
    in workbench.demo)."""
    graph = _graph()
    found = {name: sorted(d for d in deps if _top(d)) for name, deps in graph.items() if not _top(name)}
    assert {"workbench.attention.train", "workbench.interventions.engine", "workbench.sae.trainer"} <= set(found)
    assert {"workbench.steps.cache", "workbench.demo.examples", "workbench.cli.circuit"} <= set(graph)
    assert {name: deps for name, deps in found.items() if deps} == {}


def test_the_import_graph_sees_a_planted_upward_import(tmp_path):
    """The check above reads imports the way the package writes them (inside functions too)."""
    path = tmp_path / "probe.py"
    path.write_text("def f():\n    from workbench import steps\n    from workbench.cli.circuit import parse_budget\n")
    assert {"workbench.steps", "workbench.cli.circuit"} <= _module_imports(path, "workbench.sae.probe")
    assert _top("workbench.steps.cache") and _top("workbench.cli") and not _top("workbench.stepsize")


# ------------------------------------------------------------------ the order of the layers

# The method packages from the bottom up: a module imports only from its own unit or one below it. dictionaries
# (the table of dictionary kinds, their folders and the Transcoders interface) sits above the sae package that
# writes them and below every reader of them (features, circuits, attention; interventions and browse). circuits is
# three units: its core (schema, annotations, config, inputs, metrics: what both kinds of circuit share), the
# component wing (heads and MLPs) and the feature wing (transcoders), which may use the component wing (a
# feature circuit is compared with the component circuit of the same query), never the reverse. The steps, the demo
# and the CLI are the floors above every method package, in that order (the CLI runs the demo, which runs the steps).
ORDER = (
    "corpus",
    "models",
    "cache",
    "sae",
    "dictionaries",
    "features",
    "circuits",
    "circuits.component",
    "circuits.feature",
    "attention",
    *TOP,
)
# (importer, imported) pairs that go upward, each with its reason
ALLOWED_UPWARD = {
    ("workbench.models", "workbench.attention.gates"): "load() installs the attention gates a sparse-attention "
    "model's weights need, so every model loads the same way",
}


def _unit(module: str) -> str | None:
    """The ORDER unit a workbench module belongs to (None: a shared utility or a layer above the methods)."""
    parts = module.split(".")[1:]
    if parts[:1] == ["circuits"] and parts[1:2] in (["component"], ["feature"]):
        return ".".join(parts[:2])
    return parts[0] if parts and parts[0] in ORDER else None


def _upward(graph: dict[str, set[str]]) -> dict[tuple[str, str], str]:
    """(importer, imported) -> 'unit -> unit' for every import that goes up ORDER."""
    out = {}
    for name, deps in graph.items():
        low = _unit(name)
        for dep in deps:
            high = _unit(dep)
            if low and high and ORDER.index(high) > ORDER.index(low):
                out[name, dep] = f"{low} -> {high}"
    return out


def test_method_packages_import_only_downward():
    """Every upward import is on the allow-list, and every allow-list entry is still needed."""
    assert sorted(_upward(_graph())) == sorted(ALLOWED_UPWARD)


def test_the_wings_and_the_core_of_circuits():
    """The core imports neither wing; the component wing never imports the feature wing."""
    graph = _graph()
    assert {
        "workbench.circuits.schema",
        "workbench.circuits.component.api",
        "workbench.circuits.feature.transcoders",
    } <= set(graph)
    bad = {
        name: sorted(d for d in deps if _unit(d) in ("circuits.component", "circuits.feature"))
        for name, deps in graph.items()
        if _unit(name) == "circuits"
    }
    bad |= {
        name: sorted(d for d in deps if _unit(d) == "circuits.feature")
        for name, deps in graph.items()
        if _unit(name) == "circuits.component"
    }
    assert {name: deps for name, deps in bad.items() if deps} == {}


def test_the_order_check_sees_a_planted_upward_import():
    planted = {"workbench.circuits.component.api": {"workbench.circuits.feature.transcoders"}}
    assert _upward(planted) == {
        ("workbench.circuits.component.api", "workbench.circuits.feature.transcoders"): "circuits.component -> "
        "circuits.feature"
    }
    assert _upward({"workbench.circuits.schema": {"workbench.circuits.config", "workbench.errors"}}) == {}


def _app_imports(path: Path) -> set[str]:
    """The app's own modules that `path` imports anywhere."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return {m for m in found if m.split(".")[0] == "app"}


def test_the_graph_view_imports_none_of_the_pages():
    """app/graph_view draws any circuit from data: it never reaches back into the pages' figures, state or views."""
    pages = ("app.figures", "app.state", "app.views")
    found = {
        str(path.relative_to(ROOT)): sorted(m for m in _app_imports(path) if m.startswith(pages))
        for path in sorted((ROOT / "app" / "graph_view").rglob("*.py"))
    }
    assert "app/graph_view/layout.py" in found
    assert {k: v for k, v in found.items() if v} == {}


def test_the_circuits_names_of_before_the_split_still_resolve():
    """Every public name of workbench.circuits, and every module that moved into a wing by its old name
    (`circuits.export.to_mib`), resolves to the module that holds it now."""
    import workbench.circuits as circuits

    for name in circuits.__all__:
        assert getattr(circuits, name).__name__ == name
    for old, now in circuits._MOVED.items():
        assert getattr(circuits, old).__name__ == now and now.rpartition(".")[2] == old
    assert circuits.export.to_mib.__module__ == "workbench.circuits.component.export"
