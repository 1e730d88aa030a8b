"""sparsify (EleutherAI, `eai-sparsify`) side: SparseCoder with its fused Top-k encoder.

sparsify's Trainer runs a Hugging Face model itself, so this mirrors its per-batch code path
(sparsify/trainer.py, loss_fn="fvu"): b_dec = batch mean at step 0, forward with the dead mask,
loss = fvu + auxk_alpha * auxk, decoder-parallel gradient removed, Adam step, decoder renormalised,
tokens-since-fired updated. Adam instead of its default signum so every side uses one optimiser.

cfg["d_target"]: a transcoder (SparseCoderConfig.transcode) from each row's input columns to its target
columns, as its Trainer does one: at step 0 the encoder bias centres the pre-activations (-mean(x) W_enc^T)
and b_dec is the target's mean; the decoder starts at zero and is neither renormalised nor has its
parallel gradient removed.
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
    transcode = bool(data.d_target)
    if transcode and data.d_target != data.d_in:
        raise ValueError(f"sparsify's transcoders map d_in to d_in; the target has width {data.d_target}")
    sae = SparseCoder(
        data.d_in,
        SparseCoderConfig(expansion_factor=cfg["expansion"], k=cfg["k"], transcode=transcode),
        device="cpu",
        dtype=torch.float32,
    )
    opt = torch.optim.Adam(sae.parameters(), lr=cfg["lr"])
    since_fired = torch.zeros(sae.num_latents, dtype=torch.long)
    auxk_alpha = cfg["auxk_alpha"]

    def step(rows, i):
        x, y = data.split(rows)
        if i == 0:
            if transcode:
                sae.encoder.bias.data = -x.mean(0) @ sae.encoder.weight.data.T
            sae.b_dec.data = y.mean(0).to(sae.dtype)
        if not transcode:
            sae.set_decoder_norm_to_unit_norm()
        dead = since_fired > cfg["dead_tokens"]
        out = sae(x, y if transcode else None, dead_mask=dead)
        (out.fvu + auxk_alpha * out.auxk_loss).backward()
        if not transcode:
            sae.remove_gradient_parallel_to_decoder_directions()
        opt.step()
        opt.zero_grad()
        with torch.no_grad():
            fired = torch.zeros(sae.num_latents, dtype=torch.bool)
            fired[out.latent_indices.flatten()] = True
            since_fired.add_(rows.shape[0])
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
