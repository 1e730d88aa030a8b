"""The paper's circuit-size claims, read from a comparison's per-query rows (`compare.compare_result`): for one
measure at one NDF target, over the queries every model has a gap on, each model's mean, the ratio of the
means, the geometric mean of the per-query base / sparse ratios and base - sparse, the last two with their paired
Student-t 95% intervals (docs/methods.md §7). With a control (the base fine-tuned like the sparse model, without
gates) the same pair statistics split the change: base - control ("from training"), control - sparse ("from the
gates"). bench/circuits/circuit_claims.py tabulates them; the app's Compare page shows them per task family. No torch
here: the app reads stored comparisons.

    paired(result, "component_edges", "0.9")  # {"n", "base", "sparse", "ratio_of_means", "ratio", "difference"}
    paired(result, "heads", "0.9", "control", "sparse")  # {"n", "control", "sparse", ...}: from the gates
"""

from __future__ import annotations

import math

from workbench.intervals import Interval, paired_difference, t_interval

# the per-query counts: level name -> how to read it from one side's query result at a target (compare.query_side)
LEVELS = {
    "component_edges": lambda r, t: r["component"][t]["edges"],
    "heads": lambda r, t: len(r["component"][t]["heads"]),
    "mlps": lambda r, t: len(r["component"][t]["mlps"]),
    "nodes": lambda r, t: len(r["component"][t]["heads"]) + len(r["component"][t]["mlps"]),
    "token_entries": lambda r, t: r["token"][t]["entries"],
}


def _entries_per_edge(side: dict, t: str) -> float | None:
    entries, edges = side["token"][t]["entries"], side["component"][t]["edges"]
    return entries / edges if entries is not None and edges else None


# table name -> compare.LEVELS key, or a per-query function of one side's result and the NDF target
MEASURES = {
    "heads": "heads",
    "MLPs": "mlps",
    "component edges": "component_edges",
    "attention entries": "token_entries",
    "attention entries per circuit edge": _entries_per_edge,
}


# the pairs a comparison with a control splits base - sparse into, in order (a, b): a - b, a / b
SPLIT = {
    "base - sparse": ("base", "sparse"),
    "from training": ("base", "control"),
    "from the gates": ("control", "sparse"),
}


def model_sides(res: dict) -> tuple[str, ...]:
    """The models a comparison measured, in order: base, its control (if any), the sparse model (if any)."""
    return ("base",) + tuple(s for s in ("control", "sparse") if res.get(f"{s}_model"))


def pairs(res: dict) -> dict[str, tuple[str, str]]:
    """The pairs to tabulate: base - sparse alone, or with a control the split of it."""
    return SPLIT if "control" in model_sides(res) else {"base - sparse": SPLIT["base - sparse"]}


def side_values(res: dict, side: str, measure, t: str, sides: tuple[str, ...] | None = None) -> dict[int, float]:
    """query index -> one side's value, over the queries every one of `sides` (default: every model) has a gap
    on, and a value for."""
    read = measure if callable(measure) else LEVELS[measure]
    sides = sides or model_sides(res)
    out = {}
    for i, q in enumerate(res["queries"]):
        if not any("skipped" in q[s] for s in sides) and (v := read(q[side], t)) is not None:
            out[i] = float(v)
    return out


def log_ratio(b: dict[int, float], s: dict[int, float]) -> Interval | None:
    """exp of the Student-t interval of log(b / s) over the queries where both counts are > 0: the
    geometric mean of the per-query ratios, with its interval (None: no such query)."""
    logs = [math.log(b[i] / s[i]) for i in sorted(set(b) & set(s)) if b[i] > 0 and s[i] > 0]
    if not logs:
        return None
    iv = t_interval(logs)
    return Interval(math.exp(iv.mean), math.exp(iv.lo), math.exp(iv.hi), iv.n, iv.confidence)  # one query: nan bounds


def paired(res: dict, measure, t: str, a: str = "base", b: str = "sparse") -> dict | None:
    """Model a against model b (default: base against sparse) on one measure at one target, over the queries
    every model has a gap on (None: no query has a value on both); the means keyed by the side names."""
    va, vb = side_values(res, a, measure, t), side_values(res, b, measure, t)
    both = sorted(set(va) & set(vb))
    if not both:
        return None
    ma, mb = (sum(d[i] for i in both) / len(both) for d in (va, vb))
    return {
        "n": len(both),
        a: ma,
        b: mb,
        "a": a,
        "b": b,
        "ratio_of_means": ma / mb if mb else None,
        "ratio": log_ratio(va, vb),
        "difference": paired_difference(va, vb),
    }


def split(res: dict, measure, t: str) -> dict[str, dict | None]:
    """Each pair to tabulate (`pairs`) -> `paired` of it: base - sparse, and with a control "from training" and
    "from the gates" over the same queries (the page's and the CLI's table rows read this one thing)."""
    return {label: paired(res, measure, t, a, b) for label, (a, b) in pairs(res).items()}


def split_flags(found: dict[str, dict | None]) -> list[str]:
    """Which intervals of a `split` include no effect: base - sparse's flags as they are, each split pair's named."""
    flags = []
    for label, p in found.items():
        if p is not None:
            flags += [f if label == "base - sparse" else f"{label}: {f}" for f in undecided(p)]
    return flags


def undecided(p: dict) -> list[str]:
    """Which of the paired intervals includes no effect (or cannot be drawn from fewer than two queries)."""
    diff, ratio = p["difference"], p["ratio"]
    flags = []
    if diff.n < 2 or diff.lo <= 0 <= diff.hi:
        flags.append("difference includes 0")
    if ratio is None or ratio.n < 2 or ratio.lo <= 1 <= ratio.hi:
        flags.append("ratio includes 1")
    return flags


def format_gap(gap: dict, digits: int = 2) -> str:
    """'1.20 [0.45, 1.95] (n=20)': a paired gap's mean (head_flow.paired_gap) and its interval; '-' without a
    query both models have."""
    if gap["mean"] is None:
        return "-"
    f = lambda v: f"{v:.{digits}f}"  # noqa: E731
    if gap["lo"] is None:
        return f"{f(gap['mean'])} (n={gap['n']})"
    return f"{f(gap['mean'])} [{f(gap['lo'])}, {f(gap['hi'])}] (n={gap['n']})"
