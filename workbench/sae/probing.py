"""Sparse probing as the sae-probes suite does it, beside metrics.sparse_probing (the workbench's own protocol).

sae-probes ("Are Sparse Autoencoders Useful? A Case Study in Sparse Probing"), per binary task: rank the
latents by |mean over positives - mean over negatives| on the training examples, keep the top k, fit an
L2 logistic regression on the raw (unstandardised) latent values with C chosen from logspace(5, -5, 10)
by validation AUC (the last 20% of the training examples, at most 100), refit on all of them, report
test AUC and accuracy. Here each label class is one task (one vs rest) with balanced training and test
samples drawn from the held-out split's two halves (docs/methods.md §5 says which tokens).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from workbench.sae.metrics import probe_classes

C_GRID = tuple(float(c) for c in np.logspace(5, -5, 10))


def auc(scores: torch.Tensor, y: torch.Tensor) -> float:
    """ROC AUC: the probability a positive outscores a negative (ties count half), via average ranks."""
    from scipy.stats import rankdata

    s, pos = scores.double().numpy(), y.bool().numpy()
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return math.nan
    ranks = rankdata(s)
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _loss(w: torch.Tensor, Xb: torch.Tensor, y: torch.Tensor, l2: torch.Tensor) -> torch.Tensor:
    """[P] mean log-loss + l2 ||w without bias||^2 of P problems (w [P, k+1], Xb [n, k+1], y [n])."""
    z = w @ Xb.T
    return torch.nn.functional.softplus(z).mean(1) - (z * y).mean(1) + l2 * w[:, :-1].pow(2).sum(1)


def fit_logistic(X: torch.Tensor, y: torch.Tensor, Cs, iters: int = 50) -> torch.Tensor:
    """Weights [len(Cs), k+1] (bias last) of sklearn's L2 logistic regression, C * sum(logloss) + ||w||^2 / 2,
    for each C at once: damped Newton steps with a backtracking choice of step size per problem (k is small)."""
    n = X.shape[0]
    Xb = torch.cat([X.double(), torch.ones(n, 1, dtype=torch.float64)], 1)
    y = y.double()
    l2 = torch.tensor([1.0 / (2 * C * n) for C in Cs], dtype=torch.float64)
    P, m = len(Cs), Xb.shape[1]
    pen = torch.eye(m, dtype=torch.float64)
    pen[-1, -1] = 0  # the bias is not penalised
    w = torch.zeros(P, m, dtype=torch.float64)
    steps = torch.tensor([1.0, 0.5, 0.25, 0.1, 0.01], dtype=torch.float64)
    for _ in range(iters):
        p = torch.sigmoid(w @ Xb.T)  # [P, n]
        g = (p - y) @ Xb / n + 2 * l2[:, None] * (w @ pen)
        H = torch.einsum("pn,ni,nj->pij", p * (1 - p), Xb, Xb) / n + 2 * l2[:, None, None] * pen
        H = H + 1e-10 * torch.eye(m, dtype=torch.float64)
        d = torch.linalg.solve(H, g.unsqueeze(-1)).squeeze(-1)
        cand = w[None] - steps[:, None, None] * d[None]  # [S, P, m]
        losses = torch.stack([_loss(c, Xb, y, l2) for c in cand])  # [S, P]
        cur = _loss(w, Xb, y, l2)
        ok = losses <= cur[None]
        first = torch.where(ok.any(0), ok.double().argmax(0), torch.full((P,), len(steps) - 1))
        w_new = cand[first, torch.arange(P)]
        if (w_new - w).abs().max() < 1e-10:
            return w_new
        w = w_new
    return w


def select_c(X: torch.Tensor, y: torch.Tensor, grid=C_GRID) -> float:
    """The C of the grid with the best AUC on the last 20% (at most 100) of the training examples."""
    n_val = min(int(0.2 * X.shape[0]), 100)
    Xt, yt, Xv, yv = X[:-n_val], y[:-n_val], X[-n_val:], y[-n_val:]
    if n_val < 2 or yv.min() == yv.max() or yt.min() == yt.max():
        return 1.0  # sklearn's default when there is no usable validation split
    W = fit_logistic(Xt, yt, grid)
    scores = [auc(Xv.double() @ w[:-1] + w[-1], yv) for w in W]
    return grid[int(np.nanargmax(scores))]


def _balanced(rng: np.random.Generator, y: np.ndarray, idx: np.ndarray, n: int) -> np.ndarray:
    """Up to n/2 positives and as many negatives from idx, shuffled."""
    pos, neg = idx[y[idx]], idx[~y[idx]]
    m = min(n // 2, len(pos), len(neg))
    out = np.concatenate([rng.choice(pos, m, replace=False), rng.choice(neg, m, replace=False)])
    return out[rng.permutation(len(out))]


def sae_probes(
    z: torch.Tensor,
    labels: dict[str, np.ndarray],
    label_names: dict[str, list[str]],
    train_mask: np.ndarray,
    ks=(1, 2, 5),
    n_train: int = 1024,
    n_test: int = 1024,
    min_examples: int = 20,
    seed: int = 0,
) -> dict:
    """Per label kind: mean test AUC and accuracy over its classes at each k (class "special" skipped; a
    class needs min_examples positives and negatives on each side). Training examples come from the tokens
    where train_mask is True, test examples from the others; both balanced."""
    rng = np.random.default_rng(seed)
    z = z.detach().double()
    tr_idx, te_idx = np.flatnonzero(train_mask), np.flatnonzero(~train_mask)
    out = {}
    for kind, names in label_names.items():
        per = {k: {"auc": [], "acc": []} for k in ks}
        classes = []
        for name, y in probe_classes(labels[kind], names, train_mask, min_examples):
            classes.append(name)
            tr, te = _balanced(rng, y, tr_idx, n_train), _balanced(rng, y, te_idx, n_test)
            ytr, yte = torch.from_numpy(y[tr]).double(), torch.from_numpy(y[te]).double()
            Ztr = z[tr]
            diff = (Ztr[ytr == 1].mean(0) - Ztr[ytr == 0].mean(0)).abs()
            order = diff.argsort(descending=True)
            for k in ks:
                top = order[:k]
                X, Xt = Ztr[:, top], z[te][:, top]
                w = fit_logistic(X, ytr, [select_c(X, ytr)])[0]
                s = Xt @ w[:-1] + w[-1]
                per[k]["auc"].append(auc(s, yte))
                per[k]["acc"].append(float(((s > 0).double() == yte).double().mean()))
        out[kind] = {"classes": classes}
        for k in ks:
            for m in ("auc", "acc"):
                out[kind][f"{m}_k{k}"] = float(np.mean(per[k][m])) if per[k][m] else None
    for k in ks:
        for m in ("auc", "acc"):
            vals = [out[kind][f"{m}_k{k}"] for kind in label_names if out[kind][f"{m}_k{k}"] is not None]
            out[f"mean_{m}_k{k}"] = float(np.mean(vals)) if vals else None
    out["protocol"] = {"n_train": n_train, "n_test": n_test, "C_grid": "logspace(5, -5, 10)", "seed": seed}
    return out
