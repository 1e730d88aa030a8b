"""features/compute.py against plain per-unit loops on a small dense activation matrix (numpy only, no model)."""

import numpy as np
import pytest

from workbench.features import compute

N_ROWS, U = 60, 7


@pytest.fixture(scope="module")
def dense():
    """[rows, units] activations: ~30% non-zero, distinct positive values, unit 3 never fires."""
    rng = np.random.default_rng(0)
    A = rng.random((N_ROWS, U)).astype(np.float32) + 0.01
    A[rng.random((N_ROWS, U)) > 0.3] = 0
    A[:, 3] = 0
    return A


@pytest.fixture(scope="module")
def entries(dense):
    rows, units = np.nonzero(dense)
    shuffle = np.random.default_rng(1).permutation(len(rows))  # Entries sorts them itself
    rows, units = rows[shuffle], units[shuffle]
    return compute.Entries(units, rows, dense[rows, units], U, N_ROWS)


def _fired(dense, u):
    return np.sort(dense[:, u][dense[:, u] > 0])


def test_per_unit_statistics(dense, entries):
    fired = dense > 0
    assert entries.counts.tolist() == fired.sum(0).tolist() and entries.counts[3] == 0
    assert np.allclose(entries.freq(), fired.mean(0))
    assert np.allclose(entries.max(), dense.max(0))
    mean = np.array([_fired(dense, u).mean() if fired[:, u].any() else 0 for u in range(U)])
    assert np.allclose(entries.mean_nonzero(), mean)


def test_histogram_bins_from_zero_to_each_units_max(dense, entries):
    h = entries.histogram(5)
    for u in range(U):
        v = _fired(dense, u)
        want = np.zeros(5, int) if not len(v) else np.histogram(v, bins=5, range=(0, v.max()))[0]
        assert h[u].tolist() == list(want), u
    assert h.sum() == entries.counts.sum()


def test_top_examples_largest_first_padded(dense, entries):
    rows, vals = entries.top(4)
    for u in range(U):
        order = np.argsort(-dense[:, u])[: min(4, entries.counts[u])]
        n = len(order)
        assert rows[u, :n].tolist() == order.tolist() and np.allclose(vals[u, :n], dense[order, u])
        assert (rows[u, n:] == -1).all() and (vals[u, n:] == 0).all()


def test_quantile_bins_hold_equal_shares_of_firings(dense, entries):
    edges, rows, vals = entries.quantiles(3, 2)
    for u in range(U):
        v = _fired(dense, u)
        if not len(v):
            assert (edges[u] == 0).all() and (rows[u] == -1).all()
            continue
        idx = np.floor(np.arange(4) / 3 * (len(v) - 1)).astype(int)
        assert np.allclose(edges[u], v[idx])
        kept = rows[u] >= 0
        assert len(set(rows[u][kept])) == kept.sum()  # no example twice
        assert np.allclose(vals[u][kept], dense[rows[u][kept], u])
        for b in range(3):  # each bin's examples lie between its edges
            vb = vals[u, 2 * b : 2 * b + 2][rows[u, 2 * b : 2 * b + 2] >= 0]
            assert ((vb >= edges[u, b]) & (vb <= edges[u, b + 1])).all()


def test_matrix_and_lookup_give_back_the_activations(dense, entries):
    assert np.allclose(entries.matrix().toarray(), dense)
    assert np.allclose(entries.matrix(10).toarray(), dense[:10])
    rows = np.array([0, 5, 59, -1, 17])
    units = np.array([0, 2, 6, 1, 3])
    want = [dense[r, u] if r >= 0 else 0 for r, u in zip(rows, units)]
    assert np.allclose(entries.lookup(rows, units), want)


def test_token_windows_mark_positions_outside_the_sequence():
    sequences = np.arange(12).reshape(2, 6) + 100  # 2 sequences of 6 tokens
    row_seq = np.array([0, 0, 1, 1])  # the pass covered 4 (sequence, position) pairs
    row_pos = np.array([0, 3, 1, 5])
    seqpos_row = np.full((2, 6), -1)
    seqpos_row[row_seq, row_pos] = np.arange(4)
    toks, wrows = compute.windows(np.array([[1, -1], [3, 0]]), row_seq, row_pos, sequences, seqpos_row, 2, 1)
    assert toks.shape == (2, 2, 4)
    assert toks[0, 0].tolist() == [101, 102, 103, 104] and wrows[0, 0].tolist() == [-1, -1, 1, -1]
    assert (toks[0, 1] == -1).all() and (wrows[0, 1] == -1).all()  # a padding example
    assert toks[1, 0].tolist() == [109, 110, 111, -1] and wrows[1, 0].tolist() == [-1, -1, 3, -1]
    assert toks[1, 1].tolist() == [-1, -1, 100, 101] and wrows[1, 1].tolist() == [-1, -1, 0, -1]


def test_unit_labels_pick_the_value_with_the_best_f1(dense, entries):
    labels = np.random.default_rng(2).integers(-1, 3, N_ROWS)  # -1: the row has no value
    r = compute.unit_labels(entries, labels, 3)
    for u in range(U):
        fired = dense[:, u] > 0
        if not fired.any():
            assert r["value"][u] == -1
            continue
        prec = np.array([(labels[fired] == v).mean() for v in range(3)])
        rec = np.array([(fired & (labels == v)).sum() / max((labels == v).sum(), 1) for v in range(3)])
        f1 = 2 * prec * rec / np.maximum(prec + rec, 1e-12)
        best = f1.argmax()
        assert r["value"][u] == best
        assert np.isclose(r["precision"][u], prec[best]) and np.isclose(r["recall"][u], rec[best])
        assert np.isclose(r["f1"][u], f1[best])


