"""Supernodes proposed and checked: the clustering and the signals' mean on matrices made by hand, the graph JSON
written as circuit-tracer reads it, the joint ablation against `circuit check`'s own measurement, and
`circuit group` storing its record in a recorded graph."""

import json

import numpy as np
import pytest

from workbench.circuits.feature.graph_config import GroupConfig
from workbench.circuits.feature.grouping import (
    GROUPS,
    adjacency_similarity,
    apply,
    cluster,
    combine,
    measure_group,
    propose,
    read_groups,
)
from workbench.errors import BadValueError
from workbench.interventions.check import GraphNodes, check_graph
from workbench.interventions.config import CheckConfig
from workbench.interventions.dictionary import load_dictionary

PROMPT = "When Mary and John went to the store , John gave"


def test_clusters_stay_within_a_scope_and_under_the_threshold_and_size():
    sim = np.array(
        [[1, 0.9, 0.9, 0.9], [0.9, 1, 0.9, 0.2], [0.9, 0.9, 1, 0.2], [0.9, 0.2, 0.2, 1]], dtype=float
    )  # 0 and 3 are alike, but 3 lies at another position
    assert cluster(sim, [(5,), (5,), (5,), (6,)], GroupConfig(threshold=0.5)) == [[0, 1, 2]]
    assert cluster(sim, [(5,)] * 4, GroupConfig(threshold=0.4)) == [[0, 1, 2, 3]]  # 3 joins at a mean 0.43
    assert cluster(sim, [(5,)] * 4, GroupConfig(threshold=0.5)) == [[0, 1, 2]]
    assert cluster(sim, [(5,)] * 4, GroupConfig(threshold=0.5, max_size=2)) == [[0, 1]]  # 2 and 3: 0.2
    assert cluster(sim, [(5,)] * 4, GroupConfig(threshold=0.95)) == []


def test_a_missing_signal_drops_out_of_the_pair_mean():
    dec = np.array([[1.0, 0.2], [0.2, 1.0]])
    expl = np.array([[1.0, np.nan], [np.nan, 1.0]])  # the pair has no explanation: decoder alone
    both = combine({"decoder": dec, "explanation": expl}, GroupConfig())
    assert both[0, 1] == pytest.approx(0.2) and both[0, 0] == pytest.approx(1.0)
    half = combine({"decoder": dec, "explanation": np.array([[1, 0.8], [0.8, 1]])}, GroupConfig(decoder=3))
    assert half[0, 1] == pytest.approx((3 * 0.2 + 0.8) / 4)
    with pytest.raises(BadValueError, match="every signal's weight is 0"):
        GroupConfig(decoder=0, coactivation=0, adjacency=0, explanation=0)


def test_shared_links_make_two_nodes_alike():
    links = [
        {"source": "e", "target": "a", "weight": 1.0},
        {"source": "e", "target": "b", "weight": 2.0},
        {"source": "a", "target": "t", "weight": 1.0},
        {"source": "b", "target": "t", "weight": 1.0},
        {"source": "f", "target": "c", "weight": 1.0},
    ]
    sim = adjacency_similarity(["a", "b", "c"], links)
    assert sim[0, 1] > 0.9 and sim[0, 2] == 0


def _record(*verdicts):
    groups = [
        {"name": f"S{i}", "members": [f"0_{i}_3", f"1_{i}_3"], "verdict": v, "confirmed": v == "confirmed"}
        for i, v in enumerate(verdicts)
    ]
    return {"schema": GROUPS[1], "schema_version": GROUPS[2], "groups": groups}


def test_accepted_groups_become_supernodes_beside_hand_made_ones():
    graph = {"qParams": {"supernodes": [["mine", "0_9_3"]], "pinnedIds": []}, "nodes": [], "links": []}
    once = apply(graph, _record("confirmed", "absent"), "confirmed")
    assert once["qParams"]["supernodes"] == [["mine", "0_9_3"], ["S0", "0_0_3", "1_0_3"]]
    assert [x["accepted"] for x in once[GROUPS[0]]["groups"]] == [True, False]
    assert read_groups(once)["accept"] == "confirmed"
    again = apply(once, _record("absent", "confirmed"), "all")  # the first run's S0 is replaced, not kept twice
    assert again["qParams"]["supernodes"] == [["mine", "0_9_3"], ["S0", "0_0_3", "1_0_3"], ["S1", "0_1_3", "1_1_3"]]
    assert apply(again, _record("confirmed"), "none")["qParams"]["supernodes"] == [["mine", "0_9_3"]]
    with pytest.raises(BadValueError, match=r"already has groups named \['mine'\]"):
        apply(graph, {**_record("confirmed"), "groups": [{**_record("confirmed")["groups"][0], "name": "mine"}]}, "all")
    with pytest.raises(BadValueError, match="accept 'some' is not one of confirmed, all, none"):
        apply(graph, _record("confirmed"), "some")
    with pytest.raises(BadValueError, match="without members or verdict"):
        read_groups({GROUPS[0]: {**_record("confirmed"), "groups": [{"members": ["a"], "verdict": "fine"}]}})


