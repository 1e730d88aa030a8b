"""What `circuit check` may add to: a graph of a recorded circuit of the workspace it is given (or a loose graph file),
never a file inside another kind of artifact, nor a circuit of another workspace; and one check at a time."""

import shutil

import pytest

from workbench.circuits.feature.graph_config import GraphConfig
from workbench.cli import main
from workbench.lock import output_lock
from workbench.steps.graphs import attribution_graph
from workbench.workspace import MANIFEST, Workspace

PROMPT = "When Mary and John went to the store , John gave"


@pytest.fixture(scope="module")
def recorded(tiny, tc_set, tmp_path_factory):
    """A workspace holding a recorded graph g1 (and the transcoder set its graph used)."""
    ws = Workspace(tmp_path_factory.mktemp("check") / "a")
    cfg = GraphConfig(max_feature_nodes=10, heads=False)
    _, folder = attribution_graph(ws, tiny[0], tc_set, PROMPT, "a", None, cfg=cfg, name="g1")
    return ws, folder


def _check(graph, ws, tc_set) -> list[str]:
    return ["circuit", "check", str(graph), "--workspace", str(ws), "--transcoders", str(tc_set), "--top-edges", "1"]


@pytest.mark.parametrize("kind", ["transcoders", "caches"])
def test_a_graph_copied_into_another_artifact_is_refused(recorded, tc_set, tmp_path, capsys, kind):
    """The graph was declared only an input, so the check rewrote the host's manifest as kind `circuits`."""
    ws, g1 = recorded
    host = Workspace(tmp_path / "ws").path(kind, "host")
    shutil.copytree(tc_set, host) if kind == "transcoders" else host.mkdir(parents=True)
    Workspace(tmp_path / "ws").record(host, kind, made_by="test", config={}, checksums=False)
    shutil.copy(g1 / "graph.json", host / "graph.json")
    before = {p.name: p.read_bytes() for p in (host / MANIFEST, host / "graph.json")}
    assert main(_check(host / "graph.json", tmp_path / "ws", tc_set)) == 2
    err = capsys.readouterr().err
    assert f"GRAPH {host / 'graph.json'} belongs to another artifact ({host / MANIFEST}, kind {kind})" in err, err
    assert "adds only to circuits artifacts" in err
    assert {p.name: p.read_bytes() for p in (host / MANIFEST, host / "graph.json")} == before


def test_a_circuit_of_another_workspace_is_not_recorded_in_this_one(recorded, tc_set, capsys):
    """It was registered in the given workspace as a second g1."""
    ws, g1 = recorded
    other = Workspace(ws.root.parent / "b")
    before = (g1 / MANIFEST).read_bytes()
    assert main(_check(g1, other.root, tc_set)) == 2
    err = capsys.readouterr().err
    assert f"{g1} is a circuit of another workspace ({ws.root}), not of --workspace {other.root}" in err, err
    assert other.artifacts() == [] and (g1 / MANIFEST).read_bytes() == before
    assert [a.name for a in ws.artifacts("circuits")] == ["g1"]


def test_a_second_circuit_check_is_refused_while_the_first_writes(recorded, tc_set, capsys):
    """Two at once: the second is refused, naming the first (it took no lock, and the last one won)."""
    ws, g1 = recorded
    before = (g1 / "graph.json").read_bytes()
    with output_lock(g1, "workbench circuit check (the first)"):
        assert main(_check(g1, ws.root, tc_set)) == 2
    err = capsys.readouterr().err
    assert f"{g1} is being written by another process (pid" in err and "the first" in err, err
    assert (g1 / "graph.json").read_bytes() == before
    assert main(_check(g1, ws.root, tc_set)) == 0, capsys.readouterr().err
    assert (g1 / "graph.json").read_bytes() != before


def test_a_graph_deeper_in_a_circuit_s_folder_is_refused(recorded, tc_set, capsys):
    """A copy in a sub-folder of g1: the check would change a file g1's manifest lists (its checksum)."""
    ws, g1 = recorded
    (g1 / "sub").mkdir(exist_ok=True)
    shutil.copy(g1 / "graph.json", g1 / "sub" / "graph.json")
    before = (g1 / "sub" / "graph.json").read_bytes()
    assert main(_check(g1 / "sub" / "graph.json", ws.root, tc_set)) == 2
    err = capsys.readouterr().err
    assert f"graph {g1 / 'sub' / 'graph.json'} lies inside the circuit {g1} but is not its graph" in err, err
    assert (g1 / "sub" / "graph.json").read_bytes() == before
    shutil.rmtree(g1 / "sub")
