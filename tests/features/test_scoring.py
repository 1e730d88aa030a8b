"""The scorers against brute force: AUC over all pairs, detection counts, fuzzing by hand, and the contexts they
read (held-out activating rows, random and near-neighbour negatives) against the SAE's dense codes."""

import numpy as np
import pytest

from tests.features.test_explain import _meta
from tests.features.test_store import dense
from workbench.features.build import row_metadata
from workbench.features.explain import ExplainConfig
from workbench.features.scoring import Contexts, Encoder, auc, detection_metrics, fuzz_metrics, score_chunk


def test_auc_is_the_share_of_positive_negative_pairs_ordered_right_ties_half():
    rng = np.random.default_rng(0)
    pos, neg = rng.integers(0, 4, 30).astype(float), rng.integers(0, 4, 25).astype(float)
    pairs = [(p > n) + 0.5 * (p == n) for p in pos for n in neg]
    assert auc(pos, neg) == pytest.approx(np.mean(pairs))
    assert auc(pos, np.zeros(0)) is None


def test_detection_counts_holds_on_positives_and_on_each_kind_of_negative():
    pos, rand, near = np.array([1.0, 0.5, 0, 1]), np.array([0, 0, 0.2]), np.array([0.3, 0])
    d = detection_metrics(pos, rand, near)
    tpr, tnr = 3 / 4, 3 / 5
    assert d["balanced_accuracy"] == pytest.approx((tpr + tnr) / 2)
    assert d["f1"] == pytest.approx(2 * 3 / (2 * 3 + 2 + 1))
    assert d["specificity_random"] == pytest.approx(2 / 3) and d["specificity_near"] == pytest.approx(1 / 2)
    assert (d["n_pos"], d["n_random"], d["n_near"]) == (4, 3, 2)
    assert detection_metrics(np.zeros(0), rand, near)["f1"] is None


def test_fuzzing_judges_each_highlighted_token_by_the_predicate():
    m = _meta()
    pred = {"kind": "tokens", "tokens": [7], "weights": [1.0], "after": [], "within": 1}
    rows = np.arange(12).reshape(2, 6)
    acts = (m["tokens"][rows] == 7).astype(float)  # the latent fires exactly where the predicate holds
    perfect = fuzz_metrics(pred, rows, acts, m, np.random.default_rng(0))
    assert perfect == {"token_accuracy": 1.0, "balanced_accuracy": 1.0, "n_windows": 2}
    wrong = {"kind": "tokens", "tokens": [4], "weights": [1.0], "after": [], "within": 1}
    got = fuzz_metrics(wrong, rows, acts, m, np.random.default_rng(0))
    assert got["balanced_accuracy"] <= 0.5 and got["token_accuracy"] < 1.0  # no true highlight passes it
    assert fuzz_metrics(pred, rows, np.zeros((2, 6)), m, np.random.default_rng(0))["n_windows"] == 0


@pytest.fixture(scope="module")
def contexts(feature_workspace):
    from workbench.cache import ActivationCache

    name = next(p.name for p in (feature_workspace / "saes" / "run").iterdir() if p.name.startswith("topk"))
    store, a, cache, sae = dense(feature_workspace, name)
    m = store.manifest
    meta = row_metadata(ActivationCache.open(m["cache"]), "heldout", m["n_rows"], store.vocab)
    enc = Encoder(sae, cache, m["hook"], "heldout", m["n_sparse"], 1, batch=100)
    return Contexts(store, meta, enc, ExplainConfig(pool=500, n_random=15, n_near=10)), a


def test_contexts_hold_out_the_top_examples_and_draw_negatives_where_the_latent_is_zero(contexts):
    ctx, a = contexts
    store = ctx.store
    units = [int(u) for u in np.flatnonzero((a > 0).sum(0) >= 30)[:12]]
    near = ctx.near_negatives(units, {u: ctx.near_candidates(u) for u in units})
    for u in units:
        ex = np.asarray(store.array("ex_rows")[u])
        held = ex[ctx.heldout(u)]
        assert len(held) and not set(held) & set(ex[: store.config.n_top]) and (a[held, u] > 0).all()
        rand = ctx.random_negatives(u)
        assert len(rand) == 15 and (a[rand, u] == 0).all() and set(rand) <= set(ctx.pool)
        assert (a[near[u], u] == 0).all() and len(near[u]) <= 10
        nb = np.asarray(store.array("nb_cos_ids")[u, :3])
        assert set(near[u]) <= set(np.asarray(store.array("ex_rows")[nb, : store.config.n_top]).ravel())
    assert sum(len(near[u]) for u in units) > 0


def test_a_latents_own_firing_rows_as_a_predicate_detect_perfectly(contexts):
    """A predicate true exactly where the latent fires must score 1; scoring reads the contexts, not the answer."""
    ctx, a = contexts
    u = int(np.flatnonzero((a > 0).sum(0) >= 30)[0])
    fires = a[:, u] > 0
    lab = np.where(fires, 0, 1)
    orig = ctx.meta
    ctx.meta = {**orig, "labels": {**orig["labels"], "oracle": (lab, ["fires", "quiet"])}}
    try:
        oracle = {u: {"kind": "label", "labels": [["oracle", "fires"]]}}
        s = score_chunk([u], oracle, ctx, ("detection", "fuzz"), np.random.default_rng(0))[u]
    finally:
        ctx.meta = orig
    assert s["detection"]["auc"] == 1.0 and s["detection"]["balanced_accuracy"] == 1.0
    assert s["fuzz"]["token_accuracy"] == 1.0 and s["fuzz"]["balanced_accuracy"] == 1.0
