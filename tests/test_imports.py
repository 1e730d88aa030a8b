"""Import hygiene: the light layers stay light, and the package has no import cycles."""

import ast
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
        "import workbench.workspace, workbench.browse, workbench.errors, workbench.steps",
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


METHOD_PACKAGES = ("attention", "cache", "circuits", "corpus", "features", "models", "sae")


def test_no_method_package_imports_the_steps_or_the_cli():
    """The method packages are the engine; the steps and the CLI sit on top of them, never below."""
    graph = _graph()
    up = {"workbench.steps", "workbench.demo", "workbench.cli"}
    found = {
        name: sorted(m for m in deps if m in up or m.startswith("workbench.cli."))
        for name, deps in graph.items()
        if name.partition(".")[2].split(".")[0] in METHOD_PACKAGES
    }
    assert {"workbench.attention.train", "workbench.circuits.component.export", "workbench.sae.trainer"} <= set(found)
    assert {name: deps for name, deps in found.items() if deps} == {}


def test_the_import_graph_sees_a_planted_upward_import(tmp_path):
    """The check above reads imports the way the package writes them (inside functions too)."""
    path = tmp_path / "probe.py"
    path.write_text("def f():\n    from workbench import steps\n    from workbench.cli.circuit import parse_budget\n")
    assert {"workbench.steps", "workbench.cli.circuit"} <= _module_imports(path, "workbench.sae.probe")
