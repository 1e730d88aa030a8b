import torch

from workbench.circuits.component.graph import Graph
from workbench.circuits.component.select import greedy, node_names, prune, topk

G = Graph(2, 2, 2, 8)


def _mask(*names):
    m = torch.zeros(G.n_edges, dtype=torch.bool)
    m[[G.edge_ids[n] for n in names]] = True
    return m


def test_prune_drops_edges_off_input_logits_paths():
    m = _mask("input->a0.h0<v>", "a0.h0->logits", "a0.h1->m1", "input->a1.h0<q>")
    kept = prune(G, m)
    assert [G.edges[i] for i in kept.nonzero().flatten()] == ["input->a0.h0<v>", "a0.h0->logits"]
    assert node_names(G, kept) == ["input", "a0.h0", "logits"]


def test_prune_batched_equals_single():
    masks = torch.rand(4, G.n_edges, generator=torch.Generator().manual_seed(0)) < 0.2
    assert torch.equal(prune(G, masks), torch.stack([prune(G, m) for m in masks]))


def test_topk_and_greedy_respect_budget_and_connect():
    r = torch.rand(G.n_edges, generator=torch.Generator().manual_seed(1))
    for k in (1, 3, 8, 20):
        for m in (topk(G, r, k), greedy(G, r, k)):
            assert int(m.sum()) <= k
            assert torch.equal(prune(G, m), m)
    assert int(greedy(G, r, G.n_edges).sum()) == G.n_edges
