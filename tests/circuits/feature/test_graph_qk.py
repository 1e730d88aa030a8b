"""QK attribution on a graph's edges: every kept link that crosses a head carries, for each head it names, the
query-side and key-side sources of that head's score on the entry it uses, each part equal to
graph_heads.qk_attribution's (itself checked against interventions in test_attribution_graph.py), and the JSON
stays valid under circuit-tracer's schema; the entry a link uses is the one carrying most of its head's part."""

from __future__ import annotations

import torch
from circuit_tracer.frontend.graph_models import Model

from workbench.circuits.feature.attribution_graph import build_graph
from workbench.circuits.feature.graph_heads import qk_attribution, split_entries
from workbench.circuits.feature.graph_json import to_neuronpedia
from workbench.circuits.feature.replacement import ActiveFeatures, ReplacementModel
from workbench.circuits.feature.transcoders import open_set
from workbench.corpus import tasks


def test_every_attention_mediated_link_of_an_ioi_graph_carries_its_qk_sources(tiny, tiny_set):
    model, tok = tiny
    query = tasks.queries("ioi", 1, seed=0, tokenizer=tok)[0]
    g = build_graph(model, tiny_set, query.prompt, answer=query.answer, wrong_answer=query.wrong, qk=True)
    d = to_neuronpedia(g)
    Model(**d)
    pos = {n["node_id"]: n["ctx_idx"] for n in d["nodes"]}
    through = [link for link in d["links"] if set(link.get("heads", {})) - {"direct"}]
    assert len(through) > 20
    for link in through:
        entries = link["qk"]
        assert {e["head"] for e in entries} == set(link["heads"]) - {"direct"}, link
        for e in entries:
            assert e["key"] == pos[link["source"]] <= e["query"] <= pos[link["target"]], (link, e)
            assert e["query_sources"] and e["key_sources"]
            assert len(e["query_sources"]) <= g.config["qk_sources"]
    # each stored part is qk_attribution's on the same entry (the start token's error nodes are not nodes here)
    rm = ReplacementModel(model, open_set(tiny_set).load(), model.to_tokens(query.prompt)[0])
    active = ActiveFeatures.of(rm)
    key = {tuple(f): i for i, f in enumerate(torch.stack([active.layer, active.pos, active.latent], 1).tolist())}
    n_rest = rm.L * rm.P + rm.P
    cols = torch.tensor([key[tuple(f)] for f in g.features.tolist()] + list(range(len(active), len(active) + n_rest)))
    nodes = torch.ones(g.n_sources, dtype=torch.bool)
    nodes[g.n_features + torch.arange(rm.L) * rm.P] = False
    for i in torch.linspace(0, g.qk["pairs"].shape[0] - 1, 4).long().tolist():
        layer, head, q, k = g.qk["pairs"][i].tolist()
        ref = qk_attribution(rm, layer, head, q, k)
        assert abs(ref["score"] - float(g.qk["score"][i])) < 1e-4
        for side in ("query", "key"):
            torch.testing.assert_close(g.qk[side][i][nodes], ref[side][cols][nodes].float(), atol=1e-4, rtol=1e-3)
            assert g.qk[side][i].abs().sum() > 0
    # each use's entry is the one carrying the most of its head's part of the edge (split_entries's argmax)
    uses = g.qk["uses"][torch.linspace(0, g.qk["uses"].shape[0] - 1, 8).long()]
    parts = split_entries(rm, g, g.heads["edges"][uses[:, 0]])
    for (_, i), p in zip(uses.tolist(), parts):
        layer, head, q, k = g.qk["pairs"][i].tolist()
        assert int(p[layer, head].abs().argmax()) == q and p[layer, head].abs().max() > 0
