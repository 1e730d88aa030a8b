"""The demo's interventions on the embedded model (random dictionaries): what they record, and that a rerun skips."""

import json

import pytest

from workbench.browse import catalog
from workbench.corpus import tasks
from workbench.demo.examples import demo_examples
from workbench.workspace import Workspace


@pytest.mark.slow  # a feature circuit's search: ~20 s
def test_demo_examples_record_checked_graphs_and_steering(tiny, tc_set, saes, tmp_path):
    model, tok = tiny
    ws = Workspace(tmp_path / "ws")
    q = tasks.queries("ioi", 1, seed=0, tokenizer=tok)[0]
    lines = []
    out = demo_examples(ws, model, q, tc_set, [saes["block"], saes["scaffold"]], lines.append)
    graph = json.loads((ws.path("circuits", "graph-ioi") / "graph.json").read_text())
    assert graph["workbench_check"]["summary"]["nodes_checked"] > 0
    steer = {a.name: a for a in ws.artifacts("interventions")}
    assert set(steer) == {"steer-block", "steer-scaffold", f"steer-{tc_set.name}"}
    assert steer["steer-scaffold"].manifest["config"]["features"] == ["scaffold"]
    assert steer["steer-block"].manifest["config"]["op"] == "steer"
    assert set(out) >= {"graph-ioi", "features-ioi", "steer-block"}, lines
    assert any(line.startswith("check features-ioi/neuronpedia.json") for line in lines)
    opened = catalog(ws.root).feature_graphs[0]  # the graph the feature-graph page opens by default
    assert "workbench_check" in json.loads((ws.root / opened / "graph.json").read_text()), opened
    before = {a.path: a.manifest["created"] for a in ws.artifacts()}
    assert demo_examples(ws, model, q, tc_set, [saes["block"], saes["scaffold"]], lines.append) == out
    assert {a.path: a.manifest["created"] for a in ws.artifacts()} == before
