"""Feature-level query circuits on the embedded model with a transcoder set and a cross-layer transcoder trained
here: the exact evaluation against independent interventions in the real model, the search's NDF re-measured, the
saved file and the circuit-tracer export against their schemas, the per-head split of the circuit's edges, and bad
input."""

from __future__ import annotations

import json

import pytest
import torch

from workbench.circuits import neuronpedia, schema
from workbench.circuits.feature.feature_circuit import find_feature_circuit
from workbench.circuits.feature.feature_patching import FeatureSetup
from workbench.circuits.feature.transcoders import open_set
from workbench.circuits.inputs import prepare
from workbench.circuits.metrics import Metric
from workbench.errors import BadValueError, DamagedFileError

PROMPT = "When Mary and John went to the store , John gave a drink to"
CF = "When Mary and John went to the store , Anna gave a drink to"


@pytest.fixture(scope="module", params=["tiny_set", "tiny_clt"])
def dictionary(request):
    """The embedded model's per-layer transcoder set or its cross-layer transcoder (a folder either way)."""
    return request.getfixturevalue(request.param)


@pytest.fixture(scope="module")
def setup(tiny, dictionary):
    model, _ = tiny
    q = prepare(model, PROMPT, "Mary", CF, "John")
    return model, FeatureSetup(model, open_set(dictionary).load(), q)


@pytest.fixture(scope="module")
def found(tiny, dictionary):
    model, _ = tiny
    return find_feature_circuit(model, dictionary, PROMPT, "Mary", CF, wrong="John", target_ndf=0.8)


