"""Rank-r dense bottleneck beside the sparse dictionary: S(x) = U V^T (x - b_dec).

The scaffold absorbs the low-rank dense part of the activations (top principal components,
outlier dimensions) that otherwise shows up as dense latents. Whether U, V start from the top-r
principal components or at random, whether they keep training, and whether the sparse encoder
reads x or the residual x - S(x) are config fields (docs/methods.md §4: open in the literature).
In a transcoder the scaffold maps the input to the output space: V reads d_in, U writes d_out.
"""

from __future__ import annotations

import torch
from torch import nn


class Scaffold(nn.Module):
    def __init__(self, d_in: int, rank: int, trainable: bool = True, d_out: int | None = None):
        super().__init__()
        self.U = nn.Parameter(torch.zeros(d_out or d_in, rank), requires_grad=trainable)
        self.V = nn.Parameter(torch.zeros(d_in, rank), requires_grad=trainable)

    def codes(self, xc: torch.Tensor) -> torch.Tensor:
        """The r dense coordinates V^T (x - b_dec)."""
        return xc @ self.V.to(xc.dtype)

    def forward(self, xc: torch.Tensor) -> torch.Tensor:
        return self.codes(xc) @ self.U.to(xc.dtype).T

    @torch.no_grad()
    def init_from(self, xc: torch.Tensor, how: str, generator: torch.Generator, yc: torch.Tensor | None = None) -> None:
        """V = an orthonormal frame: the top principal components of xc, or a random one. U = V for an SAE;
        for a transcoder (target yc) U is the least-squares map from the r coordinates to the centred target."""
        d, r = self.V.shape
        if how == "pca":
            centred = (xc - xc.mean(0)).double()
            _, _, vh = torch.linalg.svd(centred, full_matrices=False)
            frame = vh[:r].T
        else:
            frame, _ = torch.linalg.qr(torch.randn(d, r, generator=generator, dtype=torch.float64))
        self.V.copy_(frame.to(self.V.dtype))
        if yc is None:
            self.U.copy_(frame.to(self.U.dtype))
            return
        a = xc.double() @ frame
        a, y = a - a.mean(0), (yc - yc.mean(0)).double()
        self.U.copy_(torch.linalg.lstsq(a, y).solution.T.to(self.U.dtype))
