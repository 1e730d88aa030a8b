"""Metric functions on planted data where the right answer is known."""

import numpy as np
import pytest
import torch

from workbench.sae import metrics


def test_recon_accumulator_matches_direct_formulas():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 8, generator=g) + 3
    x_hat = x + 0.1 * torch.randn(300, 8, generator=g)
    z = torch.zeros(300, 6)
    z[:, 0] = 1.0  # fires on every token: dense
    z[::20, 1] = 2.0  # fires on 5% of tokens
    acc = metrics.ReconAccumulator(6)
    for i in range(0, 300, 64):  # chunked like the evaluator
        acc.add(x[i : i + 64], x_hat[i : i + 64], z[i : i + 64])
    r = acc.result(dense_tau=0.1)
    fvu = float((x - x_hat).pow(2).sum() / (x - x.mean(0)).pow(2).sum())
    assert r["fvu"] == pytest.approx(fvu, rel=1e-5)
    assert r["l0"] == pytest.approx(1.05) and r["n_dense"] == 1 and r["n_dead"] == 4


def test_block_l0_counts_blocks():
    z = torch.zeros(4, 6)
    z[:, 0] = 1.0  # block 0 active via one coordinate
    z[:2, 4:6] = 1.0  # block 2 active on two tokens
    acc = metrics.ReconAccumulator(6, block_size=2)
    acc.add(torch.randn(4, 3), torch.randn(4, 3), z)
    r = acc.result(0.1)
    assert r["block_l0"] == pytest.approx(1.5) and r["l0"] == pytest.approx(2.0) and r["n_dead"] == 1


def test_description_length_prefers_the_better_reconstruction_at_equal_codes():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(500, 16, generator=g)
    z = (torch.rand(500, 32, generator=g) < 0.1) * torch.randn(500, 32, generator=g)
    good = metrics.description_length(x, x + 0.01 * torch.randn(500, 16, generator=g), z)
    bad = metrics.description_length(x, x + 0.5 * torch.randn(500, 16, generator=g), z)
    assert good["index_bits"] == bad["index_bits"] and good["bits_per_token"] < bad["bits_per_token"]
    with_scaffold = metrics.description_length(x, x, z, dense=torch.randn(500, 2, generator=g))
    assert with_scaffold["value_bits"] > metrics.description_length(x, x, z)["value_bits"]


def test_sparse_probing_finds_a_planted_latent():
    rng = np.random.default_rng(0)
    n = 2000
    lab = rng.integers(0, 3, n)
    z = torch.from_numpy(rng.random((n, 50)) * (rng.random((n, 50)) < 0.1))
    z[:, 7] = torch.from_numpy((lab == 2) * (1 + rng.random(n)))  # latent 7 = class 2
    train = np.arange(n) % 2 == 0
    out = metrics.sparse_probing(z, {"kind": lab}, {"kind": ["a", "b", "c"]}, train, ks=(1,), min_examples=20)
    assert out["kind"]["classes"] == ["a", "b", "c"]
    assert out["mean_k1"] > 0.6  # mean over classes; class c alone is perfectly separable
    only_c = metrics.sparse_probing(z, {"kind": (lab == 2).astype(int)}, {"kind": ["rest", "c"]}, train, ks=(1,))
    assert only_c["kind"]["k1"] == pytest.approx(1.0)


def test_absorption_detects_a_child_that_carries_the_parent_direction():
    """The parent concept's direction is e0 (non-parent tokens carry the same e1/e2 mass, so the
    mean difference is exactly e0). Latent 0 = the parent. Child 1's tokens use latent 1
    (0.8 e0 + 0.6 e1) instead of latent 0: fully absorbed. Child 2 uses latent 0 plus its own e2."""
    rng = np.random.default_rng(0)
    W_dec = torch.tensor([[1.0, 0, 0, 0], [0.8, 0.6, 0, 0], [0, 0, 1.0, 0], [0, 1.0, 0, 0]], dtype=torch.float64)
    N = 600
    parent = np.where(np.arange(N) < 400, 1, 0)  # role 1 = the parent concept, 0 = anything else
    child = np.where(parent == 1, np.arange(N) % 2 + 1, -1)
    z = torch.zeros(N, 4, dtype=torch.float64)
    z[child == 1, 1] = 1.0
    z[child == 2, 0] = 1.0
    z[child == 2, 2] = 1.0
    z[parent == 0, 2] = 0.5
    z[parent == 0, 3] = 0.3
    x = z @ W_dec + 1e-3 * torch.from_numpy(rng.standard_normal((N, 4)))
    train = np.arange(N) % 3 != 0
    out = metrics.absorption(x, z, W_dec, parent, child, {1: "name"}, train, n_main=1, min_child_tokens=5)
    res = out["parents"]["name"]
    assert res["n_children"] == 2 and res["main_units"] == [0]
    # child 1: all the parent projection is in latent 1 (share 1); child 2: all in latent 0 (share 0)
    assert out["absorption"] == pytest.approx(0.5, abs=1e-3)
    assert res["main_inactive"] == pytest.approx(0.5)


def test_effective_active_counts_latents_a_code_is_spread_over():
    z = torch.zeros(4, 10)
    z[0, :4] = 1.0  # four equal latents: 4 effective
    z[1, 5] = 3.0  # one latent: 1
    z[2, 6] = 2.0
    z[2, 7] = 2.0  # two equal: 2; row 3 is silent and left out
    out = metrics.effective_active(z)
    assert out["per_token"] == pytest.approx((4 + 1 + 2) / 3)
    # dictionary mass: latents 0-3 carry 1 each, 5 carries 3, 6 and 7 carry 2 each
    q = torch.tensor([1, 1, 1, 1, 3, 2, 2], dtype=torch.float64) / 11
    assert out["dictionary"] == pytest.approx(float((-(q * q.log()).sum()).exp()))


def test_monosemanticity_scores_a_latent_by_its_best_label():
    rng = np.random.default_rng(0)
    n = 1000
    role = rng.integers(0, 4, n)
    entity = np.where(role == 1, rng.integers(0, 5, n) * 10, -1)  # sparse ids; -1 = no entity
    z = torch.zeros(n, 3)
    z[:, 0] = torch.from_numpy((role == 2).astype(float))  # pure: role 2 only
    impure = np.flatnonzero(role != 1)[:5]
    z[:, 1] = torch.from_numpy((entity == 30).astype(float))
    z[impure, 1] = 1.0  # entity 30 and 5 other tokens
    z[::50, 2] = 1.0  # 20 random tokens: scored, impure
    out = metrics.monosemanticity(z, {"role": role, "entity": entity}, threshold=0.8, min_fires=20)
    assert out["n_scored"] == 3
    best1 = (entity == 30).sum() / ((entity == 30).sum() + 5)
    assert 0.8 < best1 < 1.0
    assert out["mean_best_precision"] == pytest.approx((1 + best1 + _best_random(z, role, entity)) / 3)
    assert out["share_monosemantic"] == pytest.approx((1 + (best1 >= 0.8)) / 3)
    assert out["chance"] == pytest.approx(max(np.bincount(role).max() / n, np.bincount(entity[entity >= 0]).max() / n))
    assert metrics.monosemanticity(z, {"role": role}, min_fires=10**6)["share_monosemantic"] is None


def _best_random(z, role, entity):
    fired = z[:, 2].numpy() > 0
    return max(np.bincount(role[fired]).max(), np.bincount(entity[fired & (entity >= 0)]).max(initial=0)) / fired.sum()
