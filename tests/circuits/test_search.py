"""The search's parts that do not depend on what a circuit is made of (circuits/search.py): the memoised exact
evaluation of masks, NDF / NFS against the clean and empty circuits, the gap check, and the best-of-N size
search's smallest hit."""

import pytest
import torch

from workbench.circuits.config import SearchConfig
from workbench.circuits.inputs import QueryInput
from workbench.circuits.metrics import Metric
from workbench.circuits.search import Evaluator, Found, ZeroGapError, check_gap, smallest_hit


class Additive(Evaluator):
    """A circuit's answer logit is the sum of its items' weights (the wrong answer's stays 0): NDF is the kept
    share of the total."""

    def __init__(self, weights: torch.Tensor):
        self.weights, self.runs = weights, 0
        metric = Metric("logit_diff", 0, 1, torch.tensor([float(weights.sum()), 0.0]))
        super().__init__(None, None, metric, max_batch=8)

    def size(self) -> int:
        return self.weights.numel()

    def run(self, masks):
        self.runs += len(masks)
        return torch.stack([masks.float() @ self.weights, torch.zeros(len(masks))], 1)


def test_values_are_exact_and_memoised_by_mask():
    ev = Additive(torch.tensor([3.0, 1.0, 0.0, 4.0]))
    assert (ev.clean, ev.empty, ev.gap) == (8.0, 0.0, 8.0) and ev.n_evaluated == 1
    masks = torch.tensor([[1, 0, 0, 1], [1, 0, 0, 1], [0, 1, 0, 0]], dtype=torch.bool)
    assert ev.values(masks).tolist() == [7.0, 7.0, 1.0]
    assert ev.ndf(ev.values(masks)).tolist() == pytest.approx([7 / 8, 7 / 8, 1 / 8])
    runs = ev.runs
    ev.values(masks[[2, 0]])
    assert ev.runs == runs and ev.n_evaluated == 3  # the repeat and both known masks cost nothing


def test_a_vanishing_gap_is_refused_naming_the_numbers():
    ev = Additive(torch.tensor([0.01, 0.0]))
    q = QueryInput(torch.tensor([1, 2]), 0, 1, answer_str="a", wrong_str="b")
    with pytest.raises(ZeroGapError, match=r"gap 0.0100 < min_gap 0.05"):
        check_gap(ev, SearchConfig(), q)


def test_smallest_hit_finds_the_smallest_size_reaching_the_target():
    calls = []

    def best_of_n(k):  # NDF grows with k: k / 100
        calls.append(k)
        return Found(torch.zeros(1), 0.0, k / 100, k / 100, f"k={k}")

    assert smallest_hit(best_of_n, 100, 0.37).source == "k=37"
    assert len(calls) < 25  # geometric sizes then a binary search, not every size
    assert smallest_hit(best_of_n, 10, 0.5).source == "k=10"  # no size reaches it: the whole model
