"""Gated attention: exact semantics at evaluation, straight-through training, hooks, GQA, save/load."""

import math

import pytest
import torch
from transformer_lens.hook_points import HookPoint

from workbench.attention import gates as G
from workbench.attention.config import GateConfig
from workbench.errors import BadValueError
from workbench.models import load, save

from .conftest import build


def _tokens(model, n=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, model.cfg.d_vocab, (2, n), generator=g)


def test_all_open_gates_leave_the_model_unchanged_and_keep_every_hook_name(small):
    t = _tokens(small)
    base_logits = small(t)
    names = set(small.hook_dict)
    G.install(small, GateConfig(init_bias=1e4))
    torch.testing.assert_close(small(t), base_logits, atol=1e-5, rtol=1e-5)
    assert names < set(small.hook_dict)
    assert set(small.hook_dict) - names == {f"blocks.{i}.attn.hook_gate" for i in range(small.cfg.n_layers)}
    assert float(G.expected_open_fraction(small)) == 1.0


def test_evaluation_gates_are_deterministic_and_closed_edges_leave_the_softmax(small):
    t = _tokens(small)
    G.install(small, GateConfig(gate="log_prob", init_bias=2.5))
    with torch.no_grad():
        for g in G.gates(small):  # per-head differences, so heads open different edges
            g.scale.copy_(torch.tensor([1.0, 0.5, 2.0, 0.0]))
    _, cache = small.run_with_cache(t)
    _, again = small.run_with_cache(t)
    n = t.shape[1]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    for i in range(small.cfg.n_layers):
        gate, pat = cache[f"blocks.{i}.attn.hook_gate"], cache[f"blocks.{i}.attn.hook_pattern"]
        assert torch.equal(gate, again[f"blocks.{i}.attn.hook_gate"])
        # recompute: open iff sigmoid(scale * log_prob + bias) > 0.5, over the dense scores
        q, k = cache[f"blocks.{i}.attn.hook_q"], cache[f"blocks.{i}.attn.hook_k"]
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(small.cfg.d_head)
        scores = scores.masked_fill(~causal, -math.inf)
        logit = torch.tensor([1.0, 0.5, 2.0, 0.0])[:, None, None] * scores.log_softmax(-1).nan_to_num(neginf=0) + 2.5
        expect = (torch.sigmoid(logit) > 0.5) & causal
        assert torch.equal(gate.bool(), expect)
        assert 0 < gate.sum() < causal.sum() * 2 * 4
        masked = scores.masked_fill(~expect, -math.inf).softmax(-1).nan_to_num(0)
        torch.testing.assert_close(pat, masked, atol=1e-6, rtol=1e-5)
        assert torch.equal(cache[f"blocks.{i}.attn.hook_attn_scores"].isinf(), ~expect)


def test_a_row_with_no_open_edge_writes_nothing_or_keeps_the_first_key(tokenizer):
    closed = build(tokenizer, seed=1)
    G.install(closed, GateConfig(init_bias=-1e4))
    t = _tokens(closed)
    _, cache = closed.run_with_cache(t)
    assert float(cache["blocks.0.attn.hook_pattern"].abs().sum()) == 0.0
    assert float(cache["blocks.1.attn.hook_z"].abs().sum()) == 0.0  # the heads write nothing
    first = build(tokenizer, seed=1)
    G.install(first, GateConfig(gate="log_prob", init_bias=-1e4, empty_row="first"))
    _, cache = first.run_with_cache(t)
    pat = cache["blocks.0.attn.hook_pattern"]
    assert torch.equal(pat[..., 0], torch.ones_like(pat[..., 0])) and float(pat[..., 1:].sum()) == 0.0
    assert float(G.expected_open_fraction(first)) == pytest.approx(t.shape[1] / (t.shape[1] * (t.shape[1] + 1) / 2))


def test_the_gate_hook_is_patchable(small):
    G.install(small, GateConfig(gate="log_prob", init_bias=1e4))
    t = _tokens(small)
    before = small(t)
    only_self = lambda z, hook: z * torch.eye(z.shape[-1])  # noqa: E731
    patched = small.run_with_hooks(t, fwd_hooks=[("blocks.0.attn.hook_gate", only_self)])
    assert not torch.allclose(patched, before, atol=1e-3)
    seen = {}
    small.run_with_hooks(
        t,
        fwd_hooks=[
            ("blocks.0.attn.hook_gate", only_self),
            ("blocks.0.attn.hook_pattern", lambda p, hook: seen.setdefault("p", p)),
        ],
    )
    assert torch.allclose(seen["p"], torch.eye(t.shape[1]).expand_as(seen["p"]))  # each query keeps only itself
    torch.testing.assert_close(small(t), before)  # the temporary hook is gone, the gates stay