def test_every_node_kept_is_the_model_and_none_is_the_counterfactual(setup):
    model, s = setup
    both = s.evaluate(torch.stack([torch.ones(s.n_nodes, dtype=torch.bool), torch.zeros(s.n_nodes, dtype=torch.bool)]))
    with torch.no_grad():
        clean = model(s.query.tokens[None])[0, -1]
        cf = model(s.query.cf_tokens[None])[0, -1]
    torch.testing.assert_close(both[0], clean, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(both[1], cf, atol=1e-4, rtol=1e-4)
    assert s.n_features > 100 and (s.clean_values != s.ablated_values).any()


@pytest.mark.parametrize("which", ["first", "last"])
def test_one_node_out_is_its_intervention_in_the_real_model(setup, which):
    """An embedding left out is the real model with that token's embedding swapped for the counterfactual's; a
    feature of the first (last) layer left out is the real model with its decoder writes, into every layer it
    writes to (a CLT's: every later layer), moved to the counterfactual value."""
    model, s = setup
    pos = int((s.query.tokens != s.query.cf_tokens).nonzero()[0])
    layer = 0 if which == "first" else s.L - 1
    node = ((s.features[:, 0] == layer) & (s.clean_values != s.ablated_values)).nonzero().flatten()[0]
    _, fpos, latent = s.features[node].tolist()
    masks = torch.ones(2, s.n_nodes, dtype=torch.bool)
    masks[0, s.n_features + s.n_errors + pos] = False
    masks[1, node] = False
    got = s.evaluate(masks)
    emb = s.abl.embed[pos]

    def swap(act, hook):
        act[:, pos] = emb
        return act

    step = s.ablated_values[node] - s.clean_values[node]
    writes = {t: s.tcs.decoder(layer, t, torch.tensor([latent]))[0] * step for t in s.tcs.writes_to(layer)}

    def move(act, hook, t):
        act[:, fpos] += writes[t]
        return act

    hooks = [(f"blocks.{t}.hook_mlp_out", lambda a, hook, t=t: move(a, hook, t)) for t in writes]
    with torch.no_grad():
        a = model.run_with_hooks(s.query.tokens[None], fwd_hooks=[("blocks.0.hook_resid_pre", swap)])[0, -1]
        b = model.run_with_hooks(s.query.tokens[None], fwd_hooks=hooks)[0, -1]
    torch.testing.assert_close(got[0], a, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got[1], b, atol=1e-4, rtol=1e-4)


def test_attribution_patching_is_the_first_order_effect(setup):
    """The score of a last-layer error node is d metric / d error . (ablated - clean): a small step along
    (ablated - clean) moves the metric by the score times the step."""
    model, s = setup
    metric = Metric("logit_diff", s.query.answer, s.query.wrong, s.clean_logits)
    scores = s.node_gradients(metric)
    node = s.n_features + (s.L - 1) * s.P + s.P - 1
    d = s.abl.errors[s.L - 1][s.P - 1] - s.clean.errors[s.L - 1][s.P - 1]
    eps = 1e-2

    def run(step):
        def nudge(act, hook):
            act[:, -1] += step * d
            return act

        with torch.no_grad():
            logits = model.run_with_hooks(s.query.tokens[None], fwd_hooks=[(f"blocks.{s.L - 1}.hook_mlp_out", nudge)])
        return float(metric(logits[0, -1]))

    change = (run(eps) - run(-eps)) / (2 * eps)  # central difference: second-order terms cancel
    assert change == pytest.approx(float(scores[node]), rel=1e-2, abs=1e-3)


def _measured_ndf(model, dictionary, c) -> tuple[float, torch.Tensor]:
    """(the circuit's NDF, the NDF of each single drop from it) measured again in a fresh setup."""
    s = FeatureSetup(model, open_set(dictionary).load(), prepare(model, PROMPT, "Mary", CF, "John"))
    names = [s.node_name(i) for i in range(s.n_nodes)]
    mask = torch.zeros(s.n_nodes, dtype=torch.bool)
    mask[[names.index(n["name"]) for n in c.nodes]] = True
    drops = mask[None].repeat(len(c.nodes), 1)
    drops[torch.arange(len(c.nodes)), mask.nonzero().flatten()] = False
    metric = Metric("logit_diff", s.query.answer, s.query.wrong, s.clean_logits)
    clean, empty = float(metric(s.clean_logits)), float(metric(s.abl.logits))
    ndf = 1 - (1 - (metric(s.evaluate(torch.cat([mask[None], drops]))) - empty) / (clean - empty)).abs().clamp(max=1)
    return float(ndf[0]), ndf[1:]


def test_the_found_circuit_reaches_its_target_when_measured_again(found, tiny, dictionary):
    c, g = found
    model, _ = tiny
    ndf, _ = _measured_ndf(model, dictionary, c)
    assert ndf == pytest.approx(c.ndf, abs=1e-4) and c.ndf >= 0.8
    assert 0 < len(c.nodes) < c.universe["nodes"] / 4
    assert c.faithfulness["baseline_topk_ndf"] is not None and c.edges
    assert {"query", "graph", "mean"} <= set(c.method["rankings"])


@pytest.mark.parametrize("drops", ["ordered", "greedy"])
def test_both_drop_rules_end_one_minimal(found, tiny, dictionary, drops):
    """Ordered drops (the feature default) stop by greedy's rule: the circuit reaches the target and no single
    node can be dropped from it without falling below, measured again; greedy's circuit has the same property."""
    model, _ = tiny
    if drops == "ordered":
        c = found[0]
    else:
        c, _ = find_feature_circuit(model, dictionary, PROMPT, "Mary", CF, wrong="John", target_ndf=0.8, drops=drops)
    assert c.method["search"]["drops"] == drops
    ndf, single = _measured_ndf(model, dictionary, c)
    assert ndf >= 0.8 and (single < 0.8).all(), (ndf, single.max())


def test_circuit_edges_split_over_heads_sum_to_the_edge(found, tiny, dictionary):
    """The full split of each circuit edge (every head's first-hop part and the direct part, recomputed) sums to
    the edge; the file keeps the parts of at least 5% of the edge's |parts|, with the same values."""
    from workbench.circuits.feature import graph_heads
    from workbench.circuits.feature.feature_circuit import circuit_edges
    from workbench.circuits.feature.replacement import ReplacementModel

    c, g = found
    model, _ = tiny
    rm = ReplacementModel(model, open_set(dictionary).load(), torch.tensor(g.tokens))
    split = graph_heads.split_edges(rm, g, circuit_edges(g, c.graph_nodes))
    edges = g.adjacency[split["edges"][:, 0], split["edges"][:, 1]]
    torch.testing.assert_close(split["weights"].sum(1), edges, rtol=1e-4, atol=1e-5)
    assert len(c.edges) == len(edges) > 0
    for e, w in zip(c.edges, split["weights"]):
        kept = {split["names"][k]: float(w[k]) for k in (w.abs() >= 0.05 * w.abs().sum()).nonzero().flatten()}
        assert e["heads"] == pytest.approx(kept, rel=1e-5, abs=1e-7) and e["heads"]
    assert any(set(e["heads"]) - {"direct"} for e in c.edges), "some circuit edge crosses attention"


def test_the_file_and_the_export_follow_their_schemas(found, tmp_path):
    from circuit_tracer.frontend.graph_models import Model

    from workbench.circuits.feature.graph_json import to_neuronpedia

    c, g = found
    c.save(tmp_path / "c.json")
    d = schema.read_feature_circuit(json.loads((tmp_path / "c.json").read_text()))
    assert [n["name"] for n in d["nodes"]] == [n["name"] for n in c.nodes]
    to_neuronpedia(g, tmp_path / "np.json", circuit=c)
    np_graph = json.loads((tmp_path / "np.json").read_text())
    Model(**np_graph)
    kinds = {n["feature_type"] for n in np_graph["nodes"]}
    assert "cross layer transcoder" in kinds and "logit" in kinds
    fg = neuronpedia.read_feature_graph(np_graph)
    assert len(fg.nodes) <= len(c.nodes) + len(g.logit_tokens) and fg.n_layers == g.n_layers
    whole = to_neuronpedia(g, circuit=c, pinned=True)
    Model(**whole)
    assert whole["qParams"]["pinnedIds"] and len(whole["nodes"]) >= len(fg.nodes) - len(g.logit_tokens)


def test_files_of_another_schema_version_are_refused(found):
    c, g = found
    d = c.to_dict()
    with pytest.raises(DamagedFileError, match="schema_version 2 is not the version"):
        schema.read_feature_circuit({**d, "schema_version": 2})
    with pytest.raises(DamagedFileError, match="expected 'workbench.feature_circuit'"):
        schema.read_feature_circuit({**d, "schema": "workbench.circuit"})
    from workbench.circuits.feature.graph_json import to_neuronpedia

    graph = to_neuronpedia(g)
    graph["metadata"]["schema_version"] = 2
    with pytest.raises(DamagedFileError, match="schema_version is 2, expected 1"):
        neuronpedia.read_feature_graph(graph)


def test_bad_queries_and_settings_are_refused(tiny, tiny_set):
    model, _ = tiny
    with pytest.raises(BadValueError, match="not available for feature circuits"):
        find_feature_circuit(model, tiny_set, PROMPT, "Mary", CF, ablation="mean")
    with pytest.raises(BadValueError, match="either a budget or a target NDF"):
        find_feature_circuit(model, tiny_set, PROMPT, "Mary", CF, budget=0.1, target_ndf=0.8)
    with pytest.raises(BadValueError, match=r"target_ndf=1.5 is outside \(0, 1\]"):
        find_feature_circuit(model, tiny_set, PROMPT, "Mary", CF, target_ndf=1.5)
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        find_feature_circuit(model, tiny_set, PROMPT, " Zorblax", CF)
