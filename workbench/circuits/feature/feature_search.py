"""Feature-level query circuits (docs/methods.md §11): the query-circuit search (search.py) over the nodes of a
transcoder replacement (features, error nodes, embeddings), each candidate scored by NDF measured by exact
intervention in the real model (feature_patching.py).

Candidate rankings: attribution patching of every node on the query and on each resampled counterfactual, the
attribution graph's influence (circuit-tracer's ranking: what the graph says matters for the logits, blind to
the counterfactual), and the normalised mean; each gives a top-k circuit, the best is refined by exact drops,
additions and swaps as the component search refines edges. Paraphrases move every node to other positions, so
they are not used here. A circuit's edges are the attribution graph's edges between its nodes.
"""

from __future__ import annotations

import dataclasses

import torch

from workbench.circuits.config import SearchConfig, check_budget
from workbench.circuits.feature.feature_patching import FeatureSetup
from workbench.circuits.inputs import QueryInput
from workbench.circuits.metrics import Metric
from workbench.circuits.search import Evaluator, Found, MaskSearch, check_gap, smallest_hit


class FeatureEvaluator(Evaluator):
    """Exact metric values of feature circuits (node masks), memoised by mask."""

    def size(self) -> int:
        return self.setup.n_nodes

    def run(self, masks: torch.Tensor) -> torch.Tensor:
        return self.setup.evaluate(masks, self.max_batch)


def node_keys(setup: FeatureSetup) -> list[tuple]:
    """A key per node that names the same node in another setup of the same prompt."""
    keys = [("f", *row) for row in setup.features.tolist()]
    keys += [("e", layer, pos) for layer in range(setup.L) for pos in range(setup.P)]
    return keys + [("t", pos) for pos in range(setup.P)]


def map_nodes(src: FeatureSetup, dst: FeatureSetup, values: torch.Tensor, fill=0) -> torch.Tensor:
    """values [..., src.n_nodes] moved onto dst's nodes (nodes src lacks get `fill`)."""
    where = {k: i for i, k in enumerate(node_keys(src))}
    idx = torch.tensor([where.get(k, -1) for k in node_keys(dst)])
    out = torch.full((*values.shape[:-1], dst.n_nodes), fill, dtype=values.dtype)
    out[..., idx >= 0] = values[..., idx[idx >= 0]]
    return out


def graph_influence(setup: FeatureSetup, graph) -> torch.Tensor:
    """[n_nodes]: each node's influence on the graph's logits (attribution_graph: pruning's node influence), 0
    for nodes the graph does not hold (features without a row, latents active only in the counterfactual)."""
    from workbench.circuits.feature import influence as inf

    infl = inf.influence(inf.normalise(graph.adjacency), graph.n_features, graph.logit_probs)
    where = {("f", *row): i for i, row in enumerate(graph.features.tolist())}
    out = torch.zeros(setup.n_nodes)
    for i, key in enumerate(node_keys(setup)):
        if key[0] == "f" and key in where:
            out[i] = infl[where[key]]
    out[setup.n_features :] = infl[graph.n_features :].float()  # errors then tokens, in the same order
    return out


