import numpy as np
import pytest
import torch

from workbench.circuits.metrics import MIB_GRID, Metric, budget_edges, cmd, cpr, edge_counts, ndf, nfs


def test_nfs_and_ndf_formulas():
    assert nfs(3.0, clean=4.0, empty=2.0) == pytest.approx(0.5)
    assert ndf(3.0, clean=4.0, empty=2.0) == pytest.approx(0.5)
    assert ndf(5.0, clean=4.0, empty=2.0) == pytest.approx(0.5)  # overshoot is penalised
    assert ndf(10.0, clean=4.0, empty=2.0) == 0.0  # bounded below by 0
    assert ndf(4.0, clean=4.0, empty=2.0) == 1.0


def test_cpr_cmd_areas():
    ones = np.ones(len(MIB_GRID))
    assert cpr(MIB_GRID, ones) == pytest.approx(1 - MIB_GRID[0])
    assert cmd(MIB_GRID, ones) == 0.0
    assert cmd(MIB_GRID, np.zeros(len(MIB_GRID))) == pytest.approx(1 - MIB_GRID[0])


def test_mib_edge_counts_and_budgets():
    assert edge_counts(479) == [0, 0, 2, 4, 9, 23, 47, 95, 239, 479]
    assert budget_edges(0.0001, 479) == 1
    for bad in (0, 0.0, 1.5, -0.1, "2%"):
        with pytest.raises(ValueError, match="budget"):
            budget_edges(bad, 479)


def test_metric_orientation():
    logits = torch.tensor([[2.0, 0.0, 1.0]])
    assert Metric("logit_diff", 0, 2, logits[0])(logits).item() == pytest.approx(1.0)
    assert Metric("prob", 0, None, logits[0])(logits).item() == pytest.approx(logits.softmax(-1)[0, 0].item())
    kl = Metric("kl", 0, None, logits[0])
    assert kl(logits).item() == pytest.approx(0.0, abs=1e-6) and kl(torch.zeros(1, 3)).item() < 0
    with pytest.raises(ValueError, match="wrong answer"):
        Metric("logit_diff", 0, None, logits[0])
