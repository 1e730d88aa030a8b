"""Means with 95% t-intervals over seeds, and the claim verdict they allow.

A claim's verdict comes from the interval of the per-seed (paired) differences, never from the means:
"shown" when the whole interval lies on the claimed side of zero, "not shown" when it lies wholly on
the other side, "not distinguishable at this n" when it contains zero (or fewer than 2 seeds exist).
"""

from __future__ import annotations

import math
import statistics

from scipy.stats import t as student_t

SHOWN, NOT_SHOWN, UNDECIDED = "shown", "not shown", "not distinguishable at this n"


def interval(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the two-sided t-interval of the mean; low = high = nan with one value."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan, math.nan
    m = statistics.fmean(values)
    if n < 2:
        return m, math.nan, math.nan
    half = student_t.ppf(0.5 + level / 2, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return m, m - half, m + half


def verdict(diffs: list[float], sign: int) -> str:
    """The claim that the mean of `diffs` has sign `sign` (-1: below zero, +1: above), from their interval."""
    _, lo, hi = interval(diffs)
    if math.isnan(lo):
        return UNDECIDED
    if sign * lo > 0 and sign * hi > 0:
        return SHOWN
    if sign * lo < 0 and sign * hi < 0:
        return NOT_SHOWN
    return UNDECIDED


def fmt(values: list[float], digits: int = 3) -> str:
    """'mean [low, high] (n)' for a table cell."""
    m, lo, hi = interval(values)
    if math.isnan(m):
        return "–"
    if math.isnan(lo):
        return f"{m:.{digits}f} (n=1)"
    return f"{m:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"
