"""BatchTopK SAE: keep the k*B largest activations over the whole batch (per-token L0 varies).

At inference there is no batch, so the SAE becomes a JumpReLU with one threshold theta: the EMA
of the smallest activation kept in training (how SAELens saves BatchTopK and Matryoshka SAEs).

Training ranks the batch in row chunks too: each chunk keeps its pre-activations above 0.8 theta
as candidates, and the k*B largest candidates are the batch's top k*B exactly whenever there are
at least k*B candidates (all of them then exceed the k*B-th largest value). Otherwise (the first
step, or theta far too high) the whole batch is ranked at once.
"""

from __future__ import annotations

import math

import torch

from workbench.sae.base import SparseAutoencoder
from workbench.sae.kernels import Support, topk


class BatchTopKSAE(SparseAutoencoder):
    def __init__(self, cfg):
        super().__init__(cfg)
        # float64: the EMA of many small updates drifts in float32
        self.register_buffer("threshold", torch.zeros((), dtype=torch.float64))

    def inference_threshold(self) -> torch.Tensor:
        return self.threshold.float().expand(self.cfg.n_latents).clone()

    candidate_fraction = 0.8  # chunk candidates: pre-activations above this fraction of theta

    def select(self, h) -> Support:
        if not self.training:  # the threshold: one, or one per latent (an imported CLT's)
            return Support.from_mask((h > self.threshold.to(h.dtype)) & (h > 0), h)
        theta = float(self.threshold)
        return Support.from_mask(h > (theta * self.candidate_fraction if theta > 0 else math.inf), h)

    def finish_select(self, sup, enc_in, W_enc, b_enc) -> Support:
        if not self.training:
            return sup
        K = self.cfg.k * sup.n_rows
        if sup.pre.numel() < K:  # too few candidates to be sure: rank the whole batch
            h = self._preacts(enc_in, W_enc, b_enc)
            vals, flat = topk(h.flatten(), min(K, h.numel()))
            return Support.from_flat(flat[vals > 0], h)
        vals, pos = topk(sup.pre, K)
        pos = pos[vals > 0].sort().values
        return Support(sup.rows[pos], sup.idx[pos], sup.n_rows, sup.pre[pos])

    def extra_stats(self, vals, sup) -> dict:
        v = vals.detach()
        v = v[v > 0]
        # +inf when nothing fired: a min-reduction across ranks then ignores this rank
        return {
            "min_kept": v.min().double()
            if v.numel()
            else torch.tensor(float("inf"), dtype=torch.float64, device=vals.device)
        }

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
