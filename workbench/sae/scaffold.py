"""Rank-r dense bottleneck beside the sparse dictionary: S(x) = U V^T (x - b_dec).

The scaffold absorbs the low-rank dense part of the activations (top principal components,
outlier dimensions) that otherwise shows up as dense latents. Whether U, V start from the top-r
principal components or at random, whether they keep training, and whether the sparse encoder
reads x or the residual x - S(x) are config fields (docs/methods.md §4: open in the literature).
"""

from __future__ import annotations

import torch
from torch import nn


class Scaffold(nn.Module):
    def __init__(self, d_in: int, rank: int, trainable: bool = True):
        super().__init__()
        self.U = nn.Parameter(torch.zeros(d_in, rank), requires_grad=trainable)
        self.V = nn.Parameter(torch.zeros(d_in, rank), requires_grad=trainable)

    def codes(self, xc: torch.Tensor) -> torch.Tensor:
        """The r dense coordinates V^T (x - b_dec)."""
        return xc @ self.V.to(xc.dtype)

    def forward(self, xc: torch.Tensor) -> torch.Tensor:
        return self.codes(xc) @ self.U.to(xc.dtype).T

    @torch.no_grad()
    def init_from(self, xc: torch.Tensor, how: str, generator: torch.Generator) -> None:
        """U = V = an orthonormal frame: the top principal components of xc, or a random one."""
        d, r = self.U.shape
        if how == "pca":
            centred = (xc - xc.mean(0)).double()
            _, _, vh = torch.linalg.svd(centred, full_matrices=False)
            frame = vh[:r].T.to(self.U.dtype)
        else:
            frame, _ = torch.linalg.qr(torch.randn(d, r, generator=generator, dtype=torch.float64))
            frame = frame.to(self.U.dtype)
        self.U.copy_(frame)
        self.V.copy_(frame)
