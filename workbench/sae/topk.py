"""Top-k SAE: z = TopK_k(ReLU(W_enc (x - b_dec) + b_enc)), the same rule in training and inference."""

from __future__ import annotations

from workbench.sae.base import SparseAutoencoder
from workbench.sae.kernels import Support


class TopKSAE(SparseAutoencoder):
    def select(self, h) -> Support:
        top = h.topk(self.cfg.k, dim=-1, sorted=False)
        return Support.from_topk(top.indices, top.values > 0)
