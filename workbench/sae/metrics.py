"""SAE metrics as pure functions of activations, codes and labels (eval.py does the I/O).

Conventions: x [N, d] activations, z [N, n] sparse codes (scaffold coordinates excluded), a
"unit" is a latent or a block of `block_size` latents that fires as one.
"""

from __future__ import annotations

import math

import numpy as np
import torch


class ReconAccumulator:
    """Streams FVU, MSE, cosine, L0 and per-unit firing counts over chunks of tokens."""

    def __init__(self, n_latents: int, block_size: int = 1):
        self.b = block_size
        self.n = 0
        self.sq_err = self.sum_sq = 0.0
        self.sum_x = None
        self.cos = self.l0 = self.block_l0 = 0.0
        self.fires = torch.zeros(n_latents // block_size, dtype=torch.long)

    def add(self, x: torch.Tensor, x_hat: torch.Tensor, z: torch.Tensor) -> None:
        x, x_hat = x.double(), x_hat.double()
        self.n += x.shape[0]
        self.sq_err += float((x - x_hat).pow(2).sum())
        self.sum_sq += float(x.pow(2).sum())
        s = x.sum(0)
        self.sum_x = s if self.sum_x is None else self.sum_x + s
        self.cos += float(torch.nn.functional.cosine_similarity(x, x_hat, dim=-1).sum())
        active = z != 0
        self.l0 += float(active.sum())
        units = active.view(z.shape[0], -1, self.b).any(-1)
        self.block_l0 += float(units.sum())
        self.fires += units.sum(0).cpu()

    def result(self, dense_tau: float) -> dict:
        n = max(self.n, 1)
        total_var = self.sum_sq - float(self.sum_x.pow(2).sum()) / n
        fvu = self.sq_err / max(total_var, 1e-12)
        freq = self.fires.double() / n
        out = {
            "n_tokens": self.n,
            "fvu": fvu,
            "explained_variance": 1 - fvu,
            "mse": self.sq_err / n,
            "cosine": self.cos / n,
            "l0": self.l0 / n,
            "dead_frac": float((self.fires == 0).double().mean()),
            "n_dead": int((self.fires == 0).sum()),
            "dense_tau": dense_tau,
            "dense_frac": float((freq > dense_tau).double().mean()),
            "n_dense": int((freq > dense_tau).sum()),
            "dead_definition": f"no firing on {self.n} held-out tokens",
        }
        if self.b > 1:
            out["block_l0"] = self.block_l0 / n
        return out


def binary_entropy_bits(p: torch.Tensor) -> torch.Tensor:
    p = p.clamp(1e-12, 1 - 1e-12)
    return -(p * torch.log2(p) + (1 - p) * torch.log2(1 - p))


def description_length(
    x: torch.Tensor,
    x_hat: torch.Tensor,
    z: torch.Tensor,
    block_size: int = 1,
    precision: float = 0.01,
    dense: torch.Tensor | None = None,
) -> dict:
    """Bits per token to send x through the SAE (docs/methods.md §5, description length).

    index: which units are active, entropy-coded with each unit's firing rate (independent units);
    values: each active coordinate as a Gaussian with its latent's nonzero variance, quantised at
    step delta; `dense` coordinates (a scaffold's) are sent every token, so they add value bits only;
    residual: each dimension of x - x_hat as a Gaussian quantised at delta.
    delta = precision * RMS of the centred activations, the same for every SAE compared.
    """
    x, x_hat, z = x.double(), x_hat.double(), z.double()
    N = x.shape[0]
    delta = precision * float((x - x.mean(0)).pow(2).mean().sqrt())
    units = (z != 0).view(N, -1, block_size).any(-1)
    index_bits = float(binary_entropy_bits(units.double().mean(0)).sum())
    active = z != 0
    counts = active.sum(0).clamp_min(1)
    mean = (z * active).sum(0) / counts
    var = ((z - mean) * active).pow(2).sum(0) / counts
    per_coord = (0.5 * torch.log2(2 * math.pi * math.e * var.clamp_min(1e-30)) - math.log2(delta)).clamp_min(0)
    value_bits = float((active.double() * per_coord).sum() / N)
    if dense is not None and dense.shape[1]:
        dvar = dense.double().var(0)
        value_bits += float(
            (0.5 * torch.log2(2 * math.pi * math.e * dvar.clamp_min(1e-30)) - math.log2(delta)).clamp_min(0).sum()
        )
    e_var = (x - x_hat).var(0)
    resid = (0.5 * torch.log2(2 * math.pi * math.e * e_var.clamp_min(1e-30)) - math.log2(delta)).clamp_min(0)
    residual_bits = float(resid.sum())
    return {
        "bits_per_token": index_bits + value_bits + residual_bits,
        "index_bits": index_bits,
        "value_bits": value_bits,
        "residual_bits": residual_bits,
        "precision": precision,
        "delta": delta,
    }


def _fit_logistic(X: torch.Tensor, y: torch.Tensor, l2: float = 1e-3, iters: int = 100) -> torch.Tensor:
    """Weights [k+1] of an L2-regularised logistic regression (full-batch L-BFGS)."""
    Xb = torch.cat([X, torch.ones(X.shape[0], 1, dtype=X.dtype)], 1)
    w = torch.zeros(Xb.shape[1], dtype=X.dtype, requires_grad=True)
    opt = torch.optim.LBFGS([w], max_iter=iters, line_search_fn="strong_wolfe")
    pos_weight = (y.numel() - y.sum()) / y.sum().clamp_min(1)  # balanced classes

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(Xb @ w, y, pos_weight=pos_weight)
        loss = loss + l2 * w[:-1].pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach()


def _balanced_accuracy(pred: torch.Tensor, y: torch.Tensor) -> float:
    pos, neg = y.bool(), ~y.bool()
    return 0.5 * (float(pred[pos].float().mean()) + float((~pred[neg]).float().mean()))


def probe_classes(label: np.ndarray, names: list[str], train_mask: np.ndarray, min_examples: int):
    """(class name, one-vs-rest target) of every class of one label kind that probes are fitted on: class
    "special" is skipped, and a class needs min_examples positives and negatives among the train tokens and
    among the test tokens (both probing protocols use this rule)."""
    for c, name in enumerate(names):
        y = label == c
        counts = (y[train_mask].sum(), (~y[train_mask]).sum(), y[~train_mask].sum(), (~y[~train_mask]).sum())
        if name != "special" and min(counts) >= min_examples:
            yield name, y


def sparse_probing(
    z: torch.Tensor,
    labels: dict[str, np.ndarray],
    label_names: dict[str, list[str]],
    train_mask: np.ndarray,
    ks=(1, 2, 5),
    min_examples: int = 20,
) -> dict:
    """k-sparse probes: per class (one vs rest), pick the k latents with the largest mean difference
    on the train tokens, fit a logistic regression on them, report test balanced accuracy."""
    z = z.double()
    tr, te = torch.from_numpy(train_mask), torch.from_numpy(~train_mask)
    out = {}
    for kind, names in label_names.items():
        per_k = {k: [] for k in ks}
        classes = []
        for name, y in probe_classes(labels[kind], names, train_mask, min_examples):
            y = torch.from_numpy(y).double()
            classes.append(name)
            diff = (z[tr][y[tr] == 1].mean(0) - z[tr][y[tr] == 0].mean(0)).abs()
            for k in ks:
                top = diff.topk(min(k, z.shape[1])).indices
                mu, sd = z[tr][:, top].mean(0), z[tr][:, top].std(0).clamp_min(1e-8)
                w = _fit_logistic((z[tr][:, top] - mu) / sd, y[tr])
                Xt = (z[te][:, top] - mu) / sd
                pred = (torch.cat([Xt, torch.ones(Xt.shape[0], 1, dtype=Xt.dtype)], 1) @ w) > 0
                per_k[k].append(_balanced_accuracy(pred, y[te]))
        out[kind] = {"classes": classes, **{f"k{k}": float(np.mean(v)) if v else None for k, v in per_k.items()}}
    means = {}
    for k in ks:
        vals = [out[kind][f"k{k}"] for kind in label_names if out[kind][f"k{k}"] is not None]
        means[f"mean_k{k}"] = float(np.mean(vals)) if vals else None
    return {**out, **means}


def absorption(
    x: torch.Tensor,
    z: torch.Tensor,
    W_dec: torch.Tensor,
    parent: np.ndarray,
    child: np.ndarray,
    parents: dict[int, str],
    train_mask: np.ndarray,
    block_size: int = 1,
    n_main: int = 1,
    min_child_tokens: int = 5,
) -> dict:
    """Share of a parent concept's probe projection carried by latents other than its main ones.

    For each parent concept P (a role such as "name" whose tokens carry a child label such as which
    name): p = unit mean-difference direction of P in activation space (train tokens); each active
    latent j contributes c_j = z_j <W_dec_j, p>; the main units are the n_main units with the largest
    mean contribution over P's train tokens. On the test tokens of each child, absorption is
    sum_{j not main} c_j^+ / sum_j c_j^+; children are averaged with equal weight, then parents.
    `main_inactive` is the share of test tokens on which no main unit fires (full absorption).
    """
    x, z, W_dec = x.double(), z.double(), W_dec.double()
    tr, te = torch.from_numpy(train_mask), torch.from_numpy(~train_mask)
    per_parent = {}
    for pid, pname in parents.items():
        is_p = torch.from_numpy(parent == pid)
        if is_p[tr].sum() < min_child_tokens or (~is_p[tr]).sum() < min_child_tokens:
            continue
        p = x[tr & is_p].mean(0) - x[tr & ~is_p].mean(0)
        p = p / p.norm().clamp_min(1e-12)
        contrib = z * (W_dec @ p)  # [N, n]
        unit_contrib = contrib.view(z.shape[0], -1, block_size).sum(-1)
        main = unit_contrib[tr & is_p].mean(0).topk(n_main).indices
        main_mask = torch.zeros(unit_contrib.shape[1], dtype=torch.bool)
        main_mask[main] = True
        pos = unit_contrib.clamp_min(0)
        shares, inactive = [], []
        for c in np.unique(child[(parent == pid) & ~train_mask]):
            rows = te & is_p & torch.from_numpy(child == c)
            total = pos[rows].sum(-1)
            ok = total > 0
            if int(ok.sum()) < min_child_tokens:
                continue
            other = pos[rows][:, ~main_mask].sum(-1)
            shares.append(float((other[ok] / total[ok]).mean()))
            fired = (z[rows].view(int(rows.sum()), -1, block_size) != 0).any(-1)[:, main_mask].any(-1)
            inactive.append(float((~fired).double().mean()))
        if shares:
            per_parent[pname] = {
                "absorption": float(np.mean(shares)),
                "main_inactive": float(np.mean(inactive)),
                "n_children": len(shares),
                "main_units": main.tolist(),
            }
    vals = [v["absorption"] for v in per_parent.values()]
    return {
        "absorption": float(np.mean(vals)) if vals else None,
        "main_inactive": float(np.mean([v["main_inactive"] for v in per_parent.values()])) if vals else None,
        "n_main": n_main,
        "parents": per_parent,
    }


def effective_active(z: torch.Tensor) -> dict:
    """How concentrated the code is, as effective numbers of latents (exp of an entropy, in latents).

    per_token: mean over tokens of exp H(|z_b| / ||z_b||_1), the number of latents a token's activation
    mass is effectively spread over (what an l1/l2 penalty lowers); dictionary: exp H(m / sum m) with
    m_j = sum_b |z_bj|, the number of latents the total mass is spread over. Tokens with no active latent
    are left out of the per-token mean."""
    a = z.detach().double().abs()
    mass = a.sum(-1)
    ok = mass > 0
    p = a[ok] / mass[ok, None]
    h = -(p * torch.log(p.clamp_min(1e-300))).sum(-1)
    m = a.sum(0)
    q = m / m.sum().clamp_min(1e-300)
    hq = -(q * torch.log(q.clamp_min(1e-300))).sum()
    return {
        "per_token": float(h.exp().mean()) if ok.any() else 0.0,
        "dictionary": float(hq.exp()) if m.sum() > 0 else 0.0,
    }


def monosemanticity(
    z: torch.Tensor, labels: dict[str, np.ndarray], threshold: float = 0.8, min_fires: int = 20
) -> dict:
    """Per latent, the precision of its best ground-truth label: P(label = c | latent fires), maximised over
    every class c of every label kind (classes < 0, "no label", excluded); latents firing on fewer than
    min_fires tokens are not scored. Returns the share of scored latents whose best precision is at least
    `threshold`, the mean best precision, and `chance`: the largest class frequency of any kind, which a
    latent firing at random would score."""
    fires = (z.detach() != 0).double()
    counts = fires.sum(0)
    scored = counts >= min_fires
    best = torch.zeros(z.shape[1], dtype=torch.float64)
    chance = 0.0
    for lab in labels.values():
        lab = np.asarray(lab)
        valid = lab >= 0
        if not valid.any():
            continue
        classes, codes = np.unique(lab[valid], return_inverse=True)  # label values may be sparse ids
        onehot = torch.zeros(lab.shape[0], len(classes), dtype=torch.float64)
        onehot[torch.from_numpy(np.flatnonzero(valid)), torch.from_numpy(codes.reshape(-1))] = 1.0
        hits = fires.T @ onehot  # [n_latents, n_classes]: tokens where the latent fires and the label is c
        best = torch.maximum(best, (hits / counts.clamp_min(1)[:, None]).max(1).values)
        chance = max(chance, float(onehot.mean(0).max()))
    b = best[scored]
    return {
        "share_monosemantic": float((b >= threshold).double().mean()) if b.numel() else None,
        "mean_best_precision": float(b.mean()) if b.numel() else None,
        "n_scored": int(scored.sum()),
        "threshold": threshold,
        "min_fires": min_fires,
        "chance": chance,
    }
