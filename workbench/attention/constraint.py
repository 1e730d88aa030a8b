"""The constrained-loss objective: min E[open edges]/N_edges subject to CE <= CE_target (methods.md §7).

Lagrangian L = open_frac + lambda * (CE - CE_target); the model and gates descend on L while lambda
ascends on the constraint violation: lambda <- max(0, lambda + eta * (c - CE_target)), with c the
batch CE or, GECO style, its exponential moving average (smoother lambda, slower to react).
"""

from __future__ import annotations

import torch

from workbench.attention.config import SparsifyConfig


class Multiplier:
    def __init__(self, cfg: SparsifyConfig, ce_target: float):
        self.lr, self.decay, self.target = cfg.multiplier_lr, cfg.ce_ema, float(ce_target)
        self.value = float(cfg.lambda_init)
        self.ce_avg: float | None = None

    def lagrangian(self, open_frac: torch.Tensor, ce: torch.Tensor) -> torch.Tensor:
        return open_frac + self.value * (ce - self.target)

    def update(self, ce: float) -> float:
        """One dual-ascent step on this step's (all-process mean) CE; returns the new lambda."""
        if self.decay > 0:
            self.ce_avg = ce if self.ce_avg is None else self.decay * self.ce_avg + (1 - self.decay) * ce
            c = self.ce_avg
        else:
            c = ce
        self.value = max(0.0, self.value + self.lr * (c - self.target))
        return self.value

    def state_dict(self) -> dict:
        return {"value": self.value, "ce_avg": self.ce_avg}

    def load_state_dict(self, state: dict) -> None:
        self.value, self.ce_avg = state["value"], state["ce_avg"]
