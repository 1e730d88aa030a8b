"""Gated SAE (Rajamanoharan et al. 2024, "Improving Dictionary Learning with Gated Sparse Autoencoders").

The gate path pi = W_enc (x - b_dec) + b_enc decides which latents fire (H(pi)); the magnitude path shares
W_enc, rescaled per latent: m = exp(r_mag) * W_enc (x - b_dec) + b_mag, and z = H(pi) * ReLU(m). The L1
acts on the gate only: loss = ||x - x_hat(z)||^2 + lambda * sum_i ReLU(pi_i) ||W_dec,i||
+ ||x - x_hat_frozen(ReLU(pi))||^2, the last through a frozen copy of the decoder (and of b_dec), so the
gate path learns to reconstruct too. Decoder rows have unit norm (the paper). Saved as SAELens `gated`; a
gated transcoder is exactly a JumpReLU (pi > 0 iff m > b_mag - exp(r_mag) b_enc), saved as `jumprelu_transcoder`.
"""

from __future__ import annotations

import torch
from torch import nn

from workbench.sae.standard import StandardSAE


class GatedSAE(StandardSAE):
    unit_norm_decoder = True

    def init_dictionary(self, gen):
        super().init_dictionary(gen)
        self.r_mag = nn.Parameter(torch.zeros(self.cfg.n_latents))
        self.b_mag = nn.Parameter(torch.zeros(self.cfg.n_latents))

    def activate(self, pre, sup):
        """The support is pi > 0 (select), so every selected latent's gate is open: z = ReLU(m)."""
        idx = sup.idx
        mag = torch.exp(self.r_mag[idx]).to(pre.dtype) * (pre - self.b_enc[idx].to(pre.dtype)) + self.b_mag[idx]
        vals = mag.relu()
        if not self.training:
            return vals, {}
        gate = pre.relu()
        self._gate = gate  # for reconstruction's frozen-decoder term, in this same forward
        return vals, self.penalty(gate * self.decoder_norms(idx).to(gate.dtype), sup.n_rows)

    def reconstruction(self, xs, base, vals, W_dec, sup):
        terms, x_hat = super().reconstruction(xs, base, vals, W_dec, sup)
        gate = self.__dict__.pop("_gate", None)
        if gate is not None:
            frozen = base.detach() + self.kern.decode(gate, W_dec.detach(), sup)
            terms["gate_recon"] = (xs - frozen).pow(2).sum(-1).mean()
        return terms, x_hat

    def jumprelu_form(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(W_enc, b_enc, threshold) of the equal JumpReLU: W = exp(r) W_enc, b = b_mag, theta = b_mag - exp(r) b_enc."""
        r = torch.exp(self.r_mag.detach())
        return (
            self.W_enc.detach() * r[:, None],
            self.b_mag.detach().clone(),
            self.b_mag.detach() - r * self.b_enc.detach(),
        )
