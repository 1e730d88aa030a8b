"""The feature store's math: pure numpy (and scipy.sparse) over the non-zero activations of a pass.

Every statistic comes from one list of entries (unit, row, value) -- the rows on which a unit
fired, with its activation there -- so nothing loops over units or tokens in Python: entries are
sorted once by (unit, value) and each unit's statistics are slices of that order.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


class Entries:
    """Non-zero activations of U units over n_rows rows, sorted by (unit, value ascending)."""

    def __init__(self, units: np.ndarray, rows: np.ndarray, vals: np.ndarray, n_units: int, n_rows: int):
        order = np.lexsort((vals, units))
        self.units, self.rows, self.vals = units[order], rows[order], vals[order]
        self.order = order  # for other per-entry columns (block coordinates)
        self.n_units, self.n_rows = n_units, n_rows
        self.counts = np.bincount(self.units, minlength=n_units).astype(np.int64)
        self.ends = np.cumsum(self.counts)
        self.starts = self.ends - self.counts

    def freq(self) -> np.ndarray:
        return self.counts / max(self.n_rows, 1)

    def max(self) -> np.ndarray:
        return np.where(self.counts > 0, self.vals[np.maximum(self.ends - 1, 0)] if len(self.vals) else 0, 0).astype(
            np.float32
        )

    def mean_nonzero(self) -> np.ndarray:
        s = np.bincount(self.units, weights=self.vals, minlength=self.n_units)
        return (s / np.maximum(self.counts, 1)).astype(np.float32)

    def histogram(self, n_bins: int) -> np.ndarray:
        """[U, n_bins] counts over equal-width bins from 0 to each unit's max (edges: linspace(0, max, n+1))."""
        top = self.max()[self.units].astype(np.float64)
        b = np.minimum((self.vals / np.where(top > 0, top, 1) * n_bins).astype(np.int64), n_bins - 1)
        return (
            np.bincount(self.units * n_bins + b, minlength=self.n_units * n_bins)
            .reshape(self.n_units, n_bins)
            .astype(np.int32)
        )

    def top(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, values) [U, n] of each unit's n largest activations, largest first; row -1 pads."""
        i = self.ends[:, None] - 1 - np.arange(n)[None, :]
        ok = np.arange(n)[None, :] < self.counts[:, None]
        return self._take(i, ok)

    def quantiles(self, n_bins: int, per_bin: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """True quantile bins of each unit's non-zero activations.

        Returns edges [U, n_bins + 1] (the 0, 1/n, ..., 1 quantiles) and rows, values
        [U, n_bins * per_bin]: per_bin examples spread evenly by rank inside each bin, so every bin
        holds the same share of the unit's firings. Repeats (a unit with few firings) become -1.
        """
        c = self.counts[:, None]
        q = np.arange(n_bins + 1)[None, :] / n_bins
        edge_i = self.starts[:, None] + np.floor(q * np.maximum(c - 1, 0)).astype(np.int64)
        edges = np.where(c > 0, self.vals[np.minimum(edge_i, len(self.vals) - 1)] if len(self.vals) else 0, 0).astype(
            np.float32
        )
        frac = (np.arange(n_bins)[:, None] + (np.arange(per_bin)[None, :] + 0.5) / per_bin).reshape(1, -1) / n_bins
        i = self.starts[:, None] + np.floor(frac * np.maximum(c - 1, 0)).astype(
            np.int64
        )  # same rank scale as the edges
        ok = c > 0
        ok = ok & np.concatenate([np.ones((len(i), 1), bool), np.diff(i, axis=1) > 0], axis=1)
        rows, vals = self._take(i, ok)
        return edges, rows, vals

    def _take(self, i: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if not len(self.vals):
            return np.full(i.shape, -1, np.int64), np.zeros(i.shape, np.float32)
        i = np.clip(i, 0, len(self.vals) - 1)
        return np.where(ok, self.rows[i], -1).astype(np.int64), np.where(ok, self.vals[i], 0).astype(np.float32)

    def matrix(self, n_rows: int | None = None) -> sp.csr_matrix:
        """[rows, U] sparse activations (optionally only the first n_rows rows)."""
        n = self.n_rows if n_rows is None else min(n_rows, self.n_rows)
        keep = self.rows < n
        return sp.csr_matrix(
            (self.vals[keep].astype(np.float64), (self.rows[keep], self.units[keep])), shape=(n, self.n_units)
        )

    def lookup(self, rows: np.ndarray, units: np.ndarray) -> np.ndarray:
        """Activation of units[i] on rows[i] (0 where it did not fire or row < 0)."""
        key = self.rows.astype(np.int64) * self.n_units + self.units
        order = np.argsort(key, kind="stable")
        skey = key[order]
        q = rows.astype(np.int64) * self.n_units + units
        pos = np.clip(np.searchsorted(skey, q), 0, max(len(skey) - 1, 0))
        hit = (rows >= 0) & (len(skey) > 0) & (skey[pos] == q if len(skey) else False)
        return np.where(hit, self.vals[order][pos] if len(skey) else 0, 0).astype(np.float32)


def windows(
    ex_rows: np.ndarray,
    row_seq: np.ndarray,
    row_pos: np.ndarray,
    sequences: np.ndarray,
    seqpos_row: np.ndarray,
    left: int,
    right: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Token windows around example rows [..., E] -> (token ids, rows) [..., E, left + 1 + right];
    -1 marks positions outside the sequence (token) or not in the pass (row)."""
    valid = ex_rows >= 0
    r = np.where(valid, ex_rows, 0)
    seq, pos = row_seq[r][..., None], row_pos[r][..., None] + np.arange(-left, right + 1)
    inside = valid[..., None] & (pos >= 0) & (pos < sequences.shape[1])
    p = np.clip(pos, 0, sequences.shape[1] - 1)
    toks = np.where(inside, sequences[seq, p], -1).astype(np.int32)
    rows = np.where(inside, seqpos_row[seq, p], -1).astype(np.int64)
    return toks, rows


def unit_labels(
    e: Entries, labels: np.ndarray, n_values: int, totals: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """Best-matching value of one per-row label for each unit, as a detector of it.

    precision = P(label = v | unit fires), recall = P(unit fires | label = v); the best v has the
    highest F1. labels < 0 (no value) never match; a kind with no values (a plain text corpus has no entities)
    matches nothing: value -1 and zero scores for every unit."""
    if n_values == 0:
        zero = np.zeros(e.n_units, np.float32)
        return {"value": np.full(e.n_units, -1, np.int32), "precision": zero, "recall": zero, "f1": zero.copy()}
    lab = labels[e.rows]
    ok = lab >= 0
    joint = np.bincount(e.units[ok] * n_values + lab[ok], minlength=e.n_units * n_values).reshape(e.n_units, n_values)
    if totals is None:
        totals = np.bincount(labels[labels >= 0], minlength=n_values)
    prec = joint / np.maximum(e.counts[:, None], 1)
    rec = joint / np.maximum(totals[None, :], 1)
    f1 = 2 * prec * rec / np.maximum(prec + rec, 1e-12)
    best = f1.argmax(1)
    ix = np.arange(e.n_units)
    fired = e.counts > 0
    return {
        "value": np.where(fired, best, -1).astype(np.int32),
        "precision": prec[ix, best].astype(np.float32),
        "recall": rec[ix, best].astype(np.float32),
        "f1": f1[ix, best].astype(np.float32),
    }


def token_units(e: Entries, row_tokens: np.ndarray, vocab: int, top: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every token id, the units with the highest mean activation over its occurrences.

    Returns units [V, top] (-1 pads), mean activation [V, top] and the fraction of the token's
    occurrences on which each fires [V, top]."""
    occ = np.bincount(row_tokens, minlength=vocab)
    tok = row_tokens[e.rows]
    m = sp.coo_matrix((e.vals.astype(np.float64), (tok, e.units)), shape=(vocab, e.n_units)).tocsr()
    n = sp.coo_matrix((np.ones(len(e.vals)), (tok, e.units)), shape=(vocab, e.n_units)).tocsr()
    m.sum_duplicates()
    n.sum_duplicates()
    assert np.array_equal(m.indices, n.indices) and np.array_equal(m.indptr, n.indptr)
    row_of = np.repeat(np.arange(vocab), np.diff(m.indptr))
    score = m.data / np.maximum(occ[row_of], 1)
    order = np.lexsort((-score, row_of))
    rank = np.arange(len(order)) - m.indptr[row_of[order]]  # rank of each entry within its token's row
    keep = order[rank < top]
    kr, kk = row_of[keep], rank[rank < top]
    units = np.full((vocab, top), -1, np.int32)
    means = np.zeros((vocab, top), np.float32)
    frac = np.zeros((vocab, top), np.float32)
    units[kr, kk] = m.indices[keep]
    means[kr, kk] = score[keep]
    frac[kr, kk] = n.data[keep] / np.maximum(occ[kr], 1)  # m and n share one sparsity pattern and order
    return units, means, frac


def top_k_rows(sim_rows, n: int, exclude_self_from: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise top n of a dense block [c, U] -> (indices, values) largest first."""
    sim = np.array(sim_rows, dtype=np.float32, copy=True)
    if exclude_self_from is not None:
        sim[np.arange(len(sim)), exclude_self_from + np.arange(len(sim))] = -np.inf
    n = min(n, sim.shape[1])
    idx = (
        np.argpartition(-sim, n - 1, axis=1)[:, :n]
        if n < sim.shape[1]
        else np.tile(np.arange(sim.shape[1]), (len(sim), 1))
    )
    vals = np.take_along_axis(sim, idx, 1)
    o = np.argsort(-vals, axis=1, kind="stable")
    return np.take_along_axis(idx, o, 1).astype(np.int32), np.take_along_axis(vals, o, 1)


def unit_bases(W: np.ndarray, block: int) -> np.ndarray:
    """Each unit's decoder span as orthonormal rows [U * block, d]: a latent's unit direction, a block's QR basis."""
    W = W.astype(np.float32)
    if block == 1:
        return W / np.maximum(np.linalg.norm(W, axis=1, keepdims=True), 1e-12)
    G, d = W.shape[0] // block, W.shape[1]
    return np.linalg.qr(W.reshape(G, block, d).transpose(0, 2, 1))[0].transpose(0, 2, 1).reshape(-1, d)


def decoder_matches(
    Wa: np.ndarray, block_a: int, Wb: np.ndarray, block_b: int, n: int, self_pairs: bool = False, chunk: int = 1024
) -> tuple[np.ndarray, np.ndarray]:
    """Each unit of dictionary A's n nearest units of dictionary B by decoder direction: the cosine when both are
    latents; with a block on either side, the subspace overlap sqrt(sum cos^2 of the principal angles / the smaller
    span's dimension). self_pairs: A is B, and a unit is not its own neighbour."""
    Qa, Qb = unit_bases(Wa, block_a), unit_bases(Wb, block_b)
    Ua, Ub = Wa.shape[0] // block_a, Wb.shape[0] // block_b
    k = min(n, Ub - int(self_pairs))
    ids, vals = np.zeros((Ua, k), np.int32), np.zeros((Ua, k), np.float32)
    for a in range(0, Ua, chunk):
        b = min(Ua, a + chunk)
        s = Qa[a * block_a : b * block_a] @ Qb.T
        if block_a > 1 or block_b > 1:
            s = np.sqrt((s.reshape(b - a, block_a, Ub, block_b) ** 2).sum((1, 3)) / min(block_a, block_b))
        ids[a:b], vals[a:b] = top_k_rows(s, k, exclude_self_from=a if self_pairs else None)
    return ids, vals


def decoder_neighbours(W: np.ndarray, block: int, n: int, chunk: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """Nearest units of one dictionary by decoder direction (decoder_matches of the dictionary with itself)."""
    return decoder_matches(W, block, W, block, n, self_pairs=True, chunk=chunk)


def correlation_matches(A: sp.csr_matrix, B: sp.csr_matrix, n: int, self_pairs: bool = False):
    """Each unit (column) of A's n units of B with the highest Pearson correlation of activations over the same
    rows -> (ids, values) [units of A, n].

    The cross-moments come from one sparse product A^T B, so only pairs that ever fire together are
    candidates; a pair that never co-fires has correlation -mean_i mean_j / (std_i std_j) <= 0 and
    is never a top match. Units without a positive partner pad with -1. self_pairs: A is B (its diagonal skipped)."""
    N = A.shape[0]

    def moments(M):
        mean = np.asarray(M.sum(0)).ravel() / N
        return mean, np.asarray(M.multiply(M).sum(0)).ravel() / N - mean**2

    (mean_a, var_a), (mean_b, var_b) = moments(A), moments(B)
    G = (A.T @ B).tocoo()
    off = G.row != G.col if self_pairs else np.ones(len(G.row), bool)
    i, j = G.row[off], G.col[off]
    denom = np.sqrt(np.maximum(var_a[i] * var_b[j], 1e-30))
    corr = (G.data[off] / N - mean_a[i] * mean_b[j]) / denom
    order = np.lexsort((-corr, i))
    i, j, corr = i[order], j[order], corr[order]
    starts = np.searchsorted(i, np.arange(A.shape[1]))
    rank = np.arange(len(i)) - starts[i]
    keep = (rank < n) & (corr > 0)
    ids = np.full((A.shape[1], n), -1, np.int32)
    vals = np.zeros((A.shape[1], n), np.float32)
    ids[i[keep], rank[keep]] = j[keep]
    vals[i[keep], rank[keep]] = corr[keep]
    return ids, vals


def correlation_neighbours(e: Entries, n_rows: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Nearest units of one dictionary by Pearson correlation of activations over the first n_rows rows."""
    A = e.matrix(n_rows)
    return correlation_matches(A, A, n, self_pairs=True)


def logit_effects(
    dirs: np.ndarray, W_U: np.ndarray, ln_scale: np.ndarray | None, n: int, chunk: int = 512
) -> tuple[np.ndarray, np.ndarray]:
    """Top and bottom tokens of dirs @ diag(ln_scale) @ W_U -> ids, values [U, 2n] (n top, then n bottom, most negative first)."""
    M = (W_U * ln_scale[:, None] if ln_scale is not None else W_U).astype(np.float32)
    n = min(n, M.shape[1])
    ids, vals = np.zeros((len(dirs), 2 * n), np.int32), np.zeros((len(dirs), 2 * n), np.float32)
    for a in range(0, len(dirs), chunk):
        eff = dirs[a : a + chunk].astype(np.float32) @ M
        ti, tv = top_k_rows(eff, n)
        bi, bv = top_k_rows(-eff, n)
        ids[a : a + chunk] = np.concatenate([ti, bi], 1)
        vals[a : a + chunk] = np.concatenate([tv, -bv], 1)
    return ids, vals


def principal_components(s1: np.ndarray, s2: np.ndarray, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top k principal directions [k, d] and explained-variance fractions [k] from sum x and sum x x^T over n rows."""
    mu = s1 / n
    cov = (s2 - n * np.outer(mu, mu)) / max(n - 1, 1)
    w, v = np.linalg.eigh(cov)
    o = np.argsort(w)[::-1][:k]
    return v[:, o].T, (w[o] / max(w.sum(), 1e-30))
