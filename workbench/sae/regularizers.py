"""The two Top-k regularisers acting before the selection, on batch-active units only.

A = units selected at least once in the batch, S_b = token b's support. With "token"
normalisation (the reading of docs/methods.md §1):
  R1 = lambda1 * mean_b sum_{j in A minus S_b} relu(h_bj)        (l1 on the off-support units)
  R2 = lambda2 * mean_b ||relu(h_b,A)||_1 / ||relu(h_b,A)||_2     (scale-invariant concentration)
"batch" normalisation divides whole-batch sums instead: R1 by B*|A|, R2 as one ratio over the
batch matrix. Restricting to A keeps never-selected units out of the penalty, as the paper does.
"""

from __future__ import annotations

import torch


def topk_regularisers(
    h_active: torch.Tensor, on_support: torch.Tensor, l1_off: float, l1_l2: float, normalisation: str
) -> dict[str, torch.Tensor]:
    """h_active [B, |A|] pre-activations (with grad), on_support [B, |A|] bool."""
    a = h_active.relu()
    out = {}
    eps = 1e-8
    if l1_off:
        off = (a * (~on_support)).sum(-1)
        out["reg_l1_off"] = l1_off * (off.mean() if normalisation == "token" else off.sum() / a.numel())
    if l1_l2:
        if normalisation == "token":
            ratio = a.sum(-1) / (a.norm(dim=-1) + eps)
            out["reg_l1_l2"] = l1_l2 * ratio.mean()
        else:
            out["reg_l1_l2"] = l1_l2 * a.sum() / (a.norm() + eps)
    return out