@pytest.fixture(scope="module")
def graph(tiny, tiny_set):
    from workbench.circuits.feature.attribution_graph import build_graph
    from workbench.circuits.feature.graph_config import GraphConfig
    from workbench.circuits.feature.graph_json import to_neuronpedia
    from workbench.circuits.feature.transcoders import open_set

    cfg = GraphConfig(max_feature_nodes=40, heads=False)
    return to_neuronpedia(build_graph(tiny[0], open_set(tiny_set).load(0, "cpu", tiny[0]), PROMPT, "a", None, cfg))


def test_one_feature_ablated_alone_is_what_circuit_check_measures(tiny, tiny_set, graph):
    sites = load_dictionary(tiny_set, tiny[0])
    record = check_graph(tiny[0], sites, graph, CheckConfig(top_edges=0))
    g = GraphNodes(graph, "target")
    for row in record["nodes"][:3]:
        for s in ("frozen", "live"):
            assert measure_group(tiny[0], sites, g, [row["node_id"]], s) == pytest.approx(
                row[f"measured_{s}"], abs=1e-5
            )
    two = sorted(g.features, key=lambda n: (g.features[n][1], g.features[n][0]))
    far = [two[0], two[-1]] if g.features[two[0]][1] != g.features[two[-1]][1] else None
    if far:
        with pytest.raises(BadValueError, match="must share a position"):
            measure_group(tiny[0], sites, g, far, "frozen")


def test_every_proposal_shares_a_position_and_is_checked(tiny, tiny_set, graph):
    sites = load_dictionary(tiny_set, tiny[0])
    r = propose(tiny[0], sites, graph, GroupConfig(threshold=0.05))
    g = GraphNodes(graph, "target")
    predicted = g.predicted(graph["links"])
    assert r["groups"] and r["signals_used"] == ["decoder", "adjacency"]  # no cache nor labels given
    for x in r["groups"]:
        assert 2 <= len(x["members"]) <= 6 and len({g.features[n][1] for n in x["members"]}) == 1
        assert x["predicted"] == pytest.approx(sum(predicted[n] for n in x["members"]))
        assert x["verdict"] == x["verdict_frozen"] and x["interaction"] == pytest.approx(
            x["measured"] - x["members_measured"]
        )
    assert r["summary"]["proposed"] == len(r["groups"]) and r["config"]["threshold"] == 0.05
    bare = {**graph, "nodes": [n for n in graph["nodes"] if n["feature_type"] != "cross layer transcoder"]}
    assert propose(tiny[0], sites, bare)["groups"] == []  # no feature nodes: nothing proposed, no failure


def test_circuit_group_stores_proposals_in_a_recorded_graph(tiny, tiny_set, tmp_path, capsys):
    from circuit_tracer.frontend.graph_models import Model

    from workbench.circuits.feature.graph_config import GraphConfig
    from workbench.cli import main
    from workbench.steps.graphs import attribution_graph
    from workbench.workspace import Workspace

    ws = tmp_path / "ws"
    cfg = GraphConfig(max_feature_nodes=30, heads=False)
    _, folder = attribution_graph(Workspace(ws), tiny[0], tiny_set, PROMPT, "a", None, cfg=cfg, name="g")
    argv = ["circuit", "group", str(folder), "--workspace", str(ws), "--threshold", "0.05", "--accept", "all"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    d = json.loads((folder / "graph.json").read_text())
    record = d[GROUPS[0]]
    assert record["config"]["threshold"] == 0.05 and record["accept"] == "all" and record["groups"]
    assert d["qParams"]["supernodes"] == [[x["name"], *x["members"]] for x in record["groups"]]
    for x in record["groups"]:
        assert f"accepted {x['name']}: " in out and f"{x['measured']:+.4g} {x['verdict']}" in out
    Model(**d)  # circuit-tracer's own schema reads the file (its frontend ignores the workbench's field)
    manifest = json.loads((folder / "artifact.json").read_text())
    assert manifest["summary"]["groups_proposed"] == len(record["groups"])
    assert manifest["made_by"] == "workbench circuit graph" and "check_nodes_confirmed_share" not in manifest["summary"]
    assert main([*argv[:-1], "none"]) == 0
    assert json.loads((folder / "graph.json").read_text())["qParams"]["supernodes"] == []
    with pytest.raises(SystemExit):
        main([*argv[:-2], "--accept", "some"])
    assert "invalid choice: 'some'" in capsys.readouterr().err
