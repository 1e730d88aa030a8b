"""The circuit search's choices as one dataclass, and the names each choice accepts (no torch here,
so the CLI can build its flags from them cheaply). Each field is saved with every circuit."""

from __future__ import annotations

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
    grow: float = field(
        default=2.0,
        metadata={"min": 1, "help": "backward elimination starts from the best circuit with grow x k edges"},
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

    @property
    def gap_threshold(self) -> float:
        return DEFAULT_MIN_GAP[self.metric] if self.min_gap is None else self.min_gap
