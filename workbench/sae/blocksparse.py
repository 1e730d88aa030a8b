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


class BlockTopKSAE(SparseAutoencoder):
    signed = True

    def select(self, h) -> Support:
        _, idx = topk(self.unit_scores(h), self.cfg.n_active_blocks)
        return Support.from_topk(h, idx, unit=self.u)


class _BlockStep(torch.autograd.Function):
    """H(norm - theta) with the rectangle pseudo-derivative to theta only (JumpReLU-style)."""

    @staticmethod
    def forward(ctx, norm, theta, bandwidth):
        ctx.save_for_backward(norm, theta)
        ctx.bandwidth = bandwidth
        return (norm > theta).to(theta.dtype)

    @staticmethod
    def backward(ctx, g):
        norm, theta = ctx.saved_tensors
        eps = ctx.bandwidth
        rect = ((norm - theta).abs() < eps / 2).to(g.dtype)
        return None, -rect * g / eps, None


class _ThresholdBlockSAE(SparseAutoencoder):
    """A block passes when its norm exceeds its learned threshold theta_g = softplus(raw_g)."""

    signed = True
    select_margin = 0.0  # training also selects blocks this far below theta (so theta gets their gradient)
    coef_field = ""  # the SAEConfig field holding lambda, the sparsity coefficient

    def __init__(self, cfg):
        super().__init__(cfg)
        # lambda as training uses it: the config's value, moved by the target_l0 log controller (float64: its
        # many small multiplicative steps drift in float32); saved in checkpoints so a resume is exact
        coef = torch.tensor(float(getattr(cfg, self.coef_field)), dtype=torch.float64)
        self.register_buffer("sparsity_coef", coef)
        self.register_buffer("coef_integral", coef.clone())  # the controller's integral part of lambda

    def init_dictionary(self, gen):
        super().init_dictionary(gen)
        self.raw_theta = nn.Parameter(torch.zeros(self.cfg.n_units))

    @torch.no_grad()
    def init_from_batch(self, x):
        super().init_from_batch(x)
        _, _, _, enc_in = self._inputs(self.split(x)[0].to(self.b_dec.dtype))
        norms = self.unit_scores(self._preacts(enc_in, self.W_enc, self.b_enc)).flatten()
        t = float(norms.kthvalue(max(1, norms.numel() - self.cfg.n_active_blocks * x.shape[0])).values)
        t = max(t, 1e-3)
        self.raw_theta.fill_(t + math.log(-math.expm1(-t)))  # softplus^-1(t)

    @property
    def theta(self) -> torch.Tensor:
        return F.softplus(self.raw_theta)

    def select(self, h) -> Support:
        theta = self.theta.detach().to(h.dtype)
        margin = self.select_margin if self.training else 0.0
        return Support.from_mask(self.expand_units(self.unit_scores(h) > theta - margin), h)

    init_select = BlockTopKSAE.select  # theta is set after the encoder scale, from the same block Top-k

    def penalty(self, per_token: torch.Tensor, n_rows: int) -> dict:
        """{name: lambda * per_token.sum() / n_rows} in training with lambda > 0, else {}."""
        if not (self.training and getattr(self.cfg, self.coef_field)):
            return {}
        return {
            f"{self.coef_field.removesuffix('_coef')}_penalty": self.sparsity_coef.to(per_token.dtype)
            * per_token.sum()
            / n_rows
        }

    @torch.no_grad()
    def after_step(self, stats: dict) -> None:
        """The target_l0 controller. "log": PI in log space on lambda (the integral part takes a multiplicative
        step toward the target, the proportional factor damps the lag between lambda and theta). "threshold":
        every theta_g is scaled by exp(rate * err), so L0 follows the target within steps; lambda stays
        fixed. A JumpReLU needs the latter: Adam moves a threshold at most about lr a step whatever lambda
        is, so a lambda controller winds up while L0 stays where the thresholds hold it."""
        c = self.cfg
        if c.target_l0 is None:
            return
        err = (stats["l0"].double() / c.target_l0 - 1).clamp(-1, 1)
        if c.l0_control == "threshold":
            t = self.theta.double() * torch.exp(c.l0_control_rate * err)
            self.raw_theta.copy_(t + torch.log(-torch.expm1(-t)))  # softplus^-1
            return
        self.coef_integral.mul_(torch.exp(c.l0_control_rate * err))
        self.sparsity_coef.copy_(self.coef_integral * torch.exp(c.l0_control_gain * err))

    def blocks(self, pre, sup) -> tuple[torch.Tensor, torch.Tensor]:
        """The selected blocks [N/b, b] (whole blocks, contiguous in the sorted support) and their unit ids."""
        return pre.view(-1, self.u), sup.idx.view(-1, self.u)[:, 0] // self.u


class GroupLassoSAE(_ThresholdBlockSAE):
    coef_field = "group_lasso_coef"

    def activate(self, pre, sup):
        blocks, unit = self.blocks(pre, sup)
        shrink = (1 - self.theta[unit].to(blocks.dtype) / blocks.norm(dim=-1).clamp_min(1e-12)).clamp_min(0)
        z = blocks * shrink[:, None]
        return z.reshape(-1), self.penalty(z.norm(dim=-1), sup.n_rows)


class BlockJumpReLUSAE(_ThresholdBlockSAE):
    coef_field = "block_l0_coef"

    @property
    def select_margin(self) -> float:  # blocks just below theta join with gate 0 for the rectangle gradient
        return self.cfg.block_bandwidth / 2

    def activate(self, pre, sup):
        blocks, unit = self.blocks(pre, sup)
        gate = _BlockStep.apply(blocks.detach().norm(dim=-1), self.theta[unit], self.cfg.block_bandwidth)
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
