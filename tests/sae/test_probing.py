"""The sae-probes protocol: AUC, the logistic fit against a reference optimiser, and a planted latent found."""

import numpy as np
import pytest
import torch

from workbench.sae import probing


def test_auc_is_the_pairwise_win_rate():
    s = torch.tensor([0.1, 0.4, 0.35, 0.8, 0.4])
    y = torch.tensor([0, 0, 1, 1, 1])
    pairs = [(p, q) for p in (2, 3, 4) for q in (0, 1)]
    wins = sum(1.0 if s[p] > s[q] else 0.5 if s[p] == s[q] else 0.0 for p, q in pairs)
    assert probing.auc(s, y) == pytest.approx(wins / len(pairs))
    assert np.isnan(probing.auc(s, torch.ones(5)))


def test_newton_fit_reaches_the_optimum_of_sklearns_objective_for_each_c():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(400, 3, generator=g, dtype=torch.float64)
    y = ((X @ torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) + 0.3 * torch.randn(400, generator=g)) > 0).double()
    Cs = [1e-3, 0.05, 10.0]
    W = probing.fit_logistic(X, y, Cs)
    Xb = torch.cat([X, torch.ones(400, 1, dtype=X.dtype)], 1)
    for C, w in zip(Cs, W):
        # gradient of C * sum(logloss) + ||w||^2 / 2 (bias unpenalised) vanishes at the optimum
        grad = C * (torch.sigmoid(Xb @ w) - y) @ Xb
        grad[:-1] += w[:-1]
        assert grad.abs().max() < 1e-6 * max(1.0, C * 400)
    assert W[0, :-1].norm() < W[1, :-1].norm() < W[2, :-1].norm()  # stronger regularisation, smaller weights


def test_sae_probes_finds_a_planted_latent_and_scores_noise_at_chance():
    rng = np.random.default_rng(0)
    n = 4000
    lab = rng.integers(0, 3, n)
    z = torch.from_numpy(rng.random((n, 40)) * (rng.random((n, 40)) < 0.1))
    z[:, 7] = torch.from_numpy((lab == 2) * (1 + rng.random(n)))  # latent 7 = class 2 exactly
    train = np.arange(n) % 2 == 0
    out = probing.sae_probes(z, {"kind": lab}, {"kind": ["special", "b", "c"]}, train, ks=(1, 5))
    assert out["kind"]["classes"] == ["b", "c"]  # "special" is skipped, as in sparse_probing
    only_c = probing.sae_probes(z, {"kind": (lab == 2).astype(int)}, {"kind": ["rest", "c"]}, train, ks=(1,))
    assert only_c["kind"]["auc_k1"] == pytest.approx(1.0) and only_c["kind"]["acc_k1"] == pytest.approx(1.0)
    assert 0.4 < out["kind"]["auc_k1"] < 1.0  # class b has no latent of its own
    assert out["mean_auc_k5"] >= out["mean_auc_k1"] - 0.05


def test_select_c_prefers_weak_regularisation_when_the_signal_is_clean():
    g = torch.Generator().manual_seed(1)
    X = torch.randn(500, 2, generator=g, dtype=torch.float64)
    y = (X[:, 0] > 0).double()
    assert probing.select_c(X, y) >= 1.0  # C = 1e-5 shrinks the weights to nothing: its AUC is no better
