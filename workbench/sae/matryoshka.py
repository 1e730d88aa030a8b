"""Matryoshka SAE: nested prefixes m_1 < ... < m_G = n under one global BatchTopK.

Each prefix must reconstruct x on its own: x_hat_i = b_dec (+ scaffold) + W_dec[:m_i]^T z[:m_i].
All prefix reconstructions come from one embedding_bag whose bags are (token, prefix group),
followed by a cumulative sum over groups. How the prefix losses are combined is `prefix_weighting`:
"sum" (SAELens), "mean" (dictionary_learning), "mean_with_bias" (also averages in the
bias-only reconstruction, as in Bussmann's code).
"""

from __future__ import annotations

import torch

from workbench.sae.batchtopk import BatchTopKSAE


class MatryoshkaSAE(BatchTopKSAE):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.register_buffer("prefix_ends", torch.tensor(cfg.prefixes, dtype=torch.long), persistent=False)

    def reconstruction(self, xs, base, vals, W_dec, sup):
        G, B = len(self.cfg.prefixes), xs.shape[0]
        group = torch.bucketize(sup.idx, self.prefix_ends, right=True)
        parts = self.kern.decode(vals, W_dec, sup, sup.rows * G + group, B * G).view(B, G, -1)
        x_hats = base[:, None, :] + parts.cumsum(1)
        per_prefix = (xs[:, None, :] - x_hats).pow(2).sum(-1).mean(0)  # [G]
        w = self.cfg.prefix_weighting
        if w == "sum":
            loss = per_prefix.sum()
        elif w == "mean":
            loss = per_prefix.mean()
        else:
            loss = (per_prefix.sum() + (xs - base).pow(2).sum(-1).mean()) / (G + 1)
        return {"matryoshka_mse": loss}, x_hats[:, -1]
