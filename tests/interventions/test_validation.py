"""The check's rank validation: the graph's feature -> feature influence through its kept paths, and Spearman's
rank correlation with ties."""

import math

import pytest

from workbench.interventions.validation import pair_influence, rank_block, ranks, spearman


def test_spearman_ranks_with_ties_averaged():
    assert ranks([3.0, 1.0, 2.0, 2.0]).tolist() == [3.0, 0.0, 1.5, 1.5]
    assert spearman([1, 2, 3, 4], [10, 20, 30, 45]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ranks x (0, 1.5, 1.5, 3), y (0, 2, 1, 3): centred dot 4.5 over sqrt(4.5 * 5)
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    assert spearman([1, 2], [2, 1]) is None and spearman([1, 2, 3], [5, 5, 5]) is None


def test_pair_influence_follows_every_kept_path():
    """f0 (layer 0, act 2) -> f1 (layer 1, act 4) weight 5, f1 -> f2 (layer 2) weight 8, f0 -> f2 weight 1:
    ablating f0 moves f1's pre-activation by -5 and f2's by -(1 + 5 * 8 / 4) = -11; a feature at an earlier
    position than its source, or in the same layer, is no pair."""
    features = {"a": (0, 1, 3, 2.0), "b": (1, 1, 4, 4.0), "c": (2, 1, 9, 1.0), "early": (2, 0, 1, 1.0)}
    links = [
        {"source": "a", "target": "b", "weight": 5.0},
        {"source": "b", "target": "c", "weight": 8.0},
        {"source": "a", "target": "c", "weight": 1.0},
        {"source": "E_3_0", "target": "a", "weight": 7.0},  # an embedding's link: not between features
    ]
    p = pair_influence(features, links)
    assert set(p) == {("a", "b"), ("a", "c"), ("b", "c")}
    assert p[("a", "b")] == pytest.approx(-5.0) and p[("a", "c")] == pytest.approx(-11.0)
    assert p[("b", "c")] == pytest.approx(-8.0)


def test_rank_block_compares_magnitudes_per_reading():
    predicted = {"x": -3.0, "y": 1.0, "z": 2.0}
    measured = {"frozen": {"ablate": {"x": 3.1, "y": -0.5, "z": -2.2}}, "live": {"ablate": {"x": 0.1, "y": 1, "z": 2}}}
    b = rank_block(predicted, measured)
    assert b["n"] == 3 and b["frozen"]["ablate"] == pytest.approx(1.0) and b["live"]["ablate"] == pytest.approx(-0.5)
