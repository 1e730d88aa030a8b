"""The circuit search's choices as one dataclass, and the names each choice accepts (no torch here,
so the CLI can build its flags from them cheaply). Each field is saved with every circuit."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from workbench.config import Config
from workbench.errors import BadValueError

METHODS = ("eap", "eap-ig")
ABLATIONS = ("counterfactual", "mean", "zero")
METRICS = ("logit_diff", "prob", "kl")
DEFAULT_MIN_GAP = {"logit_diff": 0.05, "prob": 0.005, "kl": 0.005}


def check_method(method: str, steps: int) -> None:
    if method not in METHODS:
        raise BadValueError(f"unknown attribution method {method!r}; valid: {', '.join(METHODS)}")
    if not (isinstance(steps, int) and steps >= 1):
        raise BadValueError(f"steps must be a positive integer (interpolation steps for eap-ig), got {steps!r}")


def check_ablation(ablation: str, q=None, means=None) -> None:
    """The ablation name, and (given a prepared query) what it needs: a counterfactual or writer means."""
    if ablation not in ABLATIONS:
        raise BadValueError(f"unknown ablation {ablation!r}; valid: {', '.join(ABLATIONS)}")
    if ablation == "counterfactual" and q is not None and q.cf_tokens is None:
        raise BadValueError(
            "counterfactual ablation needs a counterfactual prompt; pass one, or use "
            "ablation='mean' (with means) or 'zero'"
        )
    if ablation == "mean" and q is not None and means is None:
        raise BadValueError("mean ablation needs writer means: pass means=writer_means(model, cache_or_tokens)")


def check_budget(budget: float, n_edges: int | None = None) -> None:
    """A fraction in (0, 1] that, for a graph of n_edges edges, allows at least one edge."""
    if not (isinstance(budget, (int, float)) and 0 < budget <= 1):
        raise BadValueError(f"the edge budget must be a fraction in (0, 1] (e.g. 0.02 for 2%), got {budget!r}")
    if n_edges and budget * n_edges < 1:
        raise BadValueError(
            f"the edge budget {budget:g} is below one edge: this model's graph has {n_edges} edges, "
            f"so the smallest budget is 1/{n_edges} = {100 / n_edges:.3g}%"
        )


def check_metric(metric: str) -> None:
    if metric not in METRICS:
        raise BadValueError(f"unknown metric {metric!r}; valid metrics: {', '.join(METRICS)}")


DROPS = ("auto", "greedy", "ordered")
# Above this many edges (or feature nodes) the defaults bound the exact search: every round of exact moves measures
# AUTO_DROP_POOL drops, not one per kept edge (quadratic in the circuit), and no backward elimination runs (grow 1).
# Tiny (479 edges) and small (3,628) stay below: their searches, and the committed tables, are the exhaustive ones.
LARGE_GRAPH = 10_000
AUTO_DROP_POOL = 64
AUTO_GROW = 2.0


@dataclass
class SearchConfig(Config):
    error = BadValueError

    method: str = field(
        default="eap-ig", metadata={"help": "edge attribution for the candidate rankings", "choices": METHODS}
    )
    steps: int = field(default=5, metadata={"min": 1, "help": "EAP-IG interpolation steps m"})
    ablation: str = field(
        default="counterfactual", metadata={"help": "what replaces the edges outside the circuit", "choices": ABLATIONS}
    )
    metric: str = field(default="logit_diff", metadata={"help": "faithfulness metric L", "choices": METRICS})
    refine_steps: int = field(default=4, metadata={"help": "rounds of exact drop/add/swap moves after best-of-N"})
    pool: int = field(default=24, metadata={"min": 1, "help": "additions tried per refinement round"})
    grow: float | None = field(
        default=None,
        metadata={
            "min": 1,
            "help": "backward elimination starts from the best circuit with grow x k edges (1: none); default: 2 on "
            f"graphs of up to {LARGE_GRAPH:,} edges (tiny, small), 1 above",
        },
    )
    drop_pool: int | None = field(
        default=None,
        metadata={
            "min": 0,
            "help": "single drops measured exactly per round: the circuit's N entries of least attribution (0: every "
            f"entry, exhaustive); default: every entry on graphs of up to {LARGE_GRAPH:,} edges (tiny, small), "
            f"{AUTO_DROP_POOL} above",
        },
    )
    min_gap: float | None = field(
        default=None,
        metadata={
            "min": 0,
            "help": "refuse / skip queries whose gap |L(M(q)) - L(M(q'))| is below this (default: per metric, "
            f"{DEFAULT_MIN_GAP})",
        },
    )
    max_batch: int = field(default=64, metadata={"min": 1, "help": "circuits per batched exact evaluation"})
    drops: str = field(
        default="auto",
        metadata={
            "help": "exact drops at a target NDF: greedy (the best single drop, one per round) or ordered (every "
            "single drop measured, then the rest tried one by one in that order, each kept if NDF holds); "
            "auto: greedy for component circuits, ordered for feature circuits",
            "choices": DROPS,
        },
    )
    step_batch: int | str | None = field(
        default="auto",
        metadata={
            "help": "EAP-IG steps per forward-backward: an integer (1: least memory), 'auto', or all at once (None)",
            "cli": False,
        },
    )

    def sized(self, n_items: int) -> SearchConfig:
        """This config with drop_pool and grow set to what they are on a graph of n_items (what a circuit saves)."""
        return dataclasses.replace(self, drop_pool=self.pool_for(n_items), grow=self.grow_for(n_items))

    def pool_for(self, n_items: int) -> int:
        """Drops measured per round on a graph of n_items (0: all); drop_pool, or its default for that size."""
        if self.drop_pool is not None:
            return self.drop_pool
        return 0 if n_items <= LARGE_GRAPH else AUTO_DROP_POOL

    def grow_for(self, n_items: int) -> float:
        """grow, or its default for a graph of n_items."""
        if self.grow is not None:
            return self.grow
        return AUTO_GROW if n_items <= LARGE_GRAPH else 1.0

    @property
    def gap_threshold(self) -> float:
        return DEFAULT_MIN_GAP[self.metric] if self.min_gap is None else self.min_gap


DEFAULT_TARGET_NDF = 0.8  # a feature search given neither a budget nor a target: the sparsest circuit reaching it
DEFAULT_BUDGET = 0.02  # a component search given neither: the most faithful circuit of 2% of the edges
DEFAULT_SAMPLES = 3  # resampled counterfactuals (and paraphrases) per query for best-of-N


@dataclass
class QueryConfig(Config):
    """One search's per-query values: what it aims at (a budget or a target NDF, not both), the wrong answer, the
    resampled counterfactuals and seed of best-of-N, and which member of a transcoder set it reads. Saved in
    every circuit's method."""

    error = BadValueError

    budget: float | None = field(default=None, metadata={"help": "a fraction of the edges (feature circuits: nodes)"})
    target_ndf: float | None = field(default=None, metadata={"help": "the NDF the sparsest circuit must reach"})
    wrong: str | int | None = field(default=None, metadata={"help": "the wrong answer of logit_diff"})
    n_samples: int = field(default=DEFAULT_SAMPLES, metadata={"help": "resampled counterfactuals for best-of-N"})
    seed: int = field(default=0, metadata={"help": "seed of the resamples and the search"})
    member: int | str = field(default=0, metadata={"help": "which config of each layer of a transcoder set"})

    def check(self) -> None:
        if self.budget is not None and self.target_ndf is not None:
            raise BadValueError("give either a budget or a target NDF, not both")
        if self.budget is not None:
            check_budget(self.budget)
        if self.target_ndf is not None and not (isinstance(self.target_ndf, int | float) and 0 < self.target_ndf <= 1):
            raise BadValueError(f"target_ndf={self.target_ndf!r} is outside (0, 1]: it is a share of the gap")

    def targeted(self) -> QueryConfig:
        """A copy aiming at DEFAULT_TARGET_NDF when it names neither a budget nor a target (feature circuits)."""
        if self.budget is None and self.target_ndf is None:
            return dataclasses.replace(self, target_ndf=DEFAULT_TARGET_NDF)
        return self

    def budgeted(self, n_items: int) -> QueryConfig:
        """A copy aiming at DEFAULT_BUDGET (at least one of n_items) when it names neither (component circuits),
        its budget checked against n_items."""
        if self.target_ndf is not None:
            return self
        out = self if self.budget is not None else dataclasses.replace(self, budget=max(DEFAULT_BUDGET, 1 / n_items))
        check_budget(out.budget, n_items)
        return out

    @classmethod
    def take(cls, query: QueryConfig | None, options: dict) -> tuple[QueryConfig, dict]:
        """(query with the per-query values among `options` set, the other options): the keyword form of the API
        (find_circuit(..., budget=0.02, seed=1)) read into one config, checked once."""
        names = {f.name for f in dataclasses.fields(cls)}
        mine = {k: v for k, v in options.items() if k in names}
        rest = {k: v for k, v in options.items() if k not in names}
        return dataclasses.replace(query or cls(), **mine), rest


@dataclass
class TaskConfig(Config):
    """A batch of generated queries of one task family (`circuit find --task`): how many, and the budgets each query's
    component circuit is found at (a feature circuit aims at the query's target instead)."""

    error = BadValueError

    n: int = field(default=20, metadata={"min": 1, "help": "queries generated from the task family"})
    budgets: list[float] = field(
        default_factory=lambda: [0.01, 0.02, 0.05], metadata={"help": "edge budgets of each query's circuit"}
    )

    def check(self) -> None:
        if not self.budgets:
            raise BadValueError("budgets is empty: give at least one edge budget (e.g. 2%)")
        for b in self.budgets:
            check_budget(b)
