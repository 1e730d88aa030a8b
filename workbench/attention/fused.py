"""The published gate's training step in one autograd Function: the fast path of gates.AttentionGate.

The maths is the general path's (docs/methods.md §7): g = score + b; the hard sample
1[sigmoid((g + logistic noise) / tau) > 0.5] with the straight-through gradient of that sigmoid; the
penalty numerator sum sigma(g) over causal pairs; the pattern times the gates. What changes is the
cost on the [batch, head, query, key] tensors:
- masked pairs arrive as -inf scores, where every term is exactly 0 (sigmoid(-inf) = 0), so no
  torch.where over them (the slowest elementwise op on CPU);
- the noise is drawn as the general path draws it (torch.rand_like over every pair, then logit), so
  the same generator state gives the same gates, and then turned into the sigmoid in place;
- backward keeps two float tensors (the pattern times the sample's sigmoid slope, and the penalty's
  sigmoid slope) and the gates as bytes, instead of six float tensors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass
class Draw:
    """One layer's sampled gates between the scores hook and the pattern hook (no autograd history)."""

    gates: torch.Tensor  # uint8 0/1: 1[sigmoid((g + noise) / tau) > 0.5], 0 on masked pairs
    slope: torch.Tensor  # sigmoid'((g + noise) / tau) / tau: the straight-through derivative
    penalty_slope: torch.Tensor  # sigma'(g): the penalty's derivative
    open_sum: torch.Tensor  # sum sigma(g) over the causal pairs
    pairs: torch.Tensor  # the number of causal pairs (scores > -inf)
    scores: torch.Tensor  # the scores hook's input, which the gates' gradient goes to


@torch.no_grad()
def draw(scores: torch.Tensor, bias: torch.Tensor, tau: float) -> Draw:
    """Sample the gates from the (causally masked) scores: the general path's draw, in two float buffers."""
    g = scores + bias.to(scores.dtype)  # -inf on masked pairs stays -inf: closed, sigma = 0
    y = torch.rand_like(g).logit_(eps=1e-6).add_(g)  # g + logistic noise, the general path's draw
    if tau != 1.0:
        y.div_(tau)
    gates = (y.sigmoid_() > 0.5).view(torch.uint8)
    slope = y.addcmul_(y, y, value=-1)  # sigma' = y - y^2, in place (a fresh 50 MB tensor costs more than a pass)
    if tau != 1.0:
        slope.div_(tau)
    p = g.sigmoid_()
    open_sum = p.sum()
    pairs = torch.count_nonzero(scores > -math.inf)  # count_nonzero: 4x faster than a bool sum
    return Draw(gates, slope, p.addcmul_(p, p, value=-1), open_sum, pairs, scores)


class GatedPattern(torch.autograd.Function):
    """(pattern * gates, sum sigma(g)) with the gradients to the pattern, the scores and the bias."""

    @staticmethod
    def forward(ctx, pattern, scores, bias, d: Draw):
        ctx.bias_shape = bias.shape
        ctx.save_for_backward(d.gates, d.slope.mul_(pattern), d.penalty_slope)  # d.slope becomes pattern * slope
        return pattern * d.gates, d.open_sum.clone()

    @staticmethod
    def backward(ctx, grad_out, grad_open):
        gates, pattern_slope, penalty_slope = ctx.saved_tensors
        grad_pattern = grad_out * gates if ctx.needs_input_grad[0] else None
        grad_g = (grad_out * pattern_slope).addcmul_(penalty_slope, grad_open.to(penalty_slope.dtype))
        grad_bias = grad_g.sum().reshape(ctx.bias_shape) if ctx.needs_input_grad[2] else None
        return grad_pattern, grad_g if ctx.needs_input_grad[1] else None, grad_bias, None
