"""`sae eval` on a CLT: per-layer FVU of every MLP output, L0 per layer and in total, dead/dense latents per layer
(on the cache's held-out rows), CE/KL with every MLP replaced at once, and each feature's decoder norm per target
layer (which layers it writes: `decoder_norms.safetensors`, [source layer, feature, target layer], summarised in
metrics.json). Written to <clt>/metrics.json.

With every MLP replaced, layer t's MLP output is the sum of the writes of layers 0..t's features, each encoded from
its own layer's input in the same forward (so every layer sees the replaced earlier layers). A Top-k CLT with a
budget shared across layers ranks every layer's latents together, which a forward cannot do causally: it gets the
held-out metrics only, and metrics.json says why.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from workbench.atomic import atomic_path, atomic_write_text
from workbench.errors import BadValueError
from workbench.sae.config import EvalConfig

METRICS, NORMS = "metrics.json", "decoder_norms.safetensors"


def evaluate_clt(clt_dir, cache_path, model_spec: str | None = "tiny", cfg: EvalConfig | None = None) -> dict:
    from workbench.cache import ActivationCache
    from workbench.sae.clt_io import load_clt, read_manifest
    from workbench.sae.eval import _splice_inputs, splice_metrics

    t0, cfg, clt_dir = time.time(), cfg or EvalConfig(), Path(clt_dir)
    device = cfg.device or ("cuda" if torch.cuda.is_available() else "cpu")
    manifest, clt = read_manifest(clt_dir), load_clt(clt_dir, device)
    cache = ActivationCache.open(cache_path)
    ins, outs = manifest["input_hooks"], manifest["target_hooks"]
    missing = [h for h in ins + outs if h not in cache.hooks]
    if missing:
        raise BadValueError(f"CLT {clt_dir} reads {missing[0]!r}, not in the cache at {cache_path}")
    n = min(cfg.max_tokens, cache.n_tokens("heldout"))
    if n == 0:
        raise BadValueError(f"the cache at {cache_path} has no held-out rows to evaluate on")
    result = {
        "clt": clt_dir.name,
        "model": model_spec,
        "layers": manifest["layers"],
        **_heldout(clt, cache, ins, outs, n, device),
        "decoder_norms": _decoder_norms(clt, clt_dir),
    }
    if model_spec is not None and clt.cfg.clt_sparsity == "shared" and clt.cfg.architecture == "topk":
        result["all_replaced"] = {"why_not": "a Top-k budget shared across layers cannot be applied in one forward"}
    elif model_spec is not None:
        model, tokens, special = _splice_inputs(cache, cache_path, model_spec, ins + outs, cfg, device)
        names = [(None, h, t) for h, t in zip(ins, outs)]
        hooks = _clt_hooks(clt, ins, outs)
        result["all_replaced"] = splice_metrics(model, names, tokens, special, cfg.batch_size, make_hooks=hooks)
    result["eval_config"] = {**cfg.to_dict(), "seconds": round(time.time() - t0, 1)}
    atomic_write_text(clt_dir / METRICS, json.dumps(result, indent=2))
    return result


@torch.no_grad()
def _heldout(clt, cache, ins, outs, n: int, device) -> dict:
    """Per-layer FVU, L0 and dead/dense latents over the first n held-out rows."""
    L, tau = clt.n_layers, clt.cfg.dense_tau
    sq, var, fires, l0 = torch.zeros(L), torch.zeros(L), None, torch.zeros(L)
    ys_all = [[] for _ in range(L)]
    for start in range(0, n, 4096):
        rows = np.arange(start, min(n, start + 4096))
        xs = [cache.rows(h, rows, split="heldout", device=device).float() for h in ins]
        ys = [cache.rows(h, rows, split="heldout", device=device).float() for h in outs]
        codes = clt.encode_all(xs)
        for t in range(L):
            y_hat = clt.bias(t, xs) + sum(codes[i] @ clt.decoder(i, t) for i in range(t + 1))
            sq[t] += float((ys[t] - y_hat).pow(2).sum())
            ys_all[t].append(ys[t].cpu())
        on = torch.stack([(z != 0).sum(0) for z in codes]).cpu()  # [L, n_latents]
        fires = on if fires is None else fires + on
        l0 += torch.tensor([float((z != 0).sum()) for z in codes])
    for t in range(L):
        y = torch.cat(ys_all[t])
        var[t] = float((y - y.mean(0)).pow(2).sum())
    freq = fires.double() / n
    fvu = (sq / var.clamp_min(1e-12)).tolist()
    return {
        "n_tokens": n,
        "fvu_per_layer": fvu,
        "fvu": float(sq.sum() / var.sum().clamp_min(1e-12)),
        "l0_per_layer": (l0 / n).tolist(),
        "l0": float(l0.sum() / n),
        "dead_per_layer": (freq == 0).sum(1).tolist(),
        "dense_per_layer": (freq > tau).sum(1).tolist(),
        "dead_frac": float((freq == 0).double().mean()),
        "dense_frac": float((freq > tau).double().mean()),
        "dense_tau": tau,
    }


@torch.no_grad()
def _decoder_norms(clt, clt_dir: Path) -> dict:
    """Each feature's decoder norm into each target layer (saved whole), and per source layer the mean norm into
    each target and the share of its features that write mostly (> half their squared norm) into later layers."""
    L = clt.n_layers
    norms = torch.stack(
        [torch.stack([clt.decoder(i, t).norm(dim=-1) for t in range(L)], 1).cpu() for i in range(L)]
    )  # [source, feature, target]
    with atomic_path(clt_dir / NORMS) as tmp:
        save_file({"norms": norms.float().contiguous()}, str(tmp))
    sq = norms.pow(2)
    own = torch.stack([sq[i, :, i] for i in range(L)])  # [source, feature]
    later = sq.sum(-1) - own
    return {
        "file": NORMS,
        "mean_norm": norms.mean(1).tolist(),  # [source][target]
        "cross_layer_share": [float((later[i] > own[i]).double().mean()) for i in range(L)],
    }


def _clt_hooks(clt, ins: list[str], outs: list[str]):
    """make_hooks for splice_metrics: each layer's input is kept as it passes; at layer t's MLP output the CLT's
    prediction (every layer <= t's features, encoded from their own inputs in this forward) replaces it."""

    def make(mask: torch.Tensor, mode: str) -> list:
        seen: dict[int, torch.Tensor] = {}
        codes: dict[int, torch.Tensor] = {}

        def keep(act, hook, t):
            seen[t] = act[mask].float()

        def replace(act, hook, t):
            act = act.clone()
            if mode == "zero":
                act[mask] = 0
                return act
            codes[t] = clt.encode(t, seen[t])
            new = clt.bias(t, seen) + sum(codes[i] @ clt.decoder(i, t) for i in range(t + 1))
            act[mask] = new.to(act.dtype)
            return act

        hooks = []
        for t, (h, o) in enumerate(zip(ins, outs)):
            hooks += [(h, lambda a, hook, t=t: keep(a, hook, t)), (o, lambda a, hook, t=t: replace(a, hook, t))]
        return hooks

    return make
