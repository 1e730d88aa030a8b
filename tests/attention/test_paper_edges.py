"""paper_edges: the paper's edge count on a hand-checked circuit, each open choice, its refusals, and the open
entries of a dense and a gated model."""

import pytest
import torch

from workbench.attention import gates as G
from workbench.attention.config import GateConfig
from workbench.attention.paper_edges import (
    PaperEdgeConfig,
    component_pairs,
    open_entry_counts,
    pair_readers,
    paper_edges,
)
from workbench.circuits.component.graph import Graph
from workbench.errors import BadValueError

from .conftest import build

# 2 layers x 2 heads: the workbench counts 7 edges; as component pairs they are
#   a0.h0 -> a1.h1 (q, k and v merged: one pair), a0.h0 -> m1, m0 -> a1.h1 (v): 3 pairs of components,
#   plus input -> a0.h0 and m1 -> logits with the embedding and the logits: 5 pairs.
EDGES = ["input->a0.h0<q>", "a0.h0->a1.h1<q>", "a0.h0->a1.h1<k>", "a0.h0->a1.h1<v>", "a0.h0->m1", "m0->a1.h1<v>"]
EDGES += ["m1->logits"]
GRAPH = Graph(n_layers=2, n_heads=2, n_kv_heads=2, d_model=8, parallel_attn_mlp=False, attn_only=False)


def _mask(names):
    mask = torch.zeros(GRAPH.n_edges, dtype=torch.bool)
    mask[[GRAPH.edge_ids[n] for n in names]] = True
    return mask


def test_component_pairs_by_hand():
    mask = _mask(EDGES)
    assert int(mask.sum()) == 7  # the workbench's own count
    assert component_pairs(GRAPH, mask) == 3
    assert component_pairs(GRAPH, mask, "all") == 5
    assert pair_readers(GRAPH, mask)[("a0.h0", "a1.h1")] == {"q", "k", "v"}


def test_entry_resolved_by_hand():
    """Open entries of a1.h1: 3 of a 4-token prompt's 10. a0.h0 -> a1.h1 and m0 -> a1.h1 reach its key or value:
    3 each; a0.h0 -> m1: one per position, 4; with the ends, input -> a0.h0 through q only: 4, m1 -> logits: 1."""
    mask, opened = _mask(EDGES), torch.tensor([[10, 10], [10, 3]])
    entry = PaperEdgeConfig(per="entry")
    assert paper_edges(GRAPH, mask, entry, opened, n_pos=4) == 3 + 3 + 4
    assert paper_edges(GRAPH, mask, PaperEdgeConfig("all", "entry"), opened, n_pos=4) == 3 + 3 + 4 + 4 + 1
    assert paper_edges(GRAPH, mask, PaperEdgeConfig()) == 3


def test_refusals_name_the_value_and_the_choices():
    with pytest.raises(BadValueError, match=r"endpoints='heads' is not valid; choose one of \['components', 'all'\]"):
        PaperEdgeConfig(endpoints="heads")
    with pytest.raises(BadValueError, match=r"per='token' is not valid; choose one of \['component', 'entry'\]"):
        PaperEdgeConfig(per="token")
    with pytest.raises(BadValueError, match="needs open_entries and n_pos"):
        paper_edges(GRAPH, _mask(EDGES), PaperEdgeConfig(per="entry"))
    with pytest.raises(BadValueError, match=r"shape \(3,\)"):
        component_pairs(GRAPH, torch.zeros(3, dtype=torch.bool))


def test_open_entries_dense_and_gated(small, tokenizer):
    tokens = torch.arange(1, 7)
    dense = open_entry_counts(small, tokens)
    assert dense.shape == (small.cfg.n_layers, small.cfg.n_heads)
    assert (dense == 6 * 7 // 2).all()  # every causal entry of a 6-token prompt
    shut = G.install(build(tokenizer, seed=1), GateConfig(init_bias=-50.0)).eval()
    assert (open_entry_counts(shut, tokens) == 0).all()  # every gate closed: no entry carries weight
