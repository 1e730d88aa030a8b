"""Where a scaffold's subspace sits in the stream, and the causal baseline it is compared with.

The scaffold paper identifies the rank-r scaffold with the stream's top principal components and its
outlier dimensions, and finds removing the scaffold far more harmful than removing the top-r PCA
directions. `overlap` measures the first (mean squared cosine of the principal angles: 1 = the same
subspace, r/d = chance for a random one), `axis_overlap` the second, and `projection_removed_ce` the
baseline: the stream at the hook with its centred component in a subspace projected out.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from workbench.errors import BadValueError


def orthonormal(A: torch.Tensor) -> torch.Tensor:
    """An orthonormal basis [d, r] of the column space of A [d, r] (A must have full column rank)."""
    Q, R = torch.linalg.qr(A.double())
    if (R.diagonal().abs() < 1e-10 * R.diagonal().abs().max().clamp_min(1e-300)).any():
        raise BadValueError(f"the {A.shape[1]} directions are linearly dependent; no rank-{A.shape[1]} subspace")
    return Q


def principal_components(x: torch.Tensor, r: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mean [d], top-r principal directions [d, r], share of the variance each explains [r]) of x [N, d]."""
    if not 1 <= r <= x.shape[1]:
        raise BadValueError(f"rank r={r} must be in 1..{x.shape[1]} (the width)")
    x = x.double()
    mu = x.mean(0)
    cov = (x - mu).T @ (x - mu) / max(x.shape[0] - 1, 1)
    evals, evecs = torch.linalg.eigh(cov)
    order = evals.argsort(descending=True)[:r]
    return mu, evecs[:, order], evals[order] / evals.sum()


def overlap(A: torch.Tensor, B: torch.Tensor) -> float:
    """||Q_A^T Q_B||_F^2 / min(r_A, r_B): the mean squared cosine of the principal angles between span A and
    span B (columns; 1 when one contains the other, r_B / d in expectation for a random A)."""
    qa, qb = orthonormal(A), orthonormal(B)
    return float((qa.T @ qb).pow(2).sum() / min(qa.shape[1], qb.shape[1]))


def outlier_dims(x: torch.Tensor, m: int) -> tuple[list[int], list[float]]:
    """The m coordinates with the largest mean |x| and each one's RMS over the median coordinate's RMS."""
    x = x.double()
    rms = x.pow(2).mean(0).sqrt()
    top = x.abs().mean(0).argsort(descending=True)[:m]
    med = rms.median().clamp_min(1e-300)
    return top.tolist(), (rms[top] / med).tolist()


def axis_overlap(A: torch.Tensor, dims: list[int]) -> float:
    """Mean over the coordinate axes `dims` of the share of each axis inside span A (r / d for a random A)."""
    q = orthonormal(A)
    return float(q[dims].pow(2).sum(1).mean())


@torch.no_grad()
def projection_removed_ce(
    model, hook: str, basis: torch.Tensor, centre: torch.Tensor, tokens: torch.Tensor, special_ids, batch_size=16
) -> dict:
    """Next-token CE of the model clean and with x -> x - Q Q^T (x - centre) at `hook` (Q: orthonormal basis of
    span `basis`) on the non-special positions, over the token sequences [S, T]."""
    Q = orthonormal(basis).to(model.cfg.device)
    c = centre.double().to(model.cfg.device)
    special = torch.tensor(sorted(special_ids), dtype=torch.long)
    sums, n = {"clean": 0.0, "removed": 0.0}, 0

    def remove(act, hook, mask):
        x = act[mask].double()
        act = act.clone()
        act[mask] = (x - ((x - c) @ Q) @ Q.T).to(act.dtype)
        return act

    for i in range(0, tokens.shape[0], batch_size):
        toks = tokens[i : i + batch_size].to(model.cfg.device)
        mask = ~torch.isin(toks, special.to(toks.device))
        target = toks[:, 1:].flatten()
        for mode in sums:
            hooks = [(hook, lambda act, hook, mask=mask: remove(act, hook, mask))] if mode == "removed" else []
            logits = model.run_with_hooks(toks, fwd_hooks=hooks)[:, :-1]
            sums[mode] += float(F.cross_entropy(logits.flatten(0, 1), target, reduction="sum"))
        n += target.numel()
    return {"ce_clean": sums["clean"] / n, "ce_removed": sums["removed"] / n, "n_predictions": n}
