"""What bench/sae/sae_ground_truth.py measures on a saved SAE against the known generator.

sae-lens's own evaluations where they exist (MCC, feature uniqueness, per-latent classification against the
best-matching true feature: sae_lens.synthetic.evals); absorption on the known parent/child pairs and
subspace recovery by principal angles are computed here, since sae-lens has neither.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from sae_lens.synthetic.evals import ClassificationMetricsCalculator, feature_uniqueness, mean_correlation_coefficient

from workbench.sae.io import load_sae

MIN_FIRINGS = 20  # a parent/child pair counts when its child (and its parent alone) fire at least this often
GREEDY_SIZE = 4  # latents in the best-matching "block" of a one-latent architecture


def _unit(w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.normalize(w, dim=-1)


def parent_latents(W: torch.Tensor, features: torch.Tensor, parents: list[int]) -> torch.Tensor:
    """Each parent's best-matching latent: the largest |cosine| between its true vector and a decoder row."""
    return (_unit(features[parents]) @ _unit(W).T).abs().argmax(1)


def best_units(W: torch.Tensor, subspaces: list[torch.Tensor], unit: int) -> list[tuple[list[int], float, float]]:
    """For each planted subspace U [d, k] of a block architecture (blocks of `unit` latents, every block tried):
    (the best-matching block's latents, the mean cos^2 of the principal angles between U and the block's decoder
    span, the largest principal angle in degrees)."""
    n_blocks = W.shape[0] // unit
    Q = torch.linalg.qr(W[: n_blocks * unit].view(n_blocks, unit, -1).transpose(1, 2)).Q  # [G, d, unit]
    out = []
    for U in subspaces:
        captured = (Q.transpose(1, 2) @ U).pow(2).sum((1, 2)) / U.shape[1]
        g = int(captured.argmax())
        out.append((list(range(g * unit, (g + 1) * unit)), float(captured[g]), _largest_angle(Q[g], U)))
    return out


def greedy_units(W: torch.Tensor, subspaces: list[torch.Tensor], size: int) -> list[tuple[list[int], float, float]]:
    """The same for an architecture of single latents: the `size` latents whose span captures most of U, chosen
    one at a time (each adds the latent whose component outside the span so far lies most inside U) — the
    best-matching "block" such an SAE could offer."""
    Wu = _unit(W)
    out = []
    for U in subspaces:
        chosen, Q = [], torch.zeros(W.shape[1], 0)
        for _ in range(size):
            r = Wu - (Wu @ Q) @ Q.T  # the rows' components outside the span so far
            norm = r.norm(dim=1).clamp_min(1e-6)
            gain = (r @ U).pow(2).sum(1) / norm.pow(2)
            gain[chosen] = -1
            i = int(gain.argmax())
            chosen.append(i)
            Q = torch.cat([Q, (r[i] / norm[i])[:, None]], 1)
        out.append((chosen, float((Q.T @ U).pow(2).sum() / U.shape[1]), _largest_angle(Q, U)))
    return out


def _largest_angle(Q: torch.Tensor, U: torch.Tensor) -> float:
    cos = torch.linalg.svdvals(Q.T @ U).clamp(max=1.0)
    return math.degrees(math.acos(float(cos.min())))


def _f1(pred: np.ndarray, truth: np.ndarray) -> float:
    tp = float((pred & truth).sum())
    return 2 * tp / max(1.0, float(pred.sum() + truth.sum()))


@torch.no_grad()
def measure(folder, truth, X: torch.Tensor, F: np.ndarray, S: np.ndarray, unit: int, block_rows: int) -> dict:
    """Every metric of one saved SAE on the held-out rows X (F, S: which true features and subspaces fire)."""
    sae = load_sae(folder).eval()
    W = sae.W_dec.detach().float()
    features = truth.features
    parents = sorted({p for p, _ in truth.pairs})
    plat = parent_latents(W, features, parents)
    units = (best_units if unit > 1 else greedy_units)(W, truth.subspaces, unit if unit > 1 else GREEDY_SIZE)
    cols = sorted({int(j) for j in plat} | {j for u, _, _ in units for j in u})
    where = {j: i for i, j in enumerate(cols)}
    clf = ClassificationMetricsCalculator(W, features)
    mean = X.mean(0)
    sse = sst = l0 = 0.0
    fired = torch.zeros(W.shape[0], dtype=torch.bool)
    kept = []
    for a in range(0, len(X), block_rows):
        x = X[a : a + block_rows]
        z = sae.encode(x)
        sse += float((sae.decode(z) - x).pow(2).sum())
        sst += float((x - mean).pow(2).sum())
        l0 += float((z != 0).sum())
        fired |= (z != 0).any(0)
        clf.add_batch(z, torch.from_numpy(F[a : a + block_rows]).float())
        kept.append((z[:, cols] != 0).numpy())
    active = np.concatenate(kept)
    c = clf.compute()
    return {
        "fvu": sse / sst,
        "l0": l0 / len(X),
        "dead": int((~fired).sum()),
        "mcc": mean_correlation_coefficient(W, features),
        "uniqueness": feature_uniqueness(W, features),
        "f1": c.f1_score,
        "precision": c.precision,
        "recall": c.recall,
        **absorption(truth.pairs, parents, plat, active, where, F),
        **subspace_recovery(units, [U.shape[1] for U in truth.subspaces], active, where, S),
    }


def absorption(pairs, parents, plat, active: np.ndarray, where: dict, F: np.ndarray) -> dict:
    """Over the pairs whose child fires >= MIN_FIRINGS times: the share of the child's firings on which the
    parent's best-matching latent is silent (absorption), and the same latent's silence when the parent fires
    with none of its children (its plain miss rate, which absorption should be read against)."""
    latent = {p: where[int(j)] for p, j in zip(parents, plat)}
    children = {p: [c for q, c in pairs if q == p] for p in parents}
    absorbed, miss, excess = [], [], []
    for p, c in pairs:
        on = F[:, c]
        alone = F[:, p] & ~F[:, children[p]].any(1)
        if on.sum() < MIN_FIRINGS or alone.sum() < MIN_FIRINGS:
            continue
        silent = ~active[:, latent[p]]
        absorbed.append(float(silent[on].mean()))
        miss.append(float(silent[alone].mean()))
        excess.append(absorbed[-1] - miss[-1])
    return {
        "absorption": float(np.mean(absorbed)) if absorbed else math.nan,
        "parent_miss": float(np.mean(miss)) if miss else math.nan,
        "absorption_excess": float(np.mean(excess)) if excess else math.nan,
        "n_pairs": len(absorbed),
    }


def subspace_recovery(units, dims: list[int], active: np.ndarray, where: dict, S: np.ndarray) -> dict:
    """Mean over the planted subspaces (and per dimension): the captured share (mean cos^2 of the principal
    angles) of the best-matching unit's decoder span, its largest principal angle, and how well "the unit is
    active" detects "the subspace fires" (F1)."""
    rows = []
    for s, (latents, captured, angle) in enumerate(units):
        on = active[:, [where[j] for j in latents]].any(1)
        rows.append((captured, angle, _f1(on, S[:, s])))
    out = {}
    for name, i in (("cos2", 0), ("angle", 1), ("f1", 2)):
        out[f"subspace_{name}"] = float(np.mean([r[i] for r in rows]))
        for k in sorted(set(dims)):
            out[f"subspace_{name}_k{k}"] = float(np.mean([r[i] for r, dk in zip(rows, dims) if dk == k]))
    return out
