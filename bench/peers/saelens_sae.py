"""sae-lens side: TopKTrainingSAE driven by sae-lens's own SAETrainer, one `trainer.step(batch)` per batch.

cfg["variant"]: extra TopKTrainingSAEConfig fields, e.g. use_sparse_activations=True (sae-lens's COO-sparse
TopK path, which its docs recommend for fp32 without autocast, i.e. exactly this setting). With
torch 2.13 on the CPU that path only runs with rescale_acts_by_decoder_norm=False: with the default
True the backward fails (NotImplementedError: aten::view on SparseCPU).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import common  # noqa: E402
from sae_lens import TopKTrainingSAE, TopKTrainingSAEConfig  # noqa: E402
from sae_lens.config import LoggingConfig, SAETrainerConfig  # noqa: E402
from sae_lens.training.sae_trainer import SAETrainer  # noqa: E402


def main() -> None:
    cfg = common.sae_setup()
    data, variant = cfg["_data"], cfg.get("variant", {})
    d = data.d_in
    sae = TopKTrainingSAE(
        TopKTrainingSAEConfig(d_in=d, d_sae=cfg["expansion"] * d, k=cfg["k"], dtype="float32", device="cpu", **variant)
    )
    tcfg = SAETrainerConfig(
        total_training_samples=data.batch_size * data.n_steps,
        train_batch_size_samples=data.batch_size,
        lr=cfg["lr"],
        lr_end=cfg["lr"],
        lr_warm_up_steps=0,
        lr_decay_steps=0,
        device="cpu",
        autocast=False,
        dead_feature_window=max(1, cfg["dead_tokens"] // data.batch_size),
        feature_sampling_window=10**9,
        logger=LoggingConfig(log_to_wandb=False),
    )
    trainer = SAETrainer(cfg=tcfg, sae=sae, data_provider=iter(()))

    def step(x, i):  # what SAETrainer.fit does per batch, minus logging / checkpoints
        trainer.maybe_reset_sparsity()
        trainer.step(x)
        trainer.n_training_steps += 1

    def reconstruct(x):
        sae.eval()
        return sae.decode(sae.encode(x))

    side = "sae-lens" + (f" ({', '.join(f'{k}={v}' for k, v in variant.items())})" if variant else "")
    common.emit(
        common.run_sae(
            cfg,
            side,
            step,
            reconstruct,
            ("sae-lens",),
            base_rss=cfg["_base_rss"],
            n_dead=lambda: trainer.dead_neurons.sum(),
        )
    )


if __name__ == "__main__":
    main()
