"""sparsify (EleutherAI, `eai-sparsify`) side: SparseCoder with its fused Top-k encoder.

sparsify's Trainer runs a Hugging Face model itself, so this mirrors its per-batch code path
(sparsify/trainer.py, loss_fn="fvu"): b_dec = batch mean at step 0, forward with the dead mask,
loss = fvu + auxk_alpha * auxk, decoder-parallel gradient removed, Adam step, decoder renormalised,
tokens-since-fired updated. Adam instead of its default signum so every side uses one optimiser.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import common  # noqa: E402
import torch  # noqa: E402
from sparsify import SparseCoder, SparseCoderConfig  # noqa: E402


def main() -> None:
    cfg = common.sae_setup()
    data = cfg["_data"]
    sae = SparseCoder(
        data.d_in, SparseCoderConfig(expansion_factor=cfg["expansion"], k=cfg["k"]), device="cpu", dtype=torch.float32
    )
    opt = torch.optim.Adam(sae.parameters(), lr=cfg["lr"])
    since_fired = torch.zeros(sae.num_latents, dtype=torch.long)
    auxk_alpha = cfg["auxk_alpha"]

    def step(x, i):
        if i == 0:
            sae.b_dec.data = x.mean(0).to(sae.dtype)
        sae.set_decoder_norm_to_unit_norm()
        dead = since_fired > cfg["dead_tokens"]
        out = sae(x, dead_mask=dead)
        (out.fvu + auxk_alpha * out.auxk_loss).backward()
        sae.remove_gradient_parallel_to_decoder_directions()
        opt.step()
        opt.zero_grad()
        with torch.no_grad():
            fired = torch.zeros(sae.num_latents, dtype=torch.bool)
            fired[out.latent_indices.flatten()] = True
            since_fired.add_(x.shape[0])
            since_fired[fired] = 0

    @torch.no_grad()
    def reconstruct(x):
        enc = sae.encode(x)
        return sae.decode(enc.top_acts, enc.top_indices)

    common.emit(
        common.run_sae(
            cfg,
            "sparsify",
            step,
            reconstruct,
            ("eai-sparsify",),
            base_rss=cfg["_base_rss"],
            n_dead=lambda: (since_fired > cfg["dead_tokens"]).sum(),
        )
    )


if __name__ == "__main__":
    main()
