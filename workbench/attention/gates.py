"""Gated attention for any HookedTransformer, installed through hooks (docs/methods.md §7).

Each block's attention gets a gate per (head, query i, key j) from its own attention scores. The
default preset (GateConfig.gate "published", the authors' gate): logit_ij = score_ij + b with one
learned scalar b, and closed edges are dropped from the dense softmax without renormalising, so a
row whose gates are all closed writes nothing (the head adds only b_O). The "log_prob" / "score"
presets: logit_ij = scale_h * x_ij + bias_h (x the dense log-probability or the score) and the
pattern renormalised over the open keys (an empty row writes nothing, or key 0 is kept: empty_row).
Training samples the gates (straight-through Gumbel-sigmoid: hard 1[logit + noise > 0], gradient
through sigmoid((logit + noise) / tau); or hard-concrete); evaluation is deterministic: open iff logit > 0.

Mechanics, so every TransformerLens hook keeps working: a permanent hook on `hook_attn_scores`
computes the gates and passes them through the new `blocks.L.attn.hook_gate` (cacheable, patchable:
what a hook there returns is what the model uses). Published gate: the scores pass unchanged and a
permanent hook on `hook_pattern` multiplies the dense pattern by the gates (exact, and the gates'
straight-through gradient for free). Renormalised presets: the scores hook returns closed edges at
-inf (what later hooks and the cache see); when gradients are on, the pattern hook recomputes the
pattern as a gate-weighted softmax of the original scores, which equals the masked softmax in the
forward pass and gives closed gates a gradient (the plain masked softmax has none, and NaN gradients
on empty rows). Grouped-query attention needs nothing special: scores are per query head.
`model.reset_hooks(including_permanent=True)` removes the gates' hooks.

The published gate (empty_row "zero") has fast paths with the same numbers: masked pairs arrive as
-inf scores, whose gate is closed and whose sigmoid is 0, so neither path needs a torch.where over
the [batch, head, query, key] tensors; in training with the straight-through estimator and nothing
on hook_gate, fused.py draws the same noise and does the sample, the penalty and the gating in one
autograd Function. A hook on hook_gate (a reader or a patch) takes the general path, whose z is a
differentiable tensor (tests/attention/test_fused.py checks the two paths agree).
"""

from __future__ import annotations

import math
from functools import partial

import torch
from torch import nn
from transformer_lens.hook_points import HookPoint

from workbench.attention import fused
from workbench.attention.config import GateConfig
from workbench.errors import BadValueError

EXTENSION_KEY = "attention_gates"  # the key in a saved model's config.json (workbench.models extension point)


