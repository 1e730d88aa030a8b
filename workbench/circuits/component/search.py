"""Query-circuit search (the query-circuits paper): best-of-N sampling plus greedy refinement.

Candidates: edge rankings from attribution on the query itself, on resampled counterfactuals and on
paraphrases (each with its own counterfactual), plus their normalised average; each ranking gives a
top-k and a greedy-from-logits circuit. Every candidate is scored by *exact* evaluation on the
query (its own counterfactual / ablation), the best is kept (best-of-N), then refined by exact
single-edge drops, additions and swaps. The NDF of every candidate is kept, so the spread over
resamples is reported, not only the winner.
"""

from __future__ import annotations

import numpy as np
import torch

from workbench.circuits.component.attribute import EdgeScores, attribute
from workbench.circuits.component.graph import Graph
from workbench.circuits.component.patching import evaluate, make_setup
from workbench.circuits.component.select import greedy, incidence, prune, topk
from workbench.circuits.config import SearchConfig
from workbench.circuits.inputs import QueryInput
from workbench.circuits.metrics import MIB_GRID, Metric, cmd, cpr, edge_counts
from workbench.circuits.search import Evaluator, MaskSearch, check_gap


class EdgeEvaluator(Evaluator):
    """Exact metric values of edge circuits for one setup, by exact patching."""

    def size(self) -> int:
        """Entries of a circuit mask (the graph's edges)."""
        return self.setup.graph.n_edges

    def run(self, masks: torch.Tensor) -> torch.Tensor:
        return evaluate(self.model, self.setup, masks, self.max_batch)


