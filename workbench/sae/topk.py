"""Top-k SAE: z = TopK_k(ReLU(W_enc (x - b_dec) + b_enc)), the same rule in training and inference."""

from __future__ import annotations

from workbench.sae.base import SparseAutoencoder
from workbench.sae.kernels import Support, topk


class TopKSAE(SparseAutoencoder):
    def select(self, h) -> Support:
        vals, idx = topk(h, self.cfg.k)
        return Support.from_topk(h, idx, vals > 0)
