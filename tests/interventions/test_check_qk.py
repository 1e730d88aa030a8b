"""The check of a graph's QK attribution (check_qk.py): on hand-set models, the head's score read with a source
removed against the part the graph stores, each verdict word in the reading that gives it; on the embedded model,
the frozen reading reproduces every checked part; `circuit check` stores and prints them."""

import json

import pytest
import torch

from tests.interventions.test_check import (
    PROMPT,
    _blank_model,
    _previous_token_model,
    _shortcut_set,
    _write_set,
    _zero_transcoder,
)
from workbench.circuits.feature.attribution_graph import build_graph
from workbench.circuits.feature.graph_config import GraphConfig
from workbench.circuits.feature.graph_json import to_neuronpedia
from workbench.circuits.feature.transcoders import open_set
from workbench.circuits.neuronpedia import GRAPH_CHECK, read_feature_graph
from workbench.interventions.check import check_graph
from workbench.interventions.check_qk import top_parts
from workbench.interventions.config import CheckConfig
from workbench.interventions.dictionary import load_dictionary

ENTRY = ("a0.h0", 2, 1)  # the previous-token head at position 2 looking at position 1


def _qk_check(model, folder, **kw) -> tuple[dict, dict]:
    """(the graph built with QK attribution on 'BOS A B', its check's QK rows by (source, head, query, key, side))."""
    graph = to_neuronpedia(
        build_graph(model, open_set(folder).load(0, "cpu", model), [0, 1, 2], 4, None, GraphConfig(qk=True))
    )
    r = check_graph(model, load_dictionary(folder, model), graph, CheckConfig(top_edges=4, **kw))
    return graph, {(q["source"], q["head"], q["query"], q["key"], q["side"]): q for q in r["qk"]}


def test_the_spurious_edges_effect_is_a_qk_part_the_check_confirms(tmp_path):
    """The issue-45 model with the transcoder giving 0.7 of its feature's input to B's own embedding: the check
    finds that edge absent along its path, and its live effect goes through the head's QK. The graph's QK
    attribution shows where: on the true edge A -> feature, the head's entry (2, 1) has B's embedding (its
    position) as its query-side source, 60/sqrt(2), and A's (position 1) as its key-side one. Removing B's
    embedding drops the score by all of it, frozen and live: confirmed."""
    model = _previous_token_model()
    graph, r = _qk_check(model, _shortcut_set(model, tmp_path, {6: 0.3, 1: 0.7}))
    (link,) = [lk for lk in graph["links"] if (lk["source"], lk["target"]) == ("E_1_1", "0_0_2")]
    assert [(e["head"], e["query"], e["key"]) for e in link["qk"]] == [ENTRY]
    q = r["E_2_2", *ENTRY, "query"]
    assert q["part"] == pytest.approx(60 / 2**0.5) and q["predicted"] == pytest.approx(-q["part"])
    assert q["measured_frozen"] == pytest.approx(q["predicted"], rel=1e-5)
    assert q["measured_live"] == pytest.approx(q["predicted"], rel=1e-5)
    assert (q["verdict_frozen"], q["verdict_live"], q["verdict"], q["confirmed"]) == ("confirmed",) * 3 + (True,)
    k = r["E_1_1", *ENTRY, "key"]
    assert k["verdict"] == "confirmed" and k["measured"] == pytest.approx(-60 / 2**0.5, rel=1e-5)
    assert set(r) == {("E_2_2", *ENTRY, "query"), ("E_1_1", *ENTRY, "key")}


def _two_hop_model(c: float):
    """Two layers, tokens and positions as the issue-45 model (e0 A, e1 B, e3 BOS; e4 e5 e8 positions 0 1 2). Layer
    0: the previous-token head copies A into e6 at position 2 while B's position (e8) is there (else it looks at
    BOS). Layer 1's head copies A into the OUT logit's e7 from position 1 (its key: e5), its query at position 2
    reading e8 (weight 1) and c times layer 0's copy e6. The graph's query-side part of B's embedding on that
    entry is 1/sqrt(2) whatever c is (layer 0's pattern frozen); removed live, layer 0 looks at BOS and takes its
    copy away too: the score moves by -(1 + c)/sqrt(2). MLPs are zero."""
    model = _blank_model(d_model=12, n_ctx=3, d_head=2, name="two-hop", n_layers=2)
    e = torch.eye(12)
    a0, a1 = model.blocks[0].attn, model.blocks[1].attn
    with torch.no_grad():
        model.W_E[0], model.W_E[1], model.W_E[2], model.W_E[3] = e[3], e[0], e[1], e[2]
        model.W_pos[0], model.W_pos[1], model.W_pos[2] = e[4], e[5], e[8]
        a0.W_Q[0, 8, 0], a0.W_K[0, 5, 0], a0.b_Q[0, 1], a0.W_K[0, 3, 1] = 60.0, 1.0, 10.0, 1.0
        a0.W_V[0, 0, 0], a0.W_O[0, 0, 6] = 1.0, 1.0
        a1.W_Q[0, 8, 0], a1.W_Q[0, 6, 0], a1.W_K[0, 5, 0] = 1.0, c, 1.0
        a1.W_V[0, 0, 0], a1.W_O[0, 0, 7] = 1.0, 1.0
        model.W_U[7, 4] = 1.0
    return model.eval()


