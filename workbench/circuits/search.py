"""What the query-circuit search (the query-circuits paper) does whatever a circuit is made of: a circuit is a
boolean mask over a search's items (the component graph's edges, a transcoder replacement's nodes), scored by
exact evaluation on the query, memoised by mask; the best-of-N size search for a target NDF; the gap a
faithfulness score needs. The searches themselves: component/search.py (edges), feature/feature_search.py
(nodes)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np
import torch

from workbench.circuits.config import SearchConfig
from workbench.circuits.inputs import QueryError, QueryInput
from workbench.circuits.metrics import Metric, ndf, nfs


class ZeroGapError(QueryError):
    """Clean and ablated runs give (almost) the same metric: faithfulness would divide by ~0."""


@dataclass
class Found:
    """One circuit chosen by the search, with how it was chosen."""

    mask: torch.Tensor
    value: float
    ndf: float
    nfs: float
    source: str
    candidates: dict[str, float] = field(default_factory=dict)  # candidate -> NDF (best-of-N spread)
    baseline_ndf: float | None = None  # plain top-k of the query's own scores, same number of edges


def smallest_hit(best_of_n, n: int, target_ndf: float):
    """The best-of-N circuit at the smallest size k <= n whose NDF reaches target_ndf: geometric sizes up to the
    first hit, then a binary search between the last miss and it (the full circuit, k = n, is the model)."""
    sizes = sorted({max(1, int(round(1.5**i))) for i in range(64) if 1.5**i < n} | {n})
    lo, hit = 0, None
    for k in sizes:
        f = best_of_n(k)
        if f.ndf >= target_ndf:
            hit = (k, f)
            break
        lo = k
    k_hi, found = hit or (n, best_of_n(n))
    while k_hi - lo > 1:
        mid = (lo + k_hi) // 2
        f = best_of_n(mid)
        if f.ndf >= target_ndf:
            k_hi, found = mid, f
        else:
            lo = mid
    return found


class Evaluator(ABC):
    """Exact metric values of circuits (boolean masks over a search's items) for one setup, memoised by mask."""

    def __init__(self, model, setup, metric: Metric, max_batch: int):
        self.model, self.setup, self.metric, self.max_batch = model, setup, metric, max_batch
        self.cache: dict[bytes, float] = {}
        self.n_evaluated = 0
        e = self.size()
        self.clean = float(metric(metric.clean_logits).detach())
        self.empty = self.values(torch.zeros(1, e, dtype=torch.bool))[0]

    @abstractmethod
    def size(self) -> int:
        """Entries of a circuit mask."""

    @abstractmethod
    def run(self, masks: torch.Tensor) -> torch.Tensor:
        """Answer-position logits [n, d_vocab] of circuits given as masks [n, size()], by exact intervention."""

    def values(self, masks: torch.Tensor) -> np.ndarray:
        keys = [bytes(np.packbits(m.numpy())) for m in masks]
        first: dict[bytes, int] = {}
        for i, k in enumerate(keys):
            first.setdefault(k, i)
        new = [k for k in first if k not in self.cache]
        if new:
            batch = masks[[first[k] for k in new]]
            vals = self.metric(self.run(batch)).tolist()
            self.cache.update(zip(new, vals))
            self.n_evaluated += len(new)
        return np.array([self.cache[k] for k in keys])

    def ndf(self, values) -> np.ndarray:
        return ndf(values, self.clean, self.empty)

    def nfs(self, values) -> np.ndarray:
        return nfs(values, self.clean, self.empty)

    @property
    def gap(self) -> float:
        return abs(self.clean - self.empty)


def check_gap(ev: Evaluator, cfg: SearchConfig, q: QueryInput) -> None:
    if ev.gap < cfg.gap_threshold:
        raise ZeroGapError(
            f"the {cfg.ablation} ablation barely changes the {cfg.metric}: L(M(q)) = {ev.clean:.4f}, "
            f"L(M(q')) = {ev.empty:.4f}, gap {ev.gap:.4f} < min_gap {cfg.gap_threshold} (answer "
            f"{q.answer_str!r}, wrong {q.wrong_str!r}); faithfulness is undefined without a gap — use a "
            "counterfactual that changes the answer"
        )
