"""Attention figures: closed gates apart from small weights, base - sparse differences, per-head gate masks,
and which heads only one model's circuits use."""

import numpy as np

from app.figures import attention as fa

PATTERN = np.array([[1.0, 0, 0], [0.99999, 0.00001, 0], [0.5, 0.0, 0.25]])
GATES = np.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=bool)  # query 2's key 1 closed; key 1 of query 1 open


def test_closed_gates_get_their_own_colour_and_small_open_weights_do_not():
    fig = fa.attention_heatmap(PATTERN, ["a", "b", "c"], "t", closed=~GATES)
    weights, closed = fig.data
    assert closed.name == "closed gate" and closed.colorscale[0][1] == fa.CLOSED and not closed.showscale
    z = np.array(closed.z, dtype=float)
    assert np.argwhere(~np.isnan(z)).tolist() == [[2, 1]]  # the one closed causal cell; future keys stay blank
    assert np.array(weights.z, dtype=float)[1, 1] == 0.00001 and np.isnan(z[1, 1])  # a small open weight: blue scale
    assert len(fa.attention_heatmap(PATTERN, ["a", "b", "c"], "t").data) == 1


def test_difference_is_base_minus_sparse_on_a_symmetric_scale_with_the_gate_in_the_hover():
    base = np.array([[1.0, 0, 0], [0.6, 0.4, 0], [0.2, 0.5, 0.3]])
    fig = fa.difference_heatmap(base, PATTERN, ["a", "b", "c"], "d", closed=~GATES)
    h = fig.data[0]
    z = np.array(h.z, dtype=float)
    assert z[2, 1] == 0.5 and np.isnan(z[0, 2]) and h.zmid == 0 and h.zmin == -h.zmax == -0.5
    assert h.customdata[2][1][2] == "closed" and h.customdata[2][2][2] == "open"
    assert "base − sparse" in h.colorbar.title.text


def test_gate_masks_draw_every_head_of_the_layer_with_its_open_count():
    gates = np.stack([GATES, np.tri(3, dtype=bool)])
    fig = fa.gate_masks(gates, ["a", "b", "c"], layer=2)
    assert len(fig.data) == 2
    titles = [a.text for a in fig.layout.annotations]
    assert titles == ["a2.h0: 5 of 6 open", "a2.h1: 6 of 6 open"]
    z = np.array(fig.data[0].z, dtype=float)
    assert z[2, 1] == 0 and z[2, 2] == 1 and np.isnan(z[0, 1])


def test_heads_present_in_only_one_model():
    rows = fa.head_membership({"a0.h1", "a3.h0"}, {"a3.h0", "a2.h2"})
    assert rows == [
        {"head": "a0.h1", "in": "only base"},
        {"head": "a2.h2", "in": "only sparse"},
        {"head": "a3.h0", "in": "both"},
    ]
    q = lambda b, s: {  # noqa: E731
        "base": {"component": {"0.8": {"heads": b}}},
        "sparse": {"component": {"0.8": {"heads": s}}},
    }
    skipped = {**q(["a1.h1"], []), "base": {"skipped": "no logit gap"}}
    res = {"targets": [0.8], "queries": [q(["a0.h1", "a3.h0"], ["a3.h0"]), q(["a0.h1"], []), skipped]}
    assert fa.heads_only_in_one(res) == [
        {"NDF": "0.8", "heads only in": "base", "not in": "sparse", "heads (queries)": "a0.h1 (2)"},
        {"NDF": "0.8", "heads only in": "sparse", "not in": "base", "heads (queries)": "none"},
    ]


def test_heads_only_in_one_model_with_a_control_covers_each_pair_of_the_split():
    """A run with a control: base and sparse, base and control (training), control and sparse (the gates), over the
    queries all three models have a gap on."""
    q = lambda b, c, s: {  # noqa: E731
        side: {"component": {"0.9": {"heads": h}}} for side, h in (("base", b), ("control", c), ("sparse", s))
    }
    skipped = {**q(["a1.h1"], [], []), "control": {"skipped": "no logit gap"}}
    queries = [q(["a0.h1", "a3.h0"], ["a3.h0", "a2.h2"], ["a3.h0"]), q(["a0.h1"], ["a0.h1"], []), skipped]
    rows = fa.heads_only_in_one({"targets": [0.9], "control_model": "c", "queries": queries})
    assert [(r["heads only in"], r["not in"], r["heads (queries)"]) for r in rows] == [
        ("base", "sparse", "a0.h1 (2)"),
        ("sparse", "base", "none"),
        ("base", "control", "a0.h1 (1)"),
        ("control", "base", "a2.h2 (1)"),
        ("control", "sparse", "a0.h1 (1), a2.h2 (1)"),
        ("sparse", "control", "none"),
    ]
