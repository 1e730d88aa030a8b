"""The graph check: its arithmetic on a graph made by hand, its measurements against the graph's own edges where
they must agree (frozen semantics), and `circuit check` storing the record in a recorded graph."""

import json

import pytest
import torch

from workbench.circuits.schema import GRAPH_CHECK, read_feature_graph
from workbench.errors import DamagedFileError
from workbench.interventions.check import GraphNodes, check_graph, summary
from workbench.interventions.config import CheckConfig
from workbench.interventions.dictionary import load_dictionary

PROMPT = "When Mary and John went to the store , John gave"


@pytest.fixture(scope="module")
def graph(tiny, tc_set):
    from workbench.circuits.attribution_graph import build_graph
    from workbench.circuits.graph_config import GraphConfig
    from workbench.circuits.graph_json import to_neuronpedia
    from workbench.circuits.replacement import load_transcoders

    model = tiny[0]
    cfg = GraphConfig(max_feature_nodes=40, heads=False)
    return to_neuronpedia(build_graph(model, load_transcoders(tc_set, 0, "cpu", model), PROMPT, "a", None, cfg))


def _node(nid, kind, pos, **kw):
    return {"node_id": nid, "feature_type": kind, "ctx_idx": pos, "is_target_logit": False, "activation": 0.0, **kw}


def test_predicted_effects_follow_the_kept_paths():
    """f0 (act 2) -> f1 (act 4) -> logit, and f0 -> logit directly: ablating f0 removes its direct 3 and, through
    f1's pre-activation moving by 5 (one unit of f1 is 10 / 4 of the logit), 12.5 more."""
    nodes = [
        _node("E_7_0", "embedding", 0),
        _node("0_3_0", "cross layer transcoder", 0, activation=2.0),
        _node("1_4_0", "cross layer transcoder", 0, activation=4.0),
        _node("3_9_0", "logit", 0, feature=9, is_target_logit=True),
    ]
    links = [
        {"source": "0_3_0", "target": "1_4_0", "weight": 5.0},
        {"source": "1_4_0", "target": "3_9_0", "weight": 10.0},
        {"source": "0_3_0", "target": "3_9_0", "weight": 3.0},
    ]
    g = GraphNodes({"nodes": nodes, "links": links}, "target")
    assert g.tokens.tolist() == [7] and g.features["0_3_0"] == (0, 0, 3, 2.0)
    assert g.predicted(links) == pytest.approx({"1_4_0": -10.0, "0_3_0": -(3.0 + 5.0 * 10.0 / 4.0)})


def test_summary_weighs_by_predicted_effect():
    rows = [
        {"node_id": "a", "predicted": -3.0, "measured": -2.0, "confirmed": True},
        {"node_id": "b", "predicted": 1.0, "measured": -1.0, "confirmed": False},
    ]
    s = summary(rows, "nodes")
    assert s == {"nodes_checked": 2, "nodes_confirmed_share": 0.75, "nodes_failed": ["b"]}


def test_frozen_edges_reproduce_the_graph_exactly(tiny, tc_set, graph):
    """With patterns and scales frozen and the MLPs between held, a source's write into its target is the graph's
    own direct effect: measured = -weight for every edge checked, into features and into the logit."""
    model = tiny[0]
    sites = load_dictionary(tc_set, model)
    r = check_graph(model, sites, graph, CheckConfig(semantics="frozen", top_edges=12))
    assert len(r["edges"]) == 12
    assert any(e["target"].startswith(f"{model.cfg.n_layers + 1}_") for e in r["edges"])  # a logit edge among them
    for e in r["edges"]:
        assert e["measured"] == pytest.approx(e["predicted"], rel=1e-3, abs=1e-4), e
    assert r["summary"]["edges_confirmed_share"] == 1.0


def test_live_check_measures_every_kept_feature(tiny, tc_set, graph):
    model = tiny[0]
    r = check_graph(model, load_dictionary(tc_set, model), graph, CheckConfig(top_edges=3, fraction=0.5))
    feats = [n["node_id"] for n in graph["nodes"] if n["feature_type"] == "cross layer transcoder"]
    assert sorted(n["node_id"] for n in r["nodes"]) == sorted(feats)
    for n in r["nodes"]:
        assert n["confirmed"] == (
            n["predicted"] * n["measured"] > 0 and abs(n["measured"]) >= 0.5 * abs(n["predicted"])
        )
    assert r["semantics"] == "live" and r["summary"]["cpu_seconds"] > 0
    stored = read_feature_graph({**graph, GRAPH_CHECK[0]: r})
    assert stored.check["summary"] == r["summary"]
    assert read_feature_graph(graph).check is None  # a graph never checked still loads
    bad = json.loads(json.dumps(r))
    bad["nodes"][0]["measured"] = "x"
    with pytest.raises(DamagedFileError, match="measured"):
        read_feature_graph({**graph, GRAPH_CHECK[0]: bad})


def test_circuit_check_stores_the_record_in_a_recorded_graph(tiny, tc_set, tmp_path, capsys):
    from workbench import steps
    from workbench.circuits.graph_config import GraphConfig
    from workbench.cli import main
    from workbench.workspace import Workspace

    ws = tmp_path / "ws"
    cfg = GraphConfig(max_feature_nodes=10, heads=False)
    _, folder = steps.attribution_graph(Workspace(ws), tiny[0], tc_set, PROMPT, "a", None, cfg=cfg, name="g")
    assert main(["circuit", "check", str(folder), "--workspace", str(ws), "--top-edges", "2"]) == 0
    out = capsys.readouterr().out
    assert "of the predicted influence confirmed" in out
    d = json.loads((folder / "graph.json").read_text())
    assert d[GRAPH_CHECK[0]]["config"]["top_edges"] == 2
    manifest = json.loads((folder / "artifact.json").read_text())
    assert "check_nodes_confirmed_share" in manifest["summary"] and manifest["made_by"] == "workbench circuit graph"
    assert main(["circuit", "check", str(tmp_path / "nothing.json")]) == 2
    assert "no graph JSON" in capsys.readouterr().err


def test_difference_needs_a_second_logit(graph):
    from workbench.errors import BadValueError

    with pytest.raises(BadValueError, match="second logit"):
        GraphNodes(graph, "difference")
    assert torch.is_tensor(GraphNodes(graph, "target").tokens)
