"""bench/intervals.py: the t-interval and the verdict every claim line of the SAE tables rests on."""

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import intervals  # noqa: E402


def test_interval_is_the_t_interval_of_the_mean():
    m, lo, hi = intervals.interval([1.0, 2.0, 3.0])
    half = 4.302652729911275 * 1.0 / math.sqrt(3)  # t_{0.975, 2} x sd / sqrt(n)
    assert (m, lo, hi) == pytest.approx((2.0, 2.0 - half, 2.0 + half))
    assert math.isnan(intervals.interval([5.0])[1]) and math.isnan(intervals.interval([])[0])


@pytest.mark.parametrize(
    "diffs, sign, want",
    [
        ([-0.10, -0.12, -0.11], -1, intervals.SHOWN),
        ([-0.10, -0.12, -0.11], +1, intervals.NOT_SHOWN),
        ([-0.10, 0.12, 0.01], -1, intervals.UNDECIDED),
        ([-0.10], -1, intervals.UNDECIDED),  # one seed has no interval
    ],
)
def test_verdict_comes_from_the_interval_not_the_mean(diffs, sign, want):
    assert intervals.verdict(diffs, sign) == want


def test_fmt_names_the_interval_or_says_there_is_one_seed():
    assert intervals.fmt([1.0, 2.0, 3.0], 1) == "2.0 [-0.5, 4.5]"
    assert intervals.fmt([1.0]) == "1.000 (n=1)" and intervals.fmt([]) == "–"