def test_unit_labels_of_a_kind_with_no_values_match_nothing(entries):
    """A plain text corpus has no entities: the kind's label column is -1 throughout and it names no value (the
    crash of `features build` on a text file: argmax of an empty sequence)."""
    r = compute.unit_labels(entries, np.full(N_ROWS, -1), 0)
    assert (r["value"] == -1).all() and len(r["value"]) == U
    assert not r["precision"].any() and not r["recall"].any() and not r["f1"].any()


def test_token_units_rank_units_by_mean_activation_over_a_tokens_occurrences(dense, entries):
    tokens = np.random.default_rng(3).integers(0, 5, N_ROWS)
    units, means, frac = compute.token_units(entries, tokens, 6, 3)
    for t in range(6):
        occ = tokens == t
        mean = dense[occ].sum(0) / max(occ.sum(), 1)
        order = [u for u in np.argsort(-mean, kind="stable") if mean[u] > 0][:3]
        assert units[t, : len(order)].tolist() == order, t
        assert (units[t, len(order) :] == -1).all()
        assert np.allclose(means[t, : len(order)], mean[order])
        if order:  # token 5 never occurs: no units
            assert np.allclose(frac[t, : len(order)], (dense[occ][:, order] > 0).mean(0))


def test_top_k_rows_can_leave_out_each_rows_own_column():
    sim = np.array([[9.0, 1.0, 5.0], [2.0, 9.0, 3.0]])
    ids, vals = compute.top_k_rows(sim, 2)
    assert ids.tolist() == [[0, 2], [1, 2]] and vals.tolist() == [[9, 5], [9, 3]]
    ids, _ = compute.top_k_rows(sim, 2, exclude_self_from=0)
    assert ids.tolist() == [[2, 1], [2, 0]]


def test_decoder_neighbours_cosine_and_block_subspace_overlap():
    W = np.random.default_rng(4).normal(size=(8, 5)).astype(np.float32)
    ids, vals = compute.decoder_neighbours(W, 1, 3, chunk=3)
    Q = W / np.linalg.norm(W, axis=1, keepdims=True)
    cos = Q @ Q.T
    np.fill_diagonal(cos, -np.inf)
    assert ids.tolist() == np.argsort(-cos, 1)[:, :3].tolist()
    assert np.allclose(vals, np.sort(cos, 1)[:, ::-1][:, :3], atol=1e-5)

    ids, vals = compute.decoder_neighbours(W, 2, 2)  # 4 blocks of 2 latents
    bases = [np.linalg.qr(W[2 * g : 2 * g + 2].T)[0] for g in range(4)]
    overlap = np.array([[np.sqrt((np.linalg.svd(a.T @ b)[1] ** 2).mean()) for b in bases] for a in bases])
    np.fill_diagonal(overlap, -np.inf)
    assert ids.tolist() == np.argsort(-overlap, 1)[:, :2].tolist()
    assert np.allclose(vals, np.sort(overlap, 1)[:, ::-1][:, :2], atol=1e-5)


def test_correlation_neighbours_are_the_most_positively_correlated_units(dense, entries):
    ids, vals = compute.correlation_neighbours(entries, N_ROWS, 2)
    live = [u for u in range(U) if dense[:, u].any()]
    corr = np.full((U, U), -np.inf)
    corr[np.ix_(live, live)] = np.corrcoef(dense[:, live].T.astype(np.float64))
    np.fill_diagonal(corr, -np.inf)
    for u in range(U):
        want = [j for j in np.argsort(-corr[u]) if corr[u, j] > 0][:2]
        assert ids[u, : len(want)].tolist() == want and (ids[u, len(want) :] == -1).all(), u
        assert np.allclose(vals[u, : len(want)], corr[u, want], atol=1e-5)
    assert (ids[3] == -1).all()


def test_logit_effects_top_then_most_negative_tokens():
    rng = np.random.default_rng(5)
    dirs, W_U, ln = rng.normal(size=(3, 4)), rng.normal(size=(4, 10)), rng.random(4) + 0.5
    ids, vals = compute.logit_effects(dirs, W_U, ln, 2, chunk=2)
    eff = dirs @ np.diag(ln) @ W_U
    assert ids[:, :2].tolist() == np.argsort(-eff, 1)[:, :2].tolist()
    assert ids[:, 2:].tolist() == np.argsort(eff, 1)[:, :2].tolist()
    assert np.allclose(vals, np.take_along_axis(eff, ids.astype(int), 1), atol=1e-5)
    ids_plain, _ = compute.logit_effects(dirs, W_U, None, 2)
    assert ids_plain[:, :2].tolist() == np.argsort(-(dirs @ W_U), 1)[:, :2].tolist()


def test_principal_components_from_running_sums():
    x = np.random.default_rng(6).normal(size=(200, 4)) @ np.diag([3.0, 2.0, 1.0, 0.1])
    pcs, explained = compute.principal_components(x.sum(0), x.T @ x, len(x), 2)
    w, v = np.linalg.eigh(np.cov(x.T))
    assert np.allclose(np.abs(pcs @ v[:, ::-1][:, :2]), np.eye(2), atol=1e-6)
    assert np.allclose(explained, w[::-1][:2] / w.sum())
