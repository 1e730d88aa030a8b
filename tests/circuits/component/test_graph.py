import pytest

from workbench.circuits.component.graph import Graph
from workbench.errors import BadValueError


def test_gpt2_small_edge_count_matches_methods_md():
    assert Graph(12, 12, 12, 768).n_edges == 32491


def test_tiny_graph_names_and_order(tiny_shape):
    g = Graph.from_model(tiny_shape)
    assert g.n_edges == 479
    assert g.writers[:3] == ["input", "a0.h0", "a0.h1"] and g.readers[-1] == "logits"
    assert "a0.h1->a3.h2<q>" in g.edge_ids and "a2.h0->m2" in g.edge_ids and "m3->logits" in g.edge_ids
    assert "a3.h2->a1.h0<k>" not in g.edge_ids and "m1->a1.h0<q>" not in g.edge_ids


def test_gqa_keeps_kv_groups(gqa):
    g = Graph.from_model(gqa)
    assert (g.n_heads, g.n_kv_heads) == (4, 2)
    assert "a0.h3->a1.kv1<k>" in g.edge_ids and "a0.h3->a1.h3<q>" in g.edge_ids
    assert not any("a1.h3<k>" in e for e in g.edges)
    assert g.reader_node("a1.kv1<v>") == ["a1.h2", "a1.h3"]


def test_parallel_attention_mlp_does_not_read_same_layer_heads():
    g = Graph(2, 2, 2, 8, parallel_attn_mlp=True)
    assert "a1.h0->m1" not in g.edge_ids and "a0.h0->m1" in g.edge_ids
    assert "a1.h0->m1" in Graph(2, 2, 2, 8).edge_ids


def test_attn_only_has_no_mlp_nodes():
    g = Graph(2, 2, 2, 8, attn_only=True)
    assert not any(n.startswith("m") for n in g.nodes)


def test_mismatch_names_both_shapes():
    with pytest.raises(BadValueError, match="n_layers"):
        Graph(2, 2, 2, 8).check_same(Graph(3, 2, 2, 8))
