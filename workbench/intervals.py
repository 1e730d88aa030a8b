"""Seed-level intervals and the verdicts claims are read from (the benches report these, never a bare mean).

A figure measured over n seeds is reported as its mean with a two-sided Student-t interval over the
seeds; a claim compares two configurations run with the same seeds, so it is read from the paired
differences (one per seed). The verdict comes from the interval, not the mean:
"shown" when it lies on the claimed side of the margin, "not shown" when it lies on the other side,
"not distinguishable at this n" when it straddles it (always so with one seed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workbench.errors import BadValueError

SHOWN, NOT_SHOWN, UNDECIDED = "shown", "not shown", "not distinguishable at this n"
DIRECTIONS = ("lower", "higher")


@dataclass(frozen=True)
class Interval:
    """Mean and the bounds of its `confidence` interval over n values (lo = hi = nan below two values)."""

    mean: float
    lo: float
    hi: float
    n: int
    confidence: float = 0.95

    def format(self, fmt: str = "{:.3f}") -> str:
        """'0.123 [0.100, 0.146] (n=3)'; a single value shows as '0.123 (n=1)'."""
        if self.n < 2:
            return f"{fmt.format(self.mean)} (n={self.n})"
        return f"{fmt.format(self.mean)} [{fmt.format(self.lo)}, {fmt.format(self.hi)}] (n={self.n})"


def t_interval(values, confidence: float = 0.95) -> Interval:
    """Mean with the Student-t interval over the values (independent seeds): mean +- t_{n-1} s / sqrt(n)."""
    from scipy.stats import t

    vals = [float(v) for v in values if v is not None]
    if not vals:
        raise BadValueError("t_interval needs at least one value, got none")
    if not 0 < confidence < 1:
        raise BadValueError(f"confidence={confidence} must be in (0, 1)")
    n = len(vals)
    mean = sum(vals) / n
    if n < 2:
        return Interval(mean, math.nan, math.nan, n, confidence)
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1))
    half = float(t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n, confidence)


def paired_difference(a: dict, b: dict, confidence: float = 0.95) -> Interval:
    """Interval of a - b over the seeds both have (a, b: seed -> value)."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        raise BadValueError(f"no seed in common between {sorted(a)} and {sorted(b)}")
    return t_interval([a[s] - b[s] for s in seeds], confidence)


def verdict(diff: Interval, direction: str, margin: float = 0.0) -> str:
    """The verdict on "a is `direction` than b (by more than -margin)" from the interval of a - b.

    direction "lower": shown when hi < margin, not shown when lo > margin; "higher" mirrors it (shown
    when lo > -margin). A positive margin reads as non-inferiority: "a is at most `margin` worse than b"."""
    if direction not in DIRECTIONS:
        raise BadValueError(f"direction={direction!r}; choose from {list(DIRECTIONS)}")
    if diff.n < 2 or math.isnan(diff.lo):
        return UNDECIDED
    lo, hi = (diff.lo, diff.hi) if direction == "lower" else (-diff.hi, -diff.lo)  # "higher": read b - a
    if hi < margin:
        return SHOWN
    if lo > margin:
        return NOT_SHOWN
    return UNDECIDED