@pytest.mark.parametrize("estimator", ["gumbel_st", "hard_concrete"])
def test_training_samples_gates_with_finite_gradients_even_on_empty_rows(small, estimator):
    G.install(small, GateConfig(estimator=estimator, init_bias=0.0))
    small.train()
    G.set_temperature(small, 0.5)
    t = _tokens(small)
    gates = []
    small.blocks[0].attn.hook_gate.add_hook(lambda z, hook: gates.append(z.detach()))
    torch.manual_seed(0)
    loss = small(t, return_type="loss") + G.expected_open_fraction(small)
    loss.backward()
    z = gates[0]
    if estimator == "gumbel_st":
        assert set(z.unique().tolist()) <= {0.0, 1.0}  # hard forward: closed edges exactly out
    assert 0 < float(z.sum()) < float(torch.ones_like(z).tril().sum())
    for name, p in small.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert float(small.blocks[0].attn.gate.bias.grad.abs().sum()) > 0
    torch.manual_seed(0)
    small.zero_grad()
    small.reset_hooks()
    empty = small(t, return_type="loss")  # same noise; now close everything via the hook
    small.blocks[1].attn.hook_gate.add_hook(lambda z, hook: z * 0)
    small(t, return_type="loss").backward()
    assert all(torch.isfinite(p.grad).all() for p in small.parameters() if p.grad is not None)
    assert torch.isfinite(empty)


