"""What the query-circuit search (the query-circuits paper) does whatever a circuit is made of: a circuit is a
boolean mask over a search's items (the component graph's edges, a transcoder replacement's nodes), scored by
exact evaluation on the query, memoised by mask; the best-of-N size search for a target NDF; the gap a
faithfulness score needs; and the search itself over any items (MaskSearch), given its items by component/search.py
(edges) and feature/feature_search.py (nodes)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np
import torch

from workbench.circuits.config import QueryConfig, SearchConfig, check_budget
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


class MaskSearch(ABC):
    """The query-circuit search whatever a circuit's items are: best-of-N candidates scored exactly, refined by
    single drops, additions and swaps, at a budget or the sparsest reaching a target NDF. A subclass gives its items:
    the evaluator `ev`, the config `cfg`, the rankings `absolute` (name -> score per item), and the hooks below
    (component/search.py: the edges of the component graph; feature/feature_search.py: a replacement's nodes)."""

    ev: Evaluator
    cfg: SearchConfig
    absolute: dict[str, torch.Tensor]

    @property
    @abstractmethod
    def n_items(self) -> int:
        """Entries of a circuit mask."""

    @abstractmethod
    def _prune(self, mask: torch.Tensor) -> torch.Tensor:
        """A mask with the items that no longer take part dropped."""

    @abstractmethod
    def candidates(self, k: int, signed: bool = False) -> tuple[list[str], torch.Tensor]:
        """Candidate circuits of k items, named `<ranking>/<selection>` (one is `query/topk`, the baseline)."""

    @abstractmethod
    def _moves(self, mask: torch.Tensor, k: int) -> tuple[list[str], torch.Tensor]:
        """Single drops (`drop i`) and, room permitting (at most k items), additions (`add ...`) of a circuit."""

    def best_of_n(self, k: int) -> Found:
        names, masks = self.candidates(k)
        vals = self.ev.values(masks)
        scores = self.ev.ndf(vals)
        i = int(np.argmax(scores))
        base = names.index("query/topk")
        return Found(
            masks[i],
            float(vals[i]),
            float(scores[i]),
            float(self.ev.nfs(vals[i])),
            names[i],
            dict(zip(names, map(float, scores))),
            float(scores[base]),
        )

    def refine(self, found: Found, k: int) -> Found:
        """Exact hill-climbing at <= k edges: accept the best drop, addition or swap that raises NDF."""
        mask, best = found.mask, found.ndf
        for _ in range(self.cfg.refine_steps):
            names, moves = self._moves(mask, k + 2)
            if not len(moves):
                break
            scores = self.ev.ndf(self.ev.values(moves))
            sizes = moves.sum(1)
            ok = sizes <= k
            options = [(float(s), -int(n), m) for s, n, m, o in zip(scores, sizes, moves, ok) if o]
            drops = [i for i, nm in enumerate(names) if nm.startswith("drop")]
            adds = [i for i, nm in enumerate(names) if nm.startswith("add")]
            # swaps: the best few drops combined with the best few additions
            top_d = sorted(drops, key=lambda i: -scores[i])[:3]
            top_a = sorted(adds, key=lambda i: -scores[i])[:3]
            swaps = [self._prune(moves[d] & mask | (moves[a] & ~mask)) for d in top_d for a in top_a]
            swaps = [s for s in swaps if int(s.sum()) <= k]
            if swaps:
                sw = torch.stack(swaps)
                options += [(float(s), -int(sw_i.sum()), sw_i) for s, sw_i in zip(self.ev.ndf(self.ev.values(sw)), sw)]
            if not options:
                break
            score, neg_size, m = max(options, key=lambda o: (o[0], o[1]))
            if score > best + 1e-6 or (score >= best and -neg_size < int(mask.sum())):
                mask, best = m, score
            else:
                break
        if best <= found.ndf and torch.equal(mask, found.mask):
            return found
        v = float(self.ev.values(mask[None])[0])
        return Found(
            mask, v, best, float(self.ev.nfs(v)), found.source + "+refined", found.candidates, found.baseline_ndf
        )

    def _measured(self, found: Found, mask: torch.Tensor, step: str) -> Found:
        """found's provenance on a new mask, its value, NDF and NFS evaluated exactly; step says what changed it."""
        v = float(self.ev.values(mask[None])[0])
        return Found(
            mask,
            v,
            float(self.ev.ndf(v)),
            float(self.ev.nfs(v)),
            f"{found.source}+{step}",
            found.candidates,
            found.baseline_ndf,
        )

    def shrink(self, found: Found, k: int) -> Found:
        """Backward elimination by exact evaluation: drop the least useful edge until at most k remain."""
        mask = found.mask
        while int(mask.sum()) > k:
            _, moves = self._moves(mask, 0)  # drops only
            scores = self.ev.ndf(self.ev.values(moves)) - 1e-9 * moves.sum(1).numpy()
            # far from k, drop the few least useful edges together (fewer model calls); one at a time near k
            n_drop = max(1, (int(mask.sum()) - k) // 3)
            if self.cfg.pool_for(self.n_items):  # at most a quarter of the measured drops together
                n_drop = min(n_drop, max(1, len(moves) // 4))
            order = np.argsort(-scores)[:n_drop]
            together = self._prune(moves[order].all(0))
            mask = together if n_drop > 1 and int(together.sum()) >= k else moves[order[0]]
        return self._measured(found, mask, "shrunk")

    def at_budget(self, budget: float) -> Found:
        """The most faithful circuit with at most budget * n_edges edges.

        Two exact local searches, the better one is kept: refinement of the best-of-N circuit at k
        edges, and backward elimination from the best-of-N circuit at `grow` * k edges (edges that only
        help together are kept that way), then refined.
        """
        check_budget(budget)
        k = max(1, int(budget * self.n_items))
        bon = self.best_of_n(k)
        forward = self.refine(bon, k)
        big = min(self.n_items, int(self.cfg.grow_for(self.n_items) * k))
        if big <= k:
            return forward
        wide = self.best_of_n(big)
        backward = self.refine(
            self.shrink(
                Found(wide.mask, wide.value, wide.ndf, wide.nfs, wide.source, bon.candidates, bon.baseline_ndf), k
            ),
            k,
        )
        return backward if backward.ndf > forward.ndf else forward

    def sparsest(self, target_ndf: float) -> Found:
        """The sparsest circuit whose NDF reaches target_ndf (best-of-N size search, then exact drops)."""
        QueryConfig(target_ndf=target_ndf)  # its one range check
        found = smallest_hit(self.best_of_n, self.n_items, target_ndf)
        rule = self.DROPS if self.cfg.drops == "auto" else self.cfg.drops
        drop = self._drop_ordered if rule == "ordered" else self._drop_greedy
        return self._measured(found, drop(found.mask, target_ndf), "pruned")

    DROPS = "greedy"  # the drop rule when cfg.drops is "auto"

    def _drop_greedy(self, mask: torch.Tensor, target_ndf: float) -> torch.Tensor:
        """The best single drop while NDF stays >= target_ndf: every kept entry measured each round."""
        while int(mask.sum()) > 0:
            _, moves = self._moves(mask, 0)  # room 0: drops only
            scores = self.ev.ndf(self.ev.values(moves))
            i = int(np.argmax(scores - 1e-9 * moves.sum(1).numpy()))
            if scores[i] < target_ndf:
                break
            mask = moves[i]
        return mask

    def _drop_ordered(self, mask: torch.Tensor, target_ndf: float) -> torch.Tensor:
        """Rounds of: every single drop measured, the drops keeping target_ndf ordered by the NDF they leave (the
        best first: greedy's choice, taken), then each of the others tried in that order on the current circuit
        and kept when NDF stays >= target_ndf (one exact evaluation each). It stops by greedy's rule, when no
        single drop keeps the target, so the result is as 1-minimal; a round costs about 2n evaluations where
        greedy pays n per dropped entry."""
        while int(mask.sum()) > 0:
            _, moves = self._moves(mask, 0)
            scores = self.ev.ndf(self.ev.values(moves)) - 1e-9 * moves.sum(1).numpy()
            ok = np.flatnonzero(scores >= target_ndf)
            if not ok.size:
                break
            ok = ok[np.argsort(-scores[ok], kind="stable")]
            mask = moves[ok[0]]
            for i in ok[1:]:
                m = self._prune(mask & moves[i])
                if self.ev.ndf(self.ev.values(m[None]))[0] >= target_ndf:
                    mask = m
        return mask
