"""The graph check's rank statistics, comparable to the field's (Anthropic's "Circuit tracing" validates a graph by
the Spearman correlation between feature → feature influence and the measured effect of an intervention): the graph's
predicted influence of one feature on another through every kept path, and Spearman's rank correlation.

No torch model here: check.py measures, this module predicts and ranks.
"""

from __future__ import annotations

import torch


def pair_influence(features: dict, links: list[dict]) -> dict[tuple[str, str], float]:
    """(source, target) feature ids -> the graph's predicted change of the target's pre-activation when the source
    is ablated, through every kept path: −a_s · ((I − M)⁻¹ − I)[t, s] with M[t, s] = A[t, s] / a_s (a link is a
    direct effect on the target's pre-activation, and one unit of pre-activation moves an active feature's code by
    one, as GraphNodes.predicted). features: id -> (layer, pos, latent, activation); every ordered pair whose
    target lies in a later layer at the same or a later position (where an effect can reach) is listed."""
    ids = list(features)
    ix = {n: i for i, n in enumerate(ids)}
    m = torch.zeros(len(ids), len(ids), dtype=torch.float64)
    for link in links:
        s, t = ix.get(link["source"]), ix.get(link["target"])
        act = features[link["source"]][3] if s is not None else 0.0
        if s is not None and t is not None and act:
            m[t, s] += float(link["weight"]) / act
    eye = torch.eye(len(ids), dtype=torch.float64)
    total = torch.linalg.inv(eye - m) - eye if ids else m
    return {
        (s, t): -features[s][3] * float(total[ix[t], ix[s]])
        for s in ids
        for t in ids
        if features[t][0] > features[s][0] and features[t][1] >= features[s][1]
    }


def ranks(v) -> torch.Tensor:
    """Ranks 0..n−1 of v, ties given their average rank."""
    v = torch.as_tensor(v, dtype=torch.float64)
    r = torch.empty_like(v)
    r[v.argsort()] = torch.arange(len(v), dtype=torch.float64)
    _, inv = torch.unique(v, return_inverse=True)
    sums = torch.zeros(int(inv.max()) + 1 if len(v) else 0, dtype=torch.float64).index_add_(0, inv, r)
    return (sums / torch.bincount(inv).double())[inv]


def spearman(x, y) -> float | None:
    """Spearman's rank correlation of x and y (ties averaged); None below 3 points or when a side is constant."""
    if len(x) != len(y):
        raise ValueError(f"spearman of {len(x)} and {len(y)} values")
    if len(x) < 3:
        return None
    rx, ry = ranks(x), ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = float(rx.norm() * ry.norm())
    return float(rx @ ry) / den if den > 0 else None


def rank_block(predicted: dict, measured: dict) -> dict:
    """Spearman of |predicted| against |measured| over predicted's keys, for each (semantics, op) reading in
    `measured` ({semantics: {op: {key: value}}}), with the number of points."""
    keys = list(predicted)
    p = [abs(predicted[k]) for k in keys]
    out = {s: {op: spearman(p, [abs(v[k]) for k in keys]) for op, v in by_op.items()} for s, by_op in measured.items()}
    return {**out, "n": len(keys)}
