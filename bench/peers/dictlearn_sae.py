"""dictionary_learning side: its TopKTrainer (AutoEncoderTopK), one `trainer.update(step, x)` per batch."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import common  # noqa: E402
import torch  # noqa: E402
from dictionary_learning.trainers.top_k import TopKTrainer  # noqa: E402


def main() -> None:
    cfg = common.sae_setup()
    data = cfg["_data"]
    d = data.d_in
    trainer = TopKTrainer(
        steps=data.n_steps,
        activation_dim=d,
        dict_size=cfg["expansion"] * d,
        k=cfg["k"],
        layer=0,
        lm_name="bench",
        lr=cfg["lr"],
        auxk_alpha=cfg["auxk_alpha"],
        warmup_steps=0,
        seed=cfg["seed"],
        device="cpu",
    )
    trainer.dead_feature_threshold = cfg["dead_tokens"]  # a constructor constant (10M) in the library

    def step(x, i):
        trainer.update(i, x)

    @torch.no_grad()
    def reconstruct(x):
        return trainer.ae(x)

    common.emit(
        common.run_sae(
            cfg,
            "dictionary_learning",
            step,
            reconstruct,
            ("dictionary-learning",),
            base_rss=cfg["_base_rss"],
            n_dead=lambda: (trainer.num_tokens_since_fired >= trainer.dead_feature_threshold).sum(),
        )
    )


if __name__ == "__main__":
    main()
