"""The learning-rate schedule the SAE trainer and sparse-attention post-training share (a factor on the lr)."""

from __future__ import annotations


def lr_factor(step: int, warmup_steps: int, n_steps: int = 0, decay_frac: float = 0.0) -> float:
    """Linear warm-up over warmup_steps, constant, then linear decay to 0 over the last decay_frac of n_steps."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    decay_start = n_steps - int(decay_frac * n_steps)
    if step >= decay_start and n_steps > decay_start:
        return max(0.0, (n_steps - step) / (n_steps - decay_start))
    return 1.0
