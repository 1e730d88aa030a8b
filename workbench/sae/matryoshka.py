"""Matryoshka SAE: nested prefixes m_1 < ... < m_G = n under one global BatchTopK.

Each prefix must reconstruct x on its own: x_hat_i = b_dec (+ scaffold) + W_dec[:m_i]^T z[:m_i].
All prefix reconstructions come from one embedding_bag whose bags are (token, prefix group),
followed by a cumulative sum over groups. How the prefix losses are combined is `prefix_weighting`:
"sum" (SAELens), "mean" (dictionary_learning), "mean_with_bias" (also averages in the
bias-only reconstruction, as in Bussmann's code). The cross-layer transcoder's Matryoshka members
use the same two helpers (`prefix_writes`, `combine_prefixes`).
"""

from __future__ import annotations

import torch

from workbench.sae.batchtopk import BatchTopKSAE


def prefix_writes(kern, vals, W_dec, sup, prefix_ends: torch.Tensor) -> torch.Tensor:
    """[B, G, d]: the decoded writes of the latents inside each prefix (latent index < m_g), without the bias."""
    G, B = len(prefix_ends), sup.n_rows
    group = torch.bucketize(sup.idx, prefix_ends, right=True)
    return kern.decode(vals, W_dec, sup, sup.rows * G + group, B * G).view(B, G, -1).cumsum(1)


def combine_prefixes(per_prefix: torch.Tensor, bias_only: torch.Tensor, weighting: str) -> torch.Tensor:
    """One loss from the G prefix losses; bias_only is the loss of the reconstruction without any latent."""
    if weighting == "sum":
        return per_prefix.sum()
    if weighting == "mean":
        return per_prefix.mean()
    return (per_prefix.sum() + bias_only) / (len(per_prefix) + 1)


class MatryoshkaSAE(BatchTopKSAE):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.register_buffer("prefix_ends", torch.tensor(cfg.prefixes, dtype=torch.long), persistent=False)

    def reconstruction(self, xs, base, vals, W_dec, sup):
        x_hats = base[:, None, :] + prefix_writes(self.kern, vals, W_dec, sup, self.prefix_ends)
        per_prefix = (xs[:, None, :] - x_hats).pow(2).sum(-1).mean(0)  # [G]
        bias_only = (xs - base).pow(2).sum(-1).mean()
        return {"matryoshka_mse": combine_prefixes(per_prefix, bias_only, self.cfg.prefix_weighting)}, x_hats[:, -1]
