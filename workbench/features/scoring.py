"""Scores of a predicate explanation, with delphi's definitions (docs/methods.md section 13), computed exactly.

A predicate is its own simulator (workbench.features.explain.predicate_scores), so no model reads the explanation:
- detection: does the predicate tell held-out activating rows (the latent's quantile examples, never its top
  examples the explainer read) from non-activating ones (random rows and rows where its decoder neighbours fire
  most, both where the latent is zero)? Balanced accuracy and F1 of "holds", AUC of its score.
- fuzzing: in each held-out example's window the tokens where the latent fires are highlighted, and in a copy the
  same number of tokens where it does not; each highlighted token is judged by whether the predicate holds on
  it. token_accuracy: the share judged right; balanced_accuracy: of the windows, a window judged correctly
  highlighted when the predicate holds on at least half its highlighted tokens.
- intervention (workbench.features.steering): do the explanation's promoted tokens rise when the latent is steered?
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
from scipy.stats import rankdata

from workbench.features import compute
from workbench.features.explain import ExplainConfig, predicate_scores


def auc(pos: np.ndarray, neg: np.ndarray) -> float | None:
    """P(score of a positive > score of a negative), ties counted half (Mann-Whitney); None without both."""
    if not len(pos) or not len(neg):
        return None
    r = rankdata(np.concatenate([pos, neg]))
    return float((r[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def _rate(x: np.ndarray) -> float | None:
    return float(x.mean()) if len(x) else None


def detection_metrics(pos: np.ndarray, rand: np.ndarray, near: np.ndarray) -> dict:
    """Detection of positives among random and near-neighbour negatives, from predicate scores on each."""
    neg = np.concatenate([rand, near])
    tp, fp = int((pos > 0).sum()), int((neg > 0).sum())
    tpr, tnr = _rate(pos > 0), _rate(neg <= 0)
    f1 = 2 * tp / (2 * tp + fp + len(pos) - tp) if len(pos) else None
    return {
        "balanced_accuracy": None if tpr is None or tnr is None else (tpr + tnr) / 2,
        "f1": f1,
        "auc": auc(pos, neg),
        "recall": tpr,
        "specificity_random": _rate(rand <= 0),
        "specificity_near": _rate(near <= 0),
        "n_pos": len(pos),
        "n_random": len(rand),
        "n_near": len(near),
    }


def fuzz_draws(rows: np.ndarray, acts: np.ndarray, rng) -> list[tuple[bool, np.ndarray, np.ndarray]]:
    """Fuzzing's highlights over example windows (rows [E, W] of the pass, -1 outside it; the latent's activations
    [E, W]): per window with both, (True, rows, the firing positions) and (False, rows, as many quiet ones)."""
    out = []
    for r, a in zip(rows, acts):
        fire, quiet = np.flatnonzero((r >= 0) & (a > 0)), np.flatnonzero((r >= 0) & (a <= 0))
        k = min(len(fire), len(quiet))
        if k:
            out += [(True, r, fire), (False, r, rng.choice(quiet, k, replace=False))]
    return out


def fuzz_result(judged: list[tuple[bool, np.ndarray]]) -> dict:
    """Fuzzing's scores from each drawn window's truth and whether each of its highlights was judged to hold."""
    right, windows = [], []  # per token: judged right; per window: (truly highlighted, judged correct)
    for truth, holds in judged:
        right.extend(holds == truth)
        windows.append((truth, holds.mean() >= 0.5))
    if not windows:
        return {"token_accuracy": None, "balanced_accuracy": None, "n_windows": 0}
    w = np.array(windows)
    ba = (w[w[:, 0], 1].mean() + (~w[~w[:, 0], 1]).mean()) / 2
    return {"token_accuracy": float(np.mean(right)), "balanced_accuracy": float(ba), "n_windows": len(w) // 2}


def fuzz_metrics(pred: dict | None, rows: np.ndarray, acts: np.ndarray, meta: dict, rng) -> dict:
    """Fuzzing over example windows, each highlight judged by the predicate."""
    draws = fuzz_draws(rows, acts, rng)
    return fuzz_result([(t, predicate_scores(pred, r[pick], meta) > 0) for t, r, pick in draws])


class Encoder:
    """The latents' activations on chosen rows of the pass (the SAE re-run on cached rows), as sparse [rows, U]."""

    def __init__(self, sae, cache, hook: str, split: str, n_sparse: int, block: int, batch: int = 2048):
        self.sae, self.cache, self.hook, self.split = sae, cache, hook, split
        self.n_sparse, self.block, self.batch = n_sparse, block, batch

    @torch.no_grad()
    def acts(self, rows: np.ndarray) -> sp.csr_matrix:
        parts = []
        for s in range(0, len(rows), self.batch):
            x = self.cache.rows(self.hook, rows[s : s + self.batch], split=self.split)
            z = self.sae.encode(x.to(self.sae.dtype))[:, : self.n_sparse].float()
            a = z.view(len(z), -1, self.block).norm(dim=-1) if self.block > 1 else z
            parts.append(sp.csr_matrix(a.numpy()))
        U = self.n_sparse // self.block
        return sp.vstack(parts).tocsr() if parts else sp.csr_matrix((0, U))