class FeatureSearch(MaskSearch):
    """The query-circuit search over the nodes of a transcoder replacement instead of the edges of the component graph."""

    DROPS = "ordered"  # greedy drops are quadratic in the circuit's size (~100 s per induction circuit)

    def __init__(
        self, model, transcoders, query: QueryInput, samples=None, cfg: SearchConfig | None = None, graph=None
    ):
        self.model, self.query, self.cfg, self.means = model, query, cfg or SearchConfig(), None
        cfg = self.cfg
        self.setup = FeatureSetup(model, transcoders, query, cfg.ablation)
        self.metric = Metric(cfg.metric, query.answer, query.wrong, self.setup.clean.logits)
        self.ev = FeatureEvaluator(model, self.setup, self.metric, cfg.max_batch)
        check_gap(self.ev, cfg, query)
        self.tcs, self.samples = self.setup.tcs, dict(samples or {})
        self.scores = self.setup.node_gradients(self.metric)
        sets = {"query": self.scores}
        for name, s in self.samples.items():
            other = FeatureSetup(model, self.tcs, s, cfg.ablation)
            sets[name] = map_nodes(
                other, self.setup, other.node_gradients(Metric(cfg.metric, s.answer, s.wrong, other.clean.logits))
            )
        if graph is not None:
            sets["graph"] = graph_influence(self.setup, graph)
        normed = torch.stack([s.abs() / s.abs().max().clamp_min(1e-12) for s in sets.values()])
        self.score_sets = sets
        self.absolute = {**dict(zip(sets, normed)), "mean": normed.mean(0)}

    @property
    def n_items(self) -> int:
        return self.setup.n_nodes

    def _prune(self, mask: torch.Tensor) -> torch.Tensor:
        return mask  # every node set is a circuit: a node without a path simply does nothing

    def candidates(self, k: int, signed: bool = False) -> tuple[list[str], torch.Tensor]:
        names = [f"{name}/topk" for name in self.absolute]
        return names, torch.stack([self._topk(r, k) for r in self.absolute.values()])

    def _moves(self, mask: torch.Tensor, k: int) -> tuple[list[str], torch.Tensor]:
        """Single drops, plus (room permitting) single additions of the best-ranked nodes outside."""
        moves, names = [], []
        for e in mask.nonzero().flatten().tolist():
            m = mask.clone()
            m[e] = False
            moves.append(m)
            names.append(f"drop {e}")
        if k - int(mask.sum()) > 0:
            outside = (~mask).nonzero().flatten()
            rank = self.absolute["mean"][outside]
            for e in outside[rank.argsort(descending=True)][: self.cfg.pool].tolist():
                m = mask.clone()
                m[e] = True
                moves.append(m)
                names.append(f"add {e}")
        return names, torch.stack(moves) if moves else torch.zeros(0, self.n_items, dtype=torch.bool)

    def ndf_under(self, mask: torch.Tensor, others: dict[str, QueryInput]) -> dict[str, float]:
        out = {}
        for name, q in others.items():
            setup = FeatureSetup(self.model, self.tcs, q, self.cfg.ablation)
            ev = FeatureEvaluator(
                self.model, setup, Metric(self.cfg.metric, q.answer, q.wrong, setup.clean.logits), self.cfg.max_batch
            )
            if ev.gap >= self.cfg.gap_threshold:
                out[name] = float(ev.ndf(ev.values(map_nodes(self.setup, setup, mask[None]).bool()))[0])
        return out

    def node_effects(self, found: Found) -> dict[int, float]:
        """Each kept node's measured effect: the circuit's NDF minus its NDF without that node."""
        kept = found.mask.nonzero().flatten().tolist()
        if not kept:
            return {}
        masks = found.mask[None].repeat(len(kept), 1)
        masks[torch.arange(len(kept)), kept] = False
        return dict(zip(kept, (found.ndf - self.ev.ndf(self.ev.values(masks))).tolist()))

    def find(self, budget: float | None = None, target_ndf: float | None = None) -> Found:
        """At a node budget (a fraction of the nodes), or the sparsest reaching target_ndf."""
        if target_ndf is None:
            check_budget(budget, self.n_items)
            found = self.at_budget(budget)
        else:
            found = self.sparsest(target_ndf)
        return dataclasses.replace(found, baseline_ndf=self.topk_ndf(int(found.mask.sum())))

    def _topk(self, ranking: torch.Tensor, k: int) -> torch.Tensor:
        m = torch.zeros(self.n_items, dtype=torch.bool)
        m[ranking.argsort(descending=True)[:k]] = True
        return m

    def _query_topk(self, k: int) -> torch.Tensor:
        return self._topk(self.absolute["query"], k)

    def topk_ndf(self, k: int) -> float:
        """NDF of the top-k nodes of the query's own attribution (the baseline at the circuit's size)."""
        return float(self.ev.ndf(self.ev.values(self._query_topk(k)[None]))[0])

    def topk_sparsest(self, target_ndf: float) -> Found:
        """The smallest top-k of the query's own attribution reaching target_ndf (the baseline's size)."""

        def topk_only(k: int) -> Found:
            return Found(self._query_topk(k), float("nan"), self.topk_ndf(k), float("nan"), "query/topk")

        return smallest_hit(topk_only, self.n_items, target_ndf)
