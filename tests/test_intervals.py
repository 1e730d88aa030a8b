"""Seed intervals and verdicts: the t-interval against its textbook value, and each verdict's side."""

import math

import pytest

from workbench.errors import BadValueError
from workbench.intervals import NOT_SHOWN, SHOWN, UNDECIDED, Interval, paired_difference, t_interval, verdict


def test_t_interval_matches_the_textbook_formula():
    iv = t_interval([1.0, 2.0, 3.0])
    half = 4.302652729749464 * 1.0 / math.sqrt(3)  # t_{0.975, 2} * s / sqrt(n), s = 1
    assert (iv.mean, iv.n) == (2.0, 3)
    assert iv.lo == pytest.approx(2 - half) and iv.hi == pytest.approx(2 + half)
    assert iv.format("{:.2f}") == f"2.00 [{2 - half:.2f}, {2 + half:.2f}] (n=3)"


def test_one_value_has_no_interval_and_no_verdict():
    iv = t_interval([0.5, None])  # missing values are skipped
    assert iv.n == 1 and math.isnan(iv.lo) and iv.format() == "0.500 (n=1)"
    assert verdict(iv, "lower") == UNDECIDED
    with pytest.raises(BadValueError, match="at least one value"):
        t_interval([])


def test_paired_difference_uses_common_seeds_only():
    d = paired_difference({0: 1.0, 1: 2.0, 2: 4.0}, {0: 0.5, 1: 1.0, 5: 9.0})
    assert d.n == 2 and d.mean == pytest.approx(0.75)
    with pytest.raises(BadValueError, match="no seed in common"):
        paired_difference({0: 1.0}, {1: 1.0})


@pytest.mark.parametrize(
    "lo, hi, direction, margin, expected",
    [
        (-0.3, -0.1, "lower", 0.0, SHOWN),
        (0.1, 0.3, "lower", 0.0, NOT_SHOWN),
        (-0.1, 0.1, "lower", 0.0, UNDECIDED),
        (0.1, 0.3, "higher", 0.0, SHOWN),
        (-0.3, -0.1, "higher", 0.0, NOT_SHOWN),
        (-0.01, 0.03, "lower", 0.05, SHOWN),  # non-inferiority: at most 0.05 worse
        (-0.03, 0.01, "higher", 0.05, SHOWN),
        (-0.08, -0.06, "higher", 0.05, NOT_SHOWN),
    ],
)
def test_verdict_reads_the_interval_not_the_mean(lo, hi, direction, margin, expected):
    assert verdict(Interval((lo + hi) / 2, lo, hi, 3), direction, margin) == expected


def test_bad_direction_is_named():
    with pytest.raises(BadValueError, match="direction='less'.*lower"):
        verdict(Interval(0, -1, 1, 3), "less")