class Contexts:
    """Held-out activating rows and non-activating rows (random, near-neighbour) of each latent of one store."""

    def __init__(self, store, meta: dict, encoder: Encoder, cfg: ExplainConfig):
        self.store, self.meta, self.enc, self.cfg = store, meta, encoder, cfg
        n = store.manifest["n_rows"]
        rng = np.random.default_rng(cfg.seed)
        self.pool = np.sort(rng.choice(n, min(cfg.pool, n), replace=False))
        self.pool_acts = encoder.acts(self.pool).tocsc()
        self.order = rng.permutation(len(self.pool))  # the pool in one random order; each latent starts elsewhere

    def heldout(self, u: int) -> np.ndarray:
        """Indices (into the store's examples) of the quantile examples that are not also top examples."""
        n_top = self.store.config.n_top
        ex = np.asarray(self.store.array("ex_rows")[u])
        top = set(ex[:n_top].tolist())
        keep, seen = [], set()
        for i in range(n_top, len(ex)):
            r = int(ex[i])
            if r >= 0 and r not in top and r not in seen:
                keep.append(i)
                seen.add(r)
        return np.array(keep, np.int64)

    def random_negatives(self, u: int) -> np.ndarray:
        col = self.pool_acts[:, u].toarray().ravel()
        start = (u * 7919) % len(self.order)
        order = np.roll(self.order, -start)
        return self.pool[order[col[order] <= 0][: self.cfg.n_random]]

    def near_candidates(self, u: int) -> np.ndarray:
        """Top rows of the latent's nearest decoder neighbours (which may include its own firings)."""
        if not self.cfg.n_near:
            return np.zeros(0, np.int64)
        nb = np.asarray(self.store.array("nb_cos_ids")[u, : self.cfg.neighbours])
        rows = np.asarray(self.store.array("ex_rows")[nb[nb >= 0], : self.store.config.n_top]).ravel()
        return np.unique(rows[rows >= 0])

    def near_negatives(self, units, candidates: dict) -> dict:
        """Per latent, up to n_near of its candidate rows where it is zero (one encode for the chunk)."""
        allrows = np.unique(np.concatenate([c for c in candidates.values()] + [np.zeros(0, np.int64)]))
        A = self.enc.acts(allrows).tocsc() if len(allrows) else None
        out = {}
        for u in units:
            c = candidates[u]
            if not len(c):
                out[u] = c
                continue
            a = A[np.searchsorted(allrows, c), u].toarray().ravel()
            out[u] = c[a <= 0][: self.cfg.n_near]
        return out

    def windows(self, u: int, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rows, the latent's activations) [E, W] of the store's example windows idx."""
        m, c = self.meta, self.store.config
        ex = np.asarray(self.store.array("ex_rows")[u])[idx]
        _, rows = compute.windows(ex, m["seq"], m["pos"], m["sequences"], m["seqpos_row"], c.left, c.right)
        return rows, np.asarray(self.store.array("ctx_acts")[u])[idx]


def score_chunk(units: list[int], preds: dict, ctx: Contexts, scorers, rng) -> dict:
    """{latent: {scorer: metrics}} for the detection and fuzzing scorers of one chunk of latents."""
    near = ctx.near_negatives(units, {u: ctx.near_candidates(u) for u in units}) if "detection" in scorers else {}
    out = {}
    for u in units:
        pred, idx, s = preds[u], ctx.heldout(u), {}
        if "detection" in scorers:
            pos = np.asarray(ctx.store.array("ex_rows")[u])[idx]
            s["detection"] = detection_metrics(
                *(predicate_scores(pred, r, ctx.meta) for r in (pos, ctx.random_negatives(u), near[u]))
            )
        if "fuzz" in scorers:
            s["fuzz"] = fuzz_metrics(pred, *ctx.windows(u, idx), ctx.meta, rng)
        out[u] = s
    return out