class QuerySearch(MaskSearch):
    """Attribution for a query and its samples, then candidate circuits evaluated exactly on the query."""

    def __init__(
        self,
        model,
        query: QueryInput,
        samples: dict[str, QueryInput] | None = None,
        cfg: SearchConfig | None = None,
        means: torch.Tensor | None = None,
    ):
        self.model, self.query, self.cfg, self.means = model, query, cfg or SearchConfig(), means
        cfg = self.cfg
        self.graph = Graph.from_model(model)
        self.cfg = cfg = cfg.sized(self.graph.n_edges)  # the size defaults resolved, as the circuit records them
        self.setup = make_setup(model, self.graph, query, cfg.ablation, means)
        self.metric = Metric(cfg.metric, query.answer, query.wrong, self.setup.clean_logits)
        self.ev = EdgeEvaluator(model, self.setup, self.metric, cfg.max_batch)
        check_gap(self.ev, cfg, query)
        kw = dict(method=cfg.method, steps=cfg.steps, metric=cfg.metric, means=means, step_batch=cfg.step_batch)
        self.scores: EdgeScores = attribute(
            model, query, ablation=cfg.ablation, per_position=True, setup=self.setup, **kw
        )
        sets = {"query": self.scores.scores}
        for name, s in (samples or {}).items():
            abl = cfg.ablation if s.cf_tokens is not None or cfg.ablation != "counterfactual" else None
            if abl is None:
                continue
            sets[name] = attribute(model, s, ablation=abl, **kw).scores
        self.score_sets = sets
        normed = torch.stack([s / s.abs().max().clamp_min(1e-12) for s in sets.values()])
        self.signed = {**dict(zip(sets, normed)), "mean": normed.mean(0)}
        self.absolute = {**{n: s.abs() for n, s in zip(sets, normed)}, "mean": normed.abs().mean(0)}

    @property
    def n_items(self) -> int:
        """Entries of a circuit mask: the graph's edges (a feature search: its nodes)."""
        return self.graph.n_edges

    def _prune(self, mask: torch.Tensor) -> torch.Tensor:
        """A mask with the edges that no longer connect input to logits dropped."""
        return prune(self.graph, mask)

    # ------------------------------------------------------------------ candidates
    def candidates(self, k: int, signed: bool = False) -> tuple[list[str], torch.Tensor]:
        """Top-k and greedy circuits of every ranking (signed: only the query's own and the mean ranking)."""
        rankings = {n: self.signed[n] for n in ("query", "mean")} if signed else self.absolute
        names, masks = [], []
        for name, r in rankings.items():
            for sel, fn in (("topk", topk), ("greedy", greedy)):
                names.append(f"{name}/{sel}")
                masks.append(fn(self.graph, r, k))
        return names, torch.stack(masks)

    def _moves(self, mask: torch.Tensor, k: int) -> tuple[list[str], torch.Tensor]:
        """Single drops, plus additions (bridging edges, or a new node with one edge in and one out)."""
        parent, child = incidence(self.graph)
        moves, names = [], []
        for e in self._drop_candidates(mask):
            m = mask.clone()
            m[e] = False
            moves.append(self._prune(m))
            names.append(f"drop {e}")
        room = k - int(mask.sum())
        if room <= 0:
            return names, torch.stack(moves) if moves else torch.zeros(0, self.n_items, dtype=torch.bool)
        rank = self.absolute["mean"]
        n_nodes = len(self.graph.nodes)
        alive = torch.zeros(n_nodes, dtype=torch.bool)
        alive[parent[mask]] = True
        alive |= child[mask].any(0)
        alive[0] = alive[n_nodes - 1] = True
        parent_ok = alive[parent]
        child_ok = (child & alive).any(1)
        bridge = (~mask & parent_ok & child_ok).nonzero().flatten()
        for e in bridge[torch.argsort(rank[bridge], descending=True)][: self.cfg.pool].tolist():
            m = mask.clone()
            m[e] = True
            moves.append(self._prune(m))
            names.append(f"add {e}")
        if room >= 2:
            for ein, eout in self._new_node_pairs(mask, alive, parent, child, rank)[: self.cfg.pool // 2]:
                m = mask.clone()
                m[[ein, eout]] = True
                moves.append(self._prune(m))
                names.append(f"add {ein}+{eout}")
        return names, torch.stack(moves)

    def _drop_candidates(self, mask: torch.Tensor) -> list[int]:
        """The kept entries whose single drops are measured: all of them, or (a drop pool) the least attributed
        (mean ranking), in index order, which bounds a round's exact evaluations on a large graph."""
        kept = mask.nonzero().flatten()
        pool = self.cfg.pool_for(self.n_items)
        if pool and len(kept) > pool:
            kept = kept[torch.argsort(self.absolute["mean"][kept], stable=True)[:pool]].sort().values
        return kept.tolist()

    def _new_node_pairs(self, mask, alive, parent, child, rank):
        pairs = []
        for v in (~alive).nonzero().flatten().tolist():
            into = (~mask & child[:, v] & alive[parent]).nonzero().flatten()
            out = (~mask & (parent == v) & (child & alive).any(1)).nonzero().flatten()
            if len(into) and len(out):
                ein, eout = into[rank[into].argmax()], out[rank[out].argmax()]
                pairs.append((float(rank[ein] + rank[eout]), int(ein), int(eout)))
        return [(a, b) for _, a, b in sorted(pairs, reverse=True)]

    # ------------------------------------------------------------------ modes

    def curve(self, fractions=MIB_GRID) -> dict:
        """f(k) = NFS over the MIB grid for the search (best of N at each k) and for plain top-k of the query's scores.

        CPR uses signed rankings (max f over candidates), CMD absolute rankings (min |1 - f|), as MIB does.
        """
        counts = edge_counts(self.n_items, fractions)
        out = {"fractions": list(fractions), "edges": counts}
        for signed in (True, False):
            per_k = [self.candidates(k, signed) for k in counts]
            f = [self.ev.nfs(self.ev.values(m)) for _, m in per_k]
            base = [fi[names.index("query/topk")] for (names, _), fi in zip(per_k, f)]
            if signed:
                best = [float(fi.max()) for fi in f]
                out.update(
                    search_cpr_f=best,
                    topk_cpr_f=list(map(float, base)),
                    search_cpr=cpr(fractions, best),
                    topk_cpr=cpr(fractions, base),
                )
            else:
                best = [float(fi[np.argmin(np.abs(1 - fi))]) for fi in f]
                out.update(
                    search_f=best,
                    topk_f=list(map(float, base)),
                    search_cmd=cmd(fractions, best),
                    topk_cmd=cmd(fractions, base),
                    search_ndf=[float(1 - min(abs(1 - x), 1)) for x in best],
                    topk_ndf=[float(1 - min(abs(1 - x), 1)) for x in base],
                )
        return out

    def ndf_under(self, mask: torch.Tensor, others: dict[str, QueryInput]) -> dict[str, float]:
        """NDF of one circuit on the same prompt with other counterfactuals (resamples): its spread."""
        out = {}
        for name, q in others.items():
            setup = make_setup(self.model, self.graph, q, self.cfg.ablation, self.means)
            metric = Metric(self.cfg.metric, q.answer, q.wrong, setup.clean_logits)
            ev = EdgeEvaluator(self.model, setup, metric, self.cfg.max_batch)
            if ev.gap >= self.cfg.gap_threshold:
                out[name] = float(ev.ndf(ev.values(mask[None]))[0])
        return out
