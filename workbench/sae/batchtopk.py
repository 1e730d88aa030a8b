"""BatchTopK SAE: keep the k*B largest activations over the whole batch (per-token L0 varies).

At inference there is no batch, so the SAE becomes a JumpReLU with one threshold theta: the EMA
of the smallest activation kept in training (how SAELens saves BatchTopK and Matryoshka SAEs).
"""

from __future__ import annotations

import torch

from workbench.sae.base import SparseAutoencoder
from workbench.sae.kernels import Support, topk


class BatchTopKSAE(SparseAutoencoder):
    def __init__(self, cfg):
        super().__init__(cfg)
        # float64: the EMA of many small updates drifts in float32
        self.register_buffer("threshold", torch.zeros((), dtype=torch.float64))

    @property
    def row_local(self) -> bool:
        return not self.training

    def select(self, h) -> Support:
        if not self.training:
            return Support.from_mask((h > self.threshold.to(h.dtype)) & (h > 0), h)
        vals, flat = topk(h.flatten(), min(self.cfg.k * h.shape[0], h.numel()))
        return Support.from_flat(flat[vals > 0], h)

    def extra_stats(self, vals, sup) -> dict:
        v = vals.detach()
        v = v[v > 0]
        # +inf when nothing fired: a min-reduction across ranks then ignores this rank
        return {"min_kept": v.min().double() if v.numel() else torch.tensor(float("inf"), dtype=torch.float64,
                                                                            device=vals.device)}

    @torch.no_grad()
    def after_step(self, stats: dict) -> None:
        m = stats["min_kept"]
        if not torch.isfinite(m):
            return
        if self.threshold == 0:  # first update: start the EMA at the observed value, not at 0
            self.threshold.copy_(m)
        else:
            lr = self.cfg.threshold_ema
            self.threshold.mul_(1 - lr).add_(lr * m.to(self.threshold))
