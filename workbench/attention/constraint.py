"""The constrained-loss objective: min E[open edges]/N_edges subject to CE <= CE_target (docs/methods.md §7).

Lagrangian L = open_frac + lambda * v with the violation v = CE - CE_ref - allowed; the model and
gates descend on L while lambda ascends on v: lambda <- max(0, lambda + eta * v), v the batch's (or a
held-out stream's, SparsifyConfig.dual_stream) or, GECO style, its exponential moving average (smoother
lambda, slower to react).
"""

from __future__ import annotations

import torch

from workbench.attention.config import SparsifyConfig


class Multiplier:
    def __init__(self, cfg: SparsifyConfig):
        self.lr, self.decay = cfg.multiplier_lr, cfg.ce_ema
        self.allowed = cfg.tolerance * (1 - cfg.dual_margin)
        self.value = float(cfg.lambda_init)
        self.avg: float | None = None

    def lagrangian(self, open_frac: torch.Tensor, ce: torch.Tensor, ce_ref: float) -> torch.Tensor:
        return open_frac + self.value * (ce - ce_ref - self.allowed)

    def update(self, ce: float, ce_ref: float, steps: int = 1) -> float:
        """One dual-ascent step on a (all-process mean) CE; `steps`: how many training steps it stands for
        (a held-out dual stream evaluated every N steps moves lambda N steps' worth); returns the new lambda."""
        v = ce - ce_ref - self.allowed
        if self.decay > 0:
            self.avg = v if self.avg is None else self.decay * self.avg + (1 - self.decay) * v
            v = self.avg
        self.value = max(0.0, self.value + self.lr * steps * v)
        return self.value

    def state_dict(self) -> dict:
        return {"value": self.value, "avg": self.avg}

    def load_state_dict(self, state: dict) -> None:
        self.value, self.avg = state["value"], state["avg"]
