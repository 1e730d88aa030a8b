"""What the penalised architectures share: a sparsity coefficient lambda steered by the target_l0 controller,
and the straight-through step whose rectangle pseudo-derivative reaches a threshold (JumpReLU-style).

Group lasso and block JumpReLU (workbench.sae.blocksparse), JumpReLU, gated and standard (ReLU + L1) SAEs
are all `PenalisedSAE`s: their loss is the reconstruction plus lambda times a per-token sparsity term, and
with `target_l0` lambda (or, for the thresholded ones, the thresholds) is moved after every step so the
batch L0 holds the target (docs/methods.md §3).
"""

from __future__ import annotations

import torch

from workbench.sae.base import SparseAutoencoder
from workbench.sae.config import COEF_FIELDS


class Step(torch.autograd.Function):
    """H(x - theta) with the rectangle pseudo-derivative of width `bandwidth`: -K/eps to theta (Rajamanoharan
    et al. 2024), and +K/eps to x too when `to_input` (Anthropic's January 2025 JumpReLU)."""

    @staticmethod
    def forward(ctx, x, theta, bandwidth, to_input=False):
        ctx.save_for_backward(x, theta)
        ctx.bandwidth, ctx.to_input = bandwidth, to_input
        return (x > theta).to(theta.dtype)

    @staticmethod
    def backward(ctx, g):
        x, theta = ctx.saved_tensors
        eps = ctx.bandwidth
        k = ((x - theta).abs() < eps / 2).to(g.dtype) * g / eps
        return (k.to(x.dtype) if ctx.to_input else None), -k, None, None


class PenalisedSAE(SparseAutoencoder):
    """loss = reconstruction + lambda * (a per-token sparsity term); lambda is the config field `coef_field`
    names (COEF_FIELDS), held in a buffer the target_l0 controller moves."""

    @property
    def coef_field(self) -> str:
        return COEF_FIELDS[self.cfg.architecture]

    def __init__(self, cfg):
        super().__init__(cfg)
        # lambda as training uses it: the config's value, moved by the target_l0 log controller (float64: its
        # many small multiplicative steps drift in float32); saved in checkpoints so a resume is exact
        coef = torch.tensor(float(getattr(cfg, self.coef_field)), dtype=torch.float64)
        self.register_buffer("sparsity_coef", coef)
        self.register_buffer("coef_integral", coef.clone())  # the controller's integral part of lambda

    def penalty(self, per_entry: torch.Tensor, n_rows: int) -> dict:
        """{name: lambda * per_entry.sum() / n_rows} in training with lambda > 0, else {}."""
        if not (self.training and getattr(self.cfg, self.coef_field)):
            return {}
        name = f"{self.coef_field.removesuffix('_coef')}_penalty"
        return {name: self.sparsity_coef.to(per_entry.dtype) * per_entry.sum() / n_rows}

    def decoder_norms(self, idx: torch.Tensor) -> torch.Tensor:
        """||W_dec,i|| of the latents idx (1 for a unit-norm decoder, which needs no product)."""
        if self.unit_norm_decoder:
            return torch.ones(idx.shape, dtype=self.W_dec.dtype, device=idx.device)
        return self.W_dec.norm(dim=-1)[idx]

    def scale_thresholds(self, factor: torch.Tensor) -> None:
        """The "threshold" controller's step; only thresholded architectures have one."""
        raise NotImplementedError

    @torch.no_grad()
    def after_step(self, stats: dict) -> None:
        """The target_l0 controller. "log": PI in log space on lambda (the integral part takes a multiplicative
        step toward the target, the proportional factor damps the lag between lambda and the codes).
        "threshold": every threshold is scaled by exp(rate * err), so L0 follows the target within steps; lambda
        stays fixed. A JumpReLU needs the latter: Adam moves a threshold at most about lr a step whatever lambda
        is, so a lambda controller winds up while L0 stays where the thresholds hold it."""
        c = self.cfg
        if c.target_l0 is None:
            return
        err = (stats["l0"].double() / c.target_l0 - 1).clamp(-1, 1)
        if c.l0_control == "threshold":
            self.scale_thresholds(torch.exp(c.l0_control_rate * err))
            return
        self.coef_integral.mul_(torch.exp(c.l0_control_rate * err))
        self.sparsity_coef.copy_(self.coef_integral * torch.exp(c.l0_control_gain * err))
