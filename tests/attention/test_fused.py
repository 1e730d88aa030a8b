"""The published gate's fused training path against the general path, on the embedded model.

A hook on hook_gate sends a forward through the general path (its z must be readable and patchable),
so the same model with and without such a hook is the comparison: the same generator state must
give the same sampled gates, the same loss and penalty, and the same gradients to float tolerance.
"""

import pytest
import torch

from workbench.attention import gates as G
from workbench.attention.config import GateConfig, SparsifyConfig
from workbench.attention.train import Sparsifier
from workbench.models import load


def _gated(tau: float):
    model, _ = load("tiny", device="cpu")
    G.install(model, GateConfig(init_bias=0.5))  # low enough that many gates close
    model.train()
    G.set_temperature(model, tau)
    return model


def _step(model, tokens, general: bool):
    """Loss, penalty, the gated patterns (and, general path, the sampled gates) and every gradient."""
    seen = {"pattern": [], "gate": [], "dense": []}
    hooks = [(f"blocks.{i}.attn.hook_pattern", lambda p, hook: seen["pattern"].append(p.detach())) for i in range(4)]
    hooks += [
        (f"blocks.{i}.attn.hook_attn_scores", lambda s, hook: seen["dense"].append(s.detach().softmax(-1)))
        for i in range(4)
    ]
    if general:
        hooks += [(f"blocks.{i}.attn.hook_gate", lambda z, hook: seen["gate"].append(z.detach())) for i in range(4)]
    torch.manual_seed(7)
    with model.hooks(fwd_hooks=hooks):
        ce = model(tokens, return_type="loss")
    open_frac = G.expected_open_fraction(model)
    (ce + 3.0 * open_frac).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    return ce.detach(), open_frac.detach(), seen, grads


@pytest.mark.parametrize("tau", [1.0, 0.6])
def test_fused_path_matches_the_general_path_on_the_embedded_model(tau):
    tokens = torch.randint(1, 290, (4, 128), generator=torch.Generator().manual_seed(0))
    ce_f, open_f, seen_f, grads_f = _step(_gated(tau), tokens, general=False)
    ce_g, open_g, seen_g, grads_g = _step(_gated(tau), tokens, general=True)
    assert not seen_f["gate"] and len(seen_g["gate"]) == 4  # the fused run never built z; the general one did
    assert torch.equal(ce_f, ce_g) and torch.equal(open_f, open_g)
    for pat_f, pat_g, z, dense in zip(seen_f["pattern"], seen_g["pattern"], seen_g["gate"], seen_f["dense"]):
        assert torch.equal(pat_f, pat_g)
        causal = torch.ones_like(z, dtype=torch.bool).tril()
        assert bool((dense[causal] > 0).all())  # every causal pair's dense weight > 0, so pattern > 0 iff open
        assert torch.equal(pat_f > 0, z.bool())  # the same sampled gates
        assert 0.05 < float(z[causal].mean()) < 0.95  # a real mix of open and closed gates
    assert grads_f.keys() == grads_g.keys()
    for name, g in grads_g.items():
        torch.testing.assert_close(grads_f[name], g, rtol=1e-4, atol=1e-6, msg=name)
    assert float(grads_f["blocks.0.attn.gate.bias"].abs()) > 0


def test_sparsifier_steps_agree_between_the_paths():
    """Three training steps (weights and gates, paired dual) give the same curve rows on both paths."""
    tokens = torch.randint(1, 290, (4, 128), generator=torch.Generator().manual_seed(1))
    rows = {}
    for general in (False, True):
        base, _ = load("tiny", device="cpu")
        model = _gated(1.0)
        cfg = SparsifyConfig(steps=3, warmup_steps=1, progress=False).resolve()
        trainer = Sparsifier(model, cfg, base.eval().requires_grad_(False))
        hooks = [(f"blocks.{i}.attn.hook_gate", lambda z, hook: None) for i in range(4)] if general else []
        with model.hooks(fwd_hooks=hooks):
            rows[general] = [trainer.step(tokens) for _ in range(3)]
    for fused_row, general_row in zip(rows[False], rows[True]):
        assert fused_row.keys() == general_row.keys()
        for k, v in general_row.items():
            assert fused_row[k] == pytest.approx(v, rel=1e-5, abs=1e-7), k
