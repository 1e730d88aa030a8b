"""JumpReLU SAE: z_i = h_i H(h_i - theta_i) with a learned threshold per latent (Rajamanoharan et al. 2024,
"Jumping Ahead"), trained through straight-through estimators with a rectangle kernel of width epsilon.

`jumprelu_recipe` (saved with the SAE; docs/methods.md §3b):
  rajamanoharan2024  loss MSE + lambda * L0 (the step's pseudo-derivative reaches theta only), unit-norm
                     decoder rows;
  anthropic2025      Anthropic's Circuits Updates, January 2025: loss MSE + lambda * sum tanh(c |z_i| ||W_dec,i||)
                     + lambda_p * sum relu(theta_i - h_i) ||W_dec,i|| (the pre-activation penalty, over every
                     latent, pulls dead ones back), decoder norms free, and the pseudo-derivative also reaches
                     the pre-activation (so the encoder, not only theta, learns where a latent jumps).
The thresholds are the block JumpReLU's (workbench.sae.blocksparse.ThresholdSAE) with one-latent units:
theta = softplus(raw), started at the value that keeps target_l0 (or k) latents a token on the first batch,
and held at target_l0 by scaling them (l0_control "threshold"). Saved as SAELens `jumprelu`.
"""

from __future__ import annotations

import torch

from workbench.sae.blocksparse import ThresholdSAE
from workbench.sae.kernels import Support, topk
from workbench.sae.sparsity import Step


class JumpReLU(torch.autograd.Function):
    """x H(x - theta). Pseudo-derivatives: -(theta/eps) K((x - theta)/eps) to theta; to x, H(x - theta), plus
    (theta/eps) K when `to_input` (K the unit rectangle)."""

    @staticmethod
    def forward(ctx, x, theta, bandwidth, to_input=False):
        ctx.save_for_backward(x, theta)
        ctx.bandwidth, ctx.to_input = bandwidth, to_input
        return x * (x > theta).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        x, theta = ctx.saved_tensors
        eps = ctx.bandwidth
        k = ((x - theta).abs() < eps / 2).to(g.dtype) * theta * g / eps
        gx = (x > theta).to(g.dtype) * g + (k if ctx.to_input else 0)
        return gx, -k, None, None


class JumpReLUSAE(ThresholdSAE):
    signed = False

    @property
    def anthropic2025(self) -> bool:
        return self.cfg.jumprelu_recipe == "anthropic2025"

    @property
    def unit_norm_decoder(self) -> bool:
        return not self.anthropic2025

    @property
    def select_margin(self) -> float:  # latents just below theta join with code 0 for the rectangle gradient
        return self.cfg.jumprelu_bandwidth / 2

    def inference_threshold(self) -> torch.Tensor:
        return self.theta.detach()

    def init_units(self) -> int:
        return max(1, round(self.cfg.target_l0 if self.cfg.target_l0 is not None else self.cfg.k))

    def init_select(self, h) -> Support:
        """The encoder scale is fitted on a Top-k of init_units (theta is set after it, from the same count)."""
        vals, idx = topk(h, min(self.init_units(), h.shape[1]))
        return Support.from_topk(h, idx, vals > 0)

    def init_dictionary(self, gen):
        super().init_dictionary(gen)
        with torch.no_grad():  # a small theta until the first batch sets it: the encoder fit sees ReLU codes
            self.raw_theta.fill_(-7.0)

    def activate(self, pre, sup):
        c = self.cfg
        theta = self.theta[sup.idx].to(pre.dtype)
        vals = JumpReLU.apply(pre, theta, c.jumprelu_bandwidth, self.anthropic2025)
        if not self.training:
            return vals, {}
        if self.anthropic2025:
            term = torch.tanh(c.tanh_c * vals * self.decoder_norms(sup.idx).to(vals.dtype))
        else:
            term = Step.apply(pre, theta, c.jumprelu_bandwidth)
        return vals, self.penalty(term, sup.n_rows)

    def dense_terms(self, enc_in, W_enc, b_enc, sup) -> dict:
        """anthropic2025's pre-activation penalty: every latent below its threshold, so one dense product."""
        c = self.cfg
        if not (self.training and self.anthropic2025 and c.pre_act_coef):
            return {}
        h = enc_in.to(W_enc.dtype) @ W_enc.T + b_enc
        below = (self.theta.to(h.dtype) - h).relu() * self.W_dec.norm(dim=-1).to(h.dtype)
        return {"pre_act_penalty": c.pre_act_coef * below.sum() / sup.n_rows}
