"""Task metrics on answer-position logits and the faithfulness scores built on them (docs/methods.md §6).

Every metric is oriented so that higher means "more like the clean model's answer":
  logit_diff  logit[answer] - logit[wrong]
  prob        softmax(logits)[answer]
  kl          -KL(p_clean || p)       (0 for the clean model itself)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from workbench.circuits.config import METRICS, check_budget, check_metric  # noqa: F401  (re-exported)
from workbench.errors import BadValueError

MIB_GRID = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


@dataclass
class Metric:
    kind: str
    answer: int
    wrong: int | None
    clean_logits: torch.Tensor  # [vocab], answer position of the clean run

    def __post_init__(self):
        check_metric(self.kind)
        if self.kind == "logit_diff" and self.wrong is None:
            raise BadValueError("the logit_diff metric needs a wrong answer (or a counterfactual to take it from)")
        self.clean_logprobs = self.clean_logits.float().log_softmax(-1)

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        """[..., vocab] answer-position logits -> [...] metric values."""
        logits = logits.float()
        if self.kind == "logit_diff":
            return logits[..., self.answer] - logits[..., self.wrong]
        if self.kind == "prob":
            return logits.softmax(-1)[..., self.answer]
        lp = logits.log_softmax(-1)
        p = self.clean_logprobs.to(lp.device)
        return -(p.exp() * (p - lp)).sum(-1)


def nfs(value, clean: float, empty: float):
    """Normalised faithfulness (L(C) - L(∅)) / (L(M) - L(∅)); L(∅) is M(q') under counterfactual patching."""
    return (np.asarray(value, dtype=float) - empty) / (clean - empty)


def ndf(value, clean: float, empty: float):
    """Normalised deviation faithfulness 1 - min(|1 - NFS|, 1): penalises overshoot, bounded in [0, 1]."""
    return 1.0 - np.minimum(np.abs(1.0 - nfs(value, clean, empty)), 1.0)


def edge_counts(n_edges: int, fractions=MIB_GRID) -> list[int]:
    """Edges kept at each fraction, as MIB counts them (int(k * n_edges))."""
    return [int(k * n_edges) for k in fractions]


def budget_edges(budget: float, n_edges: int) -> int:
    """Edges in a circuit at a budget in (0, 1]; at least one, so a tiny budget is not an empty circuit."""
    check_budget(budget)
    return max(1, int(round(budget * n_edges)))


def area(fractions, values) -> float:
    """Trapezoidal area over the edge fraction (linear x, as MIB's CPR/CMD)."""
    x, y = np.asarray(fractions, dtype=float), np.asarray(values, dtype=float)
    return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2))


def cpr(fractions, nfs_values) -> float:
    """Circuit performance ratio: area under f(k) (higher is better)."""
    return area(fractions, nfs_values)


def cmd(fractions, nfs_values) -> float:
    """Circuit-model distance: area under |1 - f(k)| (lower is better)."""
    return area(fractions, np.abs(1.0 - np.asarray(nfs_values, dtype=float)))
