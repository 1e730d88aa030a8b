"""Workbench side (main venv): workbench.sae.trainer.Trainer, one `train_step(x)` per batch.

cfg["variant"]: SAEConfig overrides (architecture, scaffold_rank, kernel, encoder_init, ...); default plain Top-k.
cfg["d_target"]: a transcoder from each row's input columns to its last d_target columns (the trainer's own
[input | target] row layout, so the step sees the rows as they are).
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


def matmul_seconds(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor | None = None) -> float:
    """One x @ w^T; into `out` when given (a preallocated [B, n] buffer: no fresh pages to fault in)."""
    with torch.no_grad():
        t0 = time.perf_counter()
        torch.mm(x, w.T, out=out)
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
        transcoder=bool(data.d_target),
        **variant,
    ).resolve(data.d_in, n_tokens, data.d_target)
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

    mm, mm_pre = [], []
    # zeros: its pages are touched before any timing. It stays resident, so the peak memory of a side
    # that times the matmuls includes B x n x 4 bytes the training step does not use.
    buf = torch.zeros(data.batch_size, sae_cfg.n_latents) if cfg.get("time_matmul") else None

    def before_step(x, i):  # the reference matmuls right before each step, under the same load
        x = data.split(x)[0]
        mm.append(matmul_seconds(x, sae.W_enc.detach()))
        mm_pre.append(matmul_seconds(x, sae.W_enc.detach(), buf))

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
        n_dead=lambda: (trainer.since_fired[0] >= sae_cfg.dead_tokens).sum() * sae_cfg.unit_size,
    )
    if mm:
        warm = cfg.get("warmup_steps", 2)
        for key, times in (("matmul", mm), ("matmul_prealloc", mm_pre)):
            result[f"{key}_s"] = times
            result[f"{key}_s_median"] = common.median(times[warm:])
            result[f"step_over_{key}"] = common.median([s / m for s, m in zip(result["step_s"][warm:], times[warm:])])
    common.emit(result)


if __name__ == "__main__":
    main()
