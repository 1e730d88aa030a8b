"""Standard SAE: z = ReLU(W_enc (x - b_dec) + b_enc), loss MSE + lambda * L1 (Bricken et al. 2023).

`l1_decoder` (saved with the SAE): "weighted" (default; Anthropic's April 2024 update) leaves the decoder
norms free and penalises sum_i z_i ||W_dec,i||, so shrinking the decoder cannot buy a smaller L1; "unit"
keeps unit-norm decoder rows and penalises sum_i z_i. Saved as SAELens `standard` (`transcoder`).
"""

from __future__ import annotations

from workbench.sae.kernels import Support
from workbench.sae.sparsity import PenalisedSAE


class StandardSAE(PenalisedSAE):
    @property
    def unit_norm_decoder(self) -> bool:
        return self.cfg.l1_decoder == "unit"

    def select(self, h) -> Support:
        return Support.from_mask(h > 0, h)

    def activate(self, pre, sup):
        vals = pre.relu()
        return vals, self.penalty(vals * self.decoder_norms(sup.idx).to(vals.dtype), sup.n_rows)
