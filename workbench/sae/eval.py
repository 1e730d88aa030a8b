"""`evaluate(sae_dir, cache_path, model_spec)`: held-out metrics written to <sae_dir>/metrics.json.

The SAE is loaded through sae_lens (so any SAELens-format SAE can be evaluated), activations come
from the cache's held-out split, and the spliced-model metrics run the model on the held-out
sequences the cache was harvested from, replacing the hook's activation at the positions the
cache stores (special tokens such as BOS are left as they are when the cache excluded them).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from workbench.atomic import atomic_write_text
from workbench.errors import BadValueError
from workbench.sae import metrics
from workbench.sae.config import EvalConfig
from workbench.sae.io import load_sae, read_info

METRICS = "metrics.json"


def _codes_layout(sae) -> tuple[int, int, int]:
    """(sparse latents, scaffold rank, block size) of a SAELens-format SAE."""
    r = int(getattr(sae.cfg, "scaffold_rank", 0))
    return sae.cfg.d_sae - r, r, int(getattr(sae.cfg, "block_size", 1))


@torch.no_grad()
def splice_metrics(model, sae, hook: str, tokens: torch.Tensor, special_ids, batch_size: int = 16) -> dict:
    """CE and KL with the SAE (and with zero ablation / the scaffold removed) spliced in at `hook`."""
    n_sparse, r, _ = _codes_layout(sae)
    modes = ["sae", "zero"] + (["no_scaffold"] if r else [])
    sums = {m: 0.0 for m in ["clean"] + modes}
    kl = {m: 0.0 for m in modes}
    n_pred = 0
    special = torch.tensor(sorted(special_ids), dtype=torch.long)
    for i in range(0, tokens.shape[0], batch_size):
        toks = tokens[i : i + batch_size].to(model.cfg.device)
        mask = ~torch.isin(toks, special.to(toks.device))
        logits = model(toks)
        logp_clean = logits[:, :-1].log_softmax(-1)
        target = toks[:, 1:]
        sums["clean"] += float(F.nll_loss(logp_clean.flatten(0, 1), target.flatten(), reduction="sum"))
        n_pred += target.numel()
        for mode in modes:

            def patch(act, hook, mode=mode):
                x = act[mask]
                if mode == "zero":
                    new = torch.zeros_like(x)
                else:
                    codes = sae.encode(x.to(sae.dtype))
                    if mode == "no_scaffold":
                        codes[:, n_sparse:] = 0
                    new = sae.decode(codes)
                act = act.clone()
                act[mask] = new.to(act.dtype)
                return act

            logp = model.run_with_hooks(toks, fwd_hooks=[(hook, patch)])[:, :-1].log_softmax(-1)
            sums[mode] += float(F.nll_loss(logp.flatten(0, 1), target.flatten(), reduction="sum"))
            kl[mode] += float((logp_clean.exp() * (logp_clean - logp)).sum())
    ce = {m: v / n_pred for m, v in sums.items()}
    kls = {m: v / n_pred for m, v in kl.items()}
    out = {
        "n_sequences": int(tokens.shape[0]),
        "n_predictions": n_pred,
        "ce_clean": ce["clean"],
        "ce_sae": ce["sae"],
        "ce_zero_ablation": ce["zero"],
        "kl_sae": kls["sae"],
        "kl_zero_ablation": kls["zero"],
        "ce_loss_recovered": (ce["zero"] - ce["sae"]) / max(ce["zero"] - ce["clean"], 1e-12),
        "kl_score": (kls["zero"] - kls["sae"]) / max(kls["zero"], 1e-12),
    }
    if r:
        out.update(
            {
                "ce_no_scaffold": ce["no_scaffold"],
                "kl_no_scaffold": kls["no_scaffold"],
                "ce_no_scaffold_over_clean": ce["no_scaffold"] / ce["clean"],
                "ce_loss_recovered_no_scaffold": (ce["zero"] - ce["no_scaffold"])
                / max(ce["zero"] - ce["clean"], 1e-12),
            }
        )
    return out


def evaluate(
    sae_dir: str | Path,
    cache_path: str | Path,
    model_spec: str | None = "tiny",
    cfg: EvalConfig | None = None,
    *,
    write: bool = True,
    **options,
) -> dict:
    """Evaluate one saved SAE on the cache's held-out split; model_spec=None skips the splice metrics.

    options override fields of `cfg` (EvalConfig), e.g. evaluate(folder, cache, max_tokens=5000).
    """
    cfg = dataclasses.replace(cfg or EvalConfig(), **options)
    from workbench.cache.reader import ActivationCache

    t0 = time.time()
    sae_dir = Path(sae_dir)
    device = cfg.device or ("cuda" if torch.cuda.is_available() else "cpu")
    sae = load_sae(sae_dir, device=device).eval()
    info = read_info(sae_dir)
    hook = sae.cfg.metadata.hook_name
    if not hook:
        raise BadValueError(f"{sae_dir}/cfg.json has no metadata.hook_name; cannot tell which activations it reads")
    cache = ActivationCache.open(cache_path, hooks=[hook])
    if cache.d(hook) != sae.cfg.d_in:
        raise BadValueError(
            f"SAE {sae_dir} has d_in={sae.cfg.d_in} but hook {hook!r} in {cache_path} has width {cache.d(hook)}"
        )
    n_sparse, r, b = _codes_layout(sae)
    tau = float(info.get("sae_config", {}).get("dense_tau", 0.1))
    n = min(cfg.max_tokens, cache.n_tokens("heldout"))
    if n == 0:
        raise BadValueError(f"the cache at {cache_path} has no held-out rows to evaluate on")
    acc = metrics.ReconAccumulator(n_sparse, b)
    xs, x_hats, zs = [], [], []
    with torch.no_grad():
        for start in range(0, n, 4096):
            x = cache.rows(hook, np.arange(start, min(n, start + 4096)), split="heldout", device=device)
            codes = sae.encode(x.to(sae.dtype))
            x_hat = sae.decode(codes)
            acc.add(x, x_hat, codes[:, :n_sparse])
            xs.append(x.cpu())
            x_hats.append(x_hat.cpu())
            zs.append(codes.cpu())
    X, X_hat, Z = torch.cat(xs), torch.cat(x_hats), torch.cat(zs)
    labels = {k: v[:n] for k, v in cache.labels("heldout").items()}
    train_mask = cache.seq_index("heldout")[:n] % 2 == 0  # probes fit on even sequences, tested on odd ones
    label_names = cache.manifest.get("label_names", {})
    W_dec = sae.W_dec.detach().cpu()[:n_sparse]
    result = {
        "sae": sae_dir.name,
        "architecture": sae.cfg.architecture(),
        "training_architecture": sae.cfg.metadata.training_architecture,
        "hook": hook,
        "cache": os.path.relpath(Path(cache_path).resolve(), sae_dir.resolve()),
        "model": model_spec,
        "reconstruction": acc.result(tau),
        "description_length": metrics.description_length(
            X, X_hat, Z[:, :n_sparse], b, cfg.mdl_precision, Z[:, n_sparse:]
        ),
        "probing": metrics.sparse_probing(Z[:, :n_sparse], labels, label_names, train_mask, cfg.probe_ks),
    }
    if "role" in labels and "entity" in labels and "role" in label_names:
        parents = {int(p): label_names["role"][int(p)] for p in np.unique(labels["role"][labels["entity"] >= 0])}
        result["absorption"] = metrics.absorption(
            X, Z[:, :n_sparse], W_dec, labels["role"], labels["entity"], parents, train_mask, b, cfg.absorption_main
        )
    if model_spec is not None:
        from workbench.models import load

        model, _ = load(model_spec, device=device)
        ActivationCache.open(cache_path, model=model, hooks=[hook])  # the model must be the one the cache came from
        tokens = torch.from_numpy(cache.sequences("heldout")[: cfg.n_sequences])
        special = cache.config.special_ids if cache.config.exclude_special else ()
        result["splice"] = splice_metrics(model, sae, hook, tokens, special, cfg.batch_size)
    result["eval_config"] = {**cfg.to_dict(), "dense_tau": tau, "seconds": round(time.time() - t0, 1)}
    if write:
        atomic_write_text(sae_dir / METRICS, json.dumps(result, indent=2))
    return result
