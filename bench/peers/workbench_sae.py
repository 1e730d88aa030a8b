"""Workbench side (main venv): workbench.sae.trainer.Trainer, one `train_step(x)` per batch.

cfg["variant"]: SAEConfig overrides (architecture, scaffold_rank, kernel, encoder_init, ...); default plain Top-k.
Also times the one dense encoder matmul x @ W_enc^T ([B, d] x [d, n]) that no Top-k step avoids,
right before every step (so step / matmul is a ratio of neighbours, robust to other jobs' load).
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

import common  # noqa: E402
import torch  # noqa: E402

from workbench.sae.config import SAEConfig, TrainConfig  # noqa: E402
from workbench.sae.trainer import Trainer  # noqa: E402


def matmul_seconds(x: torch.Tensor, w: torch.Tensor) -> float:
    with torch.no_grad():
        t0 = time.perf_counter()
        x @ w.T
        return time.perf_counter() - t0


def main() -> None:
    cfg = common.sae_setup()
    data = cfg["_data"]
    variant = dict(cfg.get("variant", {}))
    label = variant.pop("label", "workbench")
    n_tokens = data.batch_size * data.n_steps
    sae_cfg = SAEConfig(
        k=cfg["k"],
        expansion=cfg["expansion"],
        seed=cfg["seed"],
        dead_tokens=cfg["dead_tokens"],
        aux_alpha=cfg["auxk_alpha"],
        **variant,
    ).resolve(data.d_in, n_tokens)
    train_cfg = TrainConfig(
        n_tokens=n_tokens,
        batch_size=data.batch_size,
        lr=cfg["lr"],
        warmup_steps=0,
        decay_frac=0.0,
        checkpoint_every=0,
        device="cpu",
        progress=False,
    )
    trainer = Trainer([sae_cfg], train_cfg, "cpu")
    sae = trainer.saes[0]

    def step(x, i):
        if i == 0:
            trainer.initialise(x)
        trainer.train_step(x)

    mm = []

    def before_step(x, i):  # the reference matmul right before each step, under the same load
        mm.append(matmul_seconds(x, sae.W_enc.detach()))

    extra = {"sae_config": sae_cfg.to_dict()}
    result = common.run_sae(
        cfg,
        label,
        step,
        sae.reconstruct,
        ("workbench",),
        extra,
        base_rss=cfg["_base_rss"],
        before_step=before_step if cfg.get("time_matmul") else None,
    )
    if mm:
        warm = cfg.get("warmup_steps", 2)
        result["matmul_s"] = mm
        result["matmul_s_median"] = common.median(mm[warm:])
        result["step_over_matmul"] = common.median([s / m for s, m in zip(result["step_s"][warm:], mm[warm:])])
    common.emit(result)


if __name__ == "__main__":
    main()
