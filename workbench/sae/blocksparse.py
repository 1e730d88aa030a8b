"""Block-sparse featurizers: G blocks of b latents; a concept is a small subspace, not a direction.

Codes are signed (no ReLU); each decoder block has unit Frobenius norm. Four variants:
  block_topk     keep the n_active_blocks blocks with the largest ||a_g||_2 per token
                 (b = 1 is an absolute-value Top-k SAE);
  group_lasso    block soft threshold z_g = max(1 - theta_g / ||a_g||_2, 0) a_g with a learned
                 theta_g = softplus(raw_g), loss MSE + lambda * sum_g ||z_g||_2;
  block_jumprelu gate H(||a_g||_2 - theta_g), straight-through rectangle gradient to theta,
                 loss MSE + lambda * E[#active blocks] (the more reliable form of group lasso);
                 for both, theta starts at the block norm that keeps n_active_blocks per token
                 on the first batch, and lambda moves it after; a fixed lambda lets L0 drift far
                 from the start, so with target_l0 a controller moves lambda to hold L0 there;
  grassmannian   each block an orthonormal frame D_g (QR of a free matrix every forward),
                 tied encoder z_g = gamma * D_g (x - b_dec), block Top-k.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from workbench.sae.base import SparseAutoencoder
from workbench.sae.kernels import Support, topk
from workbench.sae.sparsity import PenalisedSAE, Step


class BlockTopKSAE(SparseAutoencoder):
    signed = True

    def select(self, h) -> Support:
        _, idx = topk(self.unit_scores(h), self.cfg.n_active_blocks)
        return Support.from_topk(h, idx, unit=self.u)


class ThresholdSAE(PenalisedSAE):
    """A unit (block, or latent: JumpReLU) passes when its score exceeds its learned threshold theta = softplus(raw)."""

    signed = True
    select_margin = 0.0  # training also selects blocks this far below theta (so theta gets their gradient)

    def init_dictionary(self, gen):
        super().init_dictionary(gen)
        self.raw_theta = nn.Parameter(torch.zeros(self.cfg.n_units))

    @torch.no_grad()
    def init_from_batch(self, batch):
        super().init_from_batch(batch)
        self.init_thresholds(self.split(batch)[0])

    @torch.no_grad()
    def init_thresholds(self, x):
        """theta at the score that keeps init_units() units a token on the input rows x (a CLT calls it per member)."""
        _, _, _, enc_in = self._inputs(x.to(self.b_dec.dtype))
        norms = self.unit_scores(self._preacts(enc_in, self.W_enc, self.b_enc)).flatten()
        t = float(norms.kthvalue(max(1, norms.numel() - self.init_units() * x.shape[0])).values)
        t = max(t, 1e-3)
        self.raw_theta.fill_(t + math.log(-math.expm1(-t)))  # softplus^-1(t)

    def init_units(self) -> int:
        """Units per token that theta keeps on the first batch."""
        return self.cfg.n_active_blocks

    @property
    def theta(self) -> torch.Tensor:
        return F.softplus(self.raw_theta)

    def select(self, h) -> Support:
        theta = self.theta.detach().to(h.dtype)
        margin = self.select_margin if self.training else 0.0
        return Support.from_mask(self.expand_units(self.unit_scores(h) > theta - margin), h)

    init_select = BlockTopKSAE.select  # theta is set after the encoder scale, from the same block Top-k

    @torch.no_grad()
    def scale_thresholds(self, factor: torch.Tensor) -> None:
        t = self.theta.double() * factor
        self.raw_theta.copy_(t + torch.log(-torch.expm1(-t)))  # softplus^-1

    def blocks(self, pre, sup) -> tuple[torch.Tensor, torch.Tensor]:
        """The selected blocks [N/b, b] (whole blocks, contiguous in the sorted support) and their unit ids."""
        return pre.view(-1, self.u), sup.idx.view(-1, self.u)[:, 0] // self.u


class GroupLassoSAE(ThresholdSAE):
    def activate(self, pre, sup):
        blocks, unit = self.blocks(pre, sup)
        shrink = (1 - self.theta[unit].to(blocks.dtype) / blocks.norm(dim=-1).clamp_min(1e-12)).clamp_min(0)
        z = blocks * shrink[:, None]
        return z.reshape(-1), self.penalty(z.norm(dim=-1), sup.n_rows)


class BlockJumpReLUSAE(ThresholdSAE):
    @property
    def select_margin(self) -> float:  # blocks just below theta join with gate 0 for the rectangle gradient
        return self.cfg.block_bandwidth / 2

    def activate(self, pre, sup):
        blocks, unit = self.blocks(pre, sup)
        gate = Step.apply(blocks.detach().norm(dim=-1), self.theta[unit], self.cfg.block_bandwidth)
        vals = (blocks * gate[:, None].to(blocks.dtype)).reshape(-1)
        return vals, self.penalty(gate, sup.n_rows)


class GrassmannianSAE(BlockTopKSAE):
    unit_norm_decoder = False  # orthonormal frames by construction

    def init_dictionary(self, gen):
        G, b, d = self.cfg.n_units, self.u, self.cfg.d_in
        # unit-scale columns: Adam's steps of size lr then rotate the frames at a useful rate
        self.frames_raw = nn.Parameter(torch.randn(G, d, b, generator=gen) / math.sqrt(d))
        self.gamma = nn.Parameter(torch.ones(()))
        self.register_buffer("b_enc", torch.zeros(self.cfg.n_latents))

    def weights(self):
        q = torch.linalg.qr(self.frames_raw).Q  # [G, d, b], orthonormal columns
        W_dec = q.transpose(1, 2).reshape(self.cfg.n_latents, self.cfg.d_in)
        return self.gamma * W_dec, self.b_enc, W_dec

    def scale_encoder(self, c):
        self.gamma.mul_(c)