class AttentionGate(nn.Module):
    """One layer's gates: the learned bias (and, renormalised presets, scale) and the last forward's tensors.

    With the published gate and bias_sharing "model", layer 0's gate owns the one bias and the
    others read it (`shared`), so the saved state holds it once.
    """

    def __init__(self, cfg: GateConfig, n_heads: int, shared: AttentionGate | None = None):
        super().__init__()
        self.cfg = cfg
        self._shared = [shared] if shared is not None else []  # a list: not registered as a submodule
        if cfg.renormalise:
            self.scale = nn.Parameter(torch.full((n_heads,), float(cfg.init_scale)))
            self.bias = nn.Parameter(torch.full((n_heads,), float(cfg.init_bias)))
        elif shared is None:
            self.bias = nn.Parameter(torch.full((1,), float(cfg.init_bias)))
        self.tau = 1.0
        self.open_sum: torch.Tensor | None = None  # expected open edges of the last forward (differentiable)
        self.pairs: torch.Tensor | None = None  # causal (query, key) pairs x heads of the last forward
        self._stash = None

    def gate_bias(self) -> torch.Tensor:
        return self._shared[0].bias if self._shared else self.bias

    def logits(self, scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        if not self.cfg.renormalise:  # published: the attention logit itself plus one scalar
            return torch.where(allowed, scores, torch.zeros_like(scores)) + self.gate_bias().to(scores.dtype)
        x = torch.log_softmax(scores, -1) if self.cfg.gate == "log_prob" else scores
        x = torch.where(allowed, x, torch.zeros_like(x))
        return x * self.scale[:, None, None].to(x.dtype) + self.bias[:, None, None].to(x.dtype)

    def sample(self, logit: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(relaxed gate z, probability that the gate is open) in training."""
        noise = torch.logit(torch.rand_like(logit), eps=1e-6)  # logistic
        if self.cfg.estimator == "gumbel_st":  # hard 1[logit + noise > 0], gradient through sigmoid
            y = torch.sigmoid((logit + noise) / self.tau)
            return (y > 0.5).to(logit.dtype) + (y - y.detach()), torch.sigmoid(logit)
        lo, hi = self.cfg.hard_concrete_limits
        z = (torch.sigmoid((logit + noise) / self.tau) * (hi - lo) + lo).clamp(0, 1)
        return z, torch.sigmoid(logit - self.tau * math.log(-lo / hi))

    def on_scores(self, scores: torch.Tensor, hook, gate_hook: HookPoint) -> torch.Tensor:
        if not self.cfg.renormalise and self.cfg.empty_row == "zero":  # the published gate's fast paths
            if not self.training:
                return self._published_eval(scores, gate_hook)
            if self.cfg.estimator == "gumbel_st" and not gate_hook.has_hooks():  # nothing reads or patches z
                self._stash = fused.draw(scores, self.gate_bias(), self.tau)
                self.open_sum, self.pairs = None, self._stash.pairs  # open_sum: set by on_pattern
                return scores
        allowed = torch.isfinite(scores)
        logit = self.logits(scores, allowed)
        if self.training:
            z, p_open = self.sample(logit)
        else:
            z = (logit > 0).to(scores.dtype)
            p_open = z
        if self.cfg.empty_row == "first":
            first = torch.zeros_like(allowed)
            first[..., 0] = True
            first &= allowed
            z = torch.where(first, torch.ones_like(z), z)
            p_open = torch.where(first, torch.ones_like(p_open), p_open)
        z = gate_hook(torch.where(allowed, z, torch.zeros_like(z)))
        self.open_sum = torch.where(allowed, p_open, torch.zeros_like(p_open)).sum()
        self.pairs = allowed.sum()
        if not self.cfg.renormalise:
            self._stash = z
            return scores  # the dense softmax is taken, then gated in on_pattern
        self._stash = (scores, z)
        return torch.where(z > 0, scores, torch.full_like(scores, -math.inf))

    def _published_eval(self, scores: torch.Tensor, gate_hook: HookPoint) -> torch.Tensor:
        """Deterministic published gates, open iff score + b > 0: masked pairs (-inf) close without a where()."""
        z = torch.empty_like(scores)  # written by the comparison: no bool tensor to convert
        torch.gt(scores, -self.gate_bias().detach().to(scores.dtype), out=z)  # score + b > 0 (its sign is exact)
        self.open_sum, self.pairs = z.sum(), torch.count_nonzero(scores > -math.inf)
        self._stash = gate_hook(z)
        return scores

    def on_pattern(self, pattern: torch.Tensor, hook) -> torch.Tensor:
        if self._stash is None:
            return pattern
        stash, self._stash = self._stash, None
        if isinstance(stash, fused.Draw):
            out, self.open_sum = fused.GatedPattern.apply(pattern, stash.scores, self.gate_bias(), stash)
            return out
        if not self.cfg.renormalise:  # out = sum_open exp(s) v / sum_all exp(s): no renormalisation
            return (pattern * stash).to(pattern.dtype)
        scores, z = stash
        if not torch.is_grad_enabled():
            return pattern  # TransformerLens's softmax of the masked scores: the same values
        return gated_softmax(scores, z, self.cfg.score_clamp).to(pattern.dtype)


def gated_softmax(scores: torch.Tensor, z: torch.Tensor, clamp: float = 30.0) -> torch.Tensor:
    """softmax restricted to the open edges, weighted by z (0/1 in the forward pass); empty rows -> 0.

    The row maximum is taken over open edges, so open edges are exact; a closed edge's weight
    exp(score - max) is capped at e^clamp, which only bounds its straight-through gradient.
    """
    open_ = (z > 0) & torch.isfinite(scores)
    m = torch.where(open_, scores, torch.full_like(scores, -math.inf)).amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
    num = z * torch.exp((scores - m).clamp(max=clamp))
    den = num.sum(-1, keepdim=True)
    return num / torch.where(den > 0, den, torch.ones_like(den))


def check_model(model) -> None:
    """Every block must expose hook_attn_scores and hook_pattern on its attention (TransformerLens names)."""
    for i, block in enumerate(model.blocks):
        attn = getattr(block, "attn", None)
        missing = [h for h in ("hook_attn_scores", "hook_pattern") if not isinstance(getattr(attn, h, None), HookPoint)]
        if missing:
            raise BadValueError(
                f"block {i} of {model.cfg.model_name!r} has no attention {' / '.join(missing)} hook "
                f"(blocks.{i}.attn.{missing[0]}); gated attention needs a TransformerLens attention "
                "with an attention-scores hook"
            )
    if getattr(model.cfg, "use_attention_sinks", False):
        raise BadValueError(
            f"{model.cfg.model_name!r} uses learned attention sinks, which join the softmax after "
            "the scores hook; gated attention supports models without them"
        )


def is_gated(model) -> bool:
    return any(hasattr(b.attn, "gate") for b in model.blocks)


def gates(model) -> list[AttentionGate]:
    if not is_gated(model):
        raise BadValueError(
            f"{model.cfg.model_name!r} has no attention gates; sparsify it first "
            "(workbench attention train) or install them with workbench.attention.gates.install"
        )
    return [b.attn.gate for b in model.blocks]


def install(model, cfg: GateConfig | None = None):
    """Add gates to every attention layer of `model` in place (and return it); see the module doc."""
    cfg = (cfg or GateConfig()).resolve()
    check_model(model)
    if is_gated(model):
        raise BadValueError(f"{model.cfg.model_name!r} already has attention gates")
    first = None
    for block in model.blocks:
        attn = block.attn
        attn.hook_gate = HookPoint()
        shared = first if (not cfg.renormalise and cfg.bias_sharing == "model") else None
        attn.gate = AttentionGate(cfg, model.cfg.n_heads, shared).to(attn.W_Q.device)
        first = first or attn.gate
        attn.hook_attn_scores.add_hook(partial(attn.gate.on_scores, gate_hook=attn.hook_gate), is_permanent=True)
        attn.hook_pattern.add_hook(attn.gate.on_pattern, is_permanent=True)
        attn.gate.train(model.training)  # a new module starts in training mode; follow the model
    model.setup()  # registers blocks.L.attn.hook_gate in hook_dict
    model.workbench_extensions = {**getattr(model, "workbench_extensions", {}), EXTENSION_KEY: cfg.to_dict()}
    return model


def install_from_dict(model, cfg: dict) -> None:
    """The workbench.models load-time installer: rebuild the gates a saved model had."""
    install(model, GateConfig.from_dict(cfg))


def set_temperature(model, tau: float) -> None:
    for g in gates(model):
        g.tau = float(tau)


def expected_open_fraction(model) -> torch.Tensor:
    """Expected open edges / causal pairs over all layers and heads of the last forward (differentiable).

    Every (batch, head) row block has the same count T(T+1)/2 of causal pairs (diagonal included), so
    this equals the mean over layers, batch and heads of sum sigma(g) / count, the published penalty.
    """
    gs = gates(model)
    if any(g.open_sum is None for g in gs):
        raise RuntimeError("run a forward pass before reading the gates' open fraction")
    return sum(g.open_sum for g in gs) / sum(g.pairs for g in gs)