@pytest.mark.parametrize(
    "c, word",
    [
        (0.0, "confirmed"),
        (2.0, "under-predicted"),
        (-0.7, "over-predicted"),
        (-1.0, "absent"),
        (-3.0, "sign-flipped"),
    ],
)
def test_a_query_part_through_an_earlier_heads_pattern_gets_its_word_live(tmp_path, c, word):
    """Frozen, B's part is measured exactly (-1/sqrt(2), confirmed: the graph's arithmetic); live, layer 0's
    pattern moves with it and the score moves by -(1 + c)/sqrt(2): 1x, 3x, 0.3x, 0 and -2x the prediction."""
    model = _two_hop_model(c)
    folder = _write_set(model, tmp_path, [_zero_transcoder(12), _zero_transcoder(12)])
    _, r = _qk_check(model, folder, semantics="live")
    q = r["E_2_2", "a1.h0", 2, 1, "query"]
    assert q["predicted"] == pytest.approx(-(2**-0.5), rel=1e-5)
    assert q["measured_frozen"] == pytest.approx(q["predicted"], rel=1e-5) and q["verdict_frozen"] == "confirmed"
    assert q["measured_live"] == pytest.approx(-(1 + c) * 2**-0.5, abs=3e-3)  # BOS's score is not -inf
    assert (q["verdict_live"], q["verdict"], q["confirmed"]) == (word, word, word == "confirmed")


def test_the_largest_parts_are_checked_once_per_entry():
    """An entry two links share is checked once; parts from error nodes are left out; the n largest |part| first."""
    entry = {"head": "a1.h0", "query": 3, "key": 1, "score": 2.0}
    sides = {"query_sources": [["E_5_3", 0.5], ["err_0_3", 3.0]], "key_sources": [["0_7_1", -1.5], ["E_4_1", 0.1]]}
    links = [{"qk": [entry | sides]}, {"qk": [entry | sides]}, {"source": "E_4_1"}]
    rows = top_parts(links, {"E_5_3": 3, "E_4_1": 1}, 2)
    assert [(r["source"], r["side"], r["part"]) for r in rows] == [("0_7_1", "key", -1.5), ("E_5_3", "query", 0.5)]


def test_frozen_qk_parts_reproduce_the_graph_on_the_embedded_model(tiny, tc_set):
    """With patterns and scales frozen and the MLPs between held, a feature's or an embedding's removal moves the
    score by exactly minus its part (the graph's QK attribution, LayerNorm and all)."""
    model = tiny[0]
    cfg = GraphConfig(max_feature_nodes=40, qk=True)
    graph = to_neuronpedia(build_graph(model, open_set(tc_set).load(0, "cpu", model), PROMPT, "a", None, cfg))
    r = check_graph(model, load_dictionary(tc_set, model), graph, CheckConfig(top_edges=0, top_qk=8))
    assert len(r["qk"]) == 8 and {q["side"] for q in r["qk"]} == {"query", "key"}
    assert any("_" in q["source"] and not q["source"].startswith("E_") for q in r["qk"])  # a feature among them
    for q in r["qk"]:
        assert q["measured_frozen"] == pytest.approx(q["predicted"], rel=1e-3, abs=1e-4), q
    assert r["summary"]["qk_confirmed_share"] == 1.0 and r["config"]["top_qk"] == 8


def test_circuit_check_stores_and_prints_the_qk_parts(tiny, tc_set, tmp_path, capsys):
    from workbench import steps
    from workbench.cli import main
    from workbench.workspace import Workspace

    ws = tmp_path / "ws"
    cfg = GraphConfig(max_feature_nodes=10, qk=True)
    _, folder = steps.attribution_graph(Workspace(ws), tiny[0], tc_set, PROMPT, "a", None, cfg=cfg, name="g")
    argv = ["circuit", "check", str(folder), "--workspace", str(ws), "--top-edges", "1", "--top-qk", "3"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    d = json.loads((folder / "graph.json").read_text())
    record = read_feature_graph(d).check
    assert record["config"]["top_qk"] == 3 and len(record["qk"]) == 3 and record is not None
    assert d[GRAPH_CHECK[0]]["summary"]["qk_checked"] == 3
    assert "qk: 3 checked" in out
    for q in record["qk"]:
        head = f"qk {q['source']} -> {q['head']} [{q['query']}, {q['key']}] ({q['side']})"
        assert f"{head}: score {q['score']:+.4g}, predicted {q['predicted']:+.4g}; direct (frozen)" in out