def test_grouped_query_attention(gqa):
    t = _tokens(gqa)
    base = gqa(t)
    G.install(gqa, GateConfig(init_bias=1e4))
    torch.testing.assert_close(gqa(t), base, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        for g in G.gates(gqa):
            g.bias.fill_(0.0)  # published gate: open iff the score > 0
    _, cache = gqa.run_with_cache(t)
    gate = cache["blocks.0.attn.hook_gate"]
    assert gate.shape == (2, gqa.cfg.n_heads, t.shape[1], t.shape[1])
    assert 0 < float(G.expected_open_fraction(gqa)) < 1
    assert torch.equal(cache["blocks.0.attn.hook_pattern"] > 0, gate.bool())


def test_a_model_without_an_attention_scores_hook_is_refused(small):
    del small.blocks[1].attn.hook_attn_scores
    with pytest.raises(BadValueError, match=r"block 1 of 'test-attention' has no attention hook_attn_scores hook"):
        G.install(small, GateConfig())
    assert not G.is_gated(small)


def test_saved_gated_model_loads_with_its_gates(small, tmp_path):
    G.install(small, GateConfig(gate="log_prob", init_bias=2.0, estimator="hard_concrete"))
    with torch.no_grad():
        small.blocks[0].attn.gate.scale.fill_(0.7)
    save(small, tmp_path / "gated")
    again, _ = load(str(tmp_path / "gated"), device="cpu")
    assert G.is_gated(again) and not again.training
    assert again.blocks[0].attn.gate.cfg == small.blocks[0].attn.gate.cfg
    t = _tokens(small)
    torch.testing.assert_close(again(t), small(t))
    with pytest.raises(BadValueError, match="already has attention gates"):
        G.install(again, GateConfig())


def _hand_scores():
    """One sequence, one head, T = 3: causal scores (what TransformerLens's scores hook passes)."""
    inf = math.inf
    return torch.tensor([[[[0.0, -inf, -inf], [1.0, 0.0, -inf], [2.0, -1.0, 0.5]]]])


def test_published_gate_math_on_a_hand_computed_case():
    gate = G.AttentionGate(GateConfig(init_bias=-0.2).resolve(), n_heads=1)
    assert gate.cfg.gate == "published" and not gate.cfg.renormalise and gate.bias.shape == (1,)
    hook = HookPoint()
    gate.eval()
    scores = _hand_scores()
    out_scores = gate.on_scores(scores, None, gate_hook=hook)
    assert torch.equal(out_scores, scores)  # the scores pass unchanged: no renormalisation over open keys
    # open iff score - 0.2 > 0: row 0 none; row 1 key 0; row 2 keys 0 and 2
    expect = torch.tensor([[[[0.0, 0, 0], [1, 0, 0], [1, 0, 1]]]])
    dense = scores.softmax(-1)
    pattern = gate.on_pattern(dense, None)
    torch.testing.assert_close(pattern, dense * expect)
    e = math.exp
    row2 = torch.tensor([e(2.0), 0.0, e(0.5)]) / (e(2.0) + e(-1.0) + e(0.5))  # divided by every key's weight
    torch.testing.assert_close(pattern[0, 0, 2], row2)
    assert float(pattern[0, 0, 0].sum()) == 0.0  # the all-closed row writes nothing
    assert float(gate.open_sum) == 3.0 and int(gate.pairs) == 6  # T(T+1)/2 causal pairs, diagonal included


def test_published_gate_training_sample_penalty_and_straight_through_gradient():
    gate = G.AttentionGate(GateConfig(init_bias=-0.2).resolve(), n_heads=1)
    gate.train()
    scores = _hand_scores()
    allowed = torch.isfinite(scores)
    torch.manual_seed(3)
    gate.on_scores(scores, None, gate_hook=HookPoint())
    z = gate.on_pattern(torch.ones_like(scores), None)  # a pattern of ones: what is left is the gate
    torch.manual_seed(3)
    noise = torch.logit(torch.rand_like(scores), eps=1e-6)
    g = torch.where(allowed, scores, torch.zeros_like(scores)) - 0.2
    hard = ((g + noise > 0) & allowed).float()
    assert torch.equal(z.detach(), hard)  # the hard sample 1[g + logistic noise > 0]
    expected_open = torch.sigmoid(g)[allowed].sum()
    torch.testing.assert_close(gate.open_sum.detach(), expected_open)  # penalty numerator: sum sigma(g)
    (z.sum() + gate.open_sum).backward()
    s = torch.sigmoid(g + noise)
    ds = torch.sigmoid(g)
    expect_grad = (s * (1 - s))[allowed].sum() + (ds * (1 - ds))[allowed].sum()
    torch.testing.assert_close(gate.bias.grad, expect_grad.reshape(1))  # through sigma(g + noise), tau = 1


def test_published_gate_closed_edges_leave_the_output_without_renormalising(small):
    G.install(small, GateConfig(init_bias=0.3))
    t = _tokens(small)
    _, cache = small.run_with_cache(t)
    n = t.shape[1]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    closed_somewhere = False
    for i in range(small.cfg.n_layers):
        q, k, v = (cache[f"blocks.{i}.attn.hook_{x}"] for x in "qkv")
        scores = (torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(small.cfg.d_head)).masked_fill(~causal, -math.inf)
        bias = float(small.blocks[i].attn.gate.bias)
        open_ = (scores + bias > 0) & causal
        assert torch.equal(cache[f"blocks.{i}.attn.hook_gate"].bool(), open_)
        closed_somewhere |= bool((~open_ & causal).any())
        expect_z = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1) * open_, v)  # sum_open e^s v / sum_all e^s
        torch.testing.assert_close(cache[f"blocks.{i}.attn.hook_z"], expect_z, atol=1e-6, rtol=1e-5)
    assert closed_somewhere


def test_published_gate_rows_with_every_gate_closed_write_only_b_O(small):
    G.install(small, GateConfig(init_bias=-1e4))
    t = _tokens(small)
    _, cache = small.run_with_cache(t)
    for i in range(small.cfg.n_layers):
        out = cache[f"blocks.{i}.hook_attn_out"]
        torch.testing.assert_close(out, small.blocks[i].attn.b_O.expand_as(out))


def test_published_gate_with_one_bias_for_the_model_saves_and_loads(small, tmp_path):
    G.install(small, GateConfig(bias_sharing="model"))
    gs = G.gates(small)
    assert len([n for n, _ in small.named_parameters() if ".gate." in n]) == 1
    with torch.no_grad():
        gs[0].bias.fill_(1.5)
    assert all(float(g.gate_bias()) == 1.5 for g in gs)
    save(small, tmp_path / "shared")
    again, _ = load(str(tmp_path / "shared"), device="cpu")
    assert all(float(g.gate_bias()) == 1.5 for g in G.gates(again))
    t = _tokens(small)
    torch.testing.assert_close(again(t), small(t))


def test_models_saved_before_the_presets_load_as_their_gate():
    old = {"estimator": "gumbel_st", "gate_input": "score", "init_scale": 1.0, "init_bias": 8.0}
    assert GateConfig.from_dict(old).gate == "score"
