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
from functools import partial
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from workbench.atomic import atomic_write_text
from workbench.errors import BadValueError
from workbench.sae import metrics, scores
from workbench.sae.config import EvalConfig
from workbench.sae.io import load_sae, read_info

METRICS = "metrics.json"


def _codes_layout(sae) -> tuple[int, int, int]:
    """(sparse latents, scaffold rank, block size) of a SAELens-format SAE."""
    r = int(getattr(sae.cfg, "scaffold_rank", 0))
    return sae.cfg.d_sae - r, r, int(getattr(sae.cfg, "block_size", 1))


def transcode(sae, x: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """The dictionary's output for input x and its codes: decode, plus a skip transcoder's W_skip x (sae-lens's
    skip transcoders add it in forward, not in decode)."""
    out = sae.decode(codes)
    skip = getattr(sae, "W_skip", None)
    return out if skip is None else out + x.to(sae.dtype) @ skip.T


def _splice_hooks(replacements, mask: torch.Tensor, mode: str) -> list:
    """fwd_hooks putting every (sae, hook, target) in at once: an SAE replaces its hook's activation by its
    reconstruction; a transcoder replaces the target's (the MLP's output) by its prediction from the input
    hook's activation earlier in the same forward. mode: "sae", "zero" (the activation, or the MLP, zeroed)
    or "no_scaffold" (the scaffold's coordinates zeroed)."""
    out = []
    for sae, hook, target in replacements:
        n_sparse = _codes_layout(sae)[0]
        seen: dict = {}

        def replace(act, hook, sae=sae, seen=seen, n_sparse=n_sparse):
            x = seen.pop("x", act)[mask]
            if mode == "zero":
                new = torch.zeros(x.shape[0], act.shape[-1], dtype=act.dtype, device=act.device)
            else:
                codes = sae.encode(x.to(sae.dtype))
                if mode == "no_scaffold":
                    codes[:, n_sparse:] = 0
                new = transcode(sae, x, codes)
            act = act.clone()
            act[mask] = new.to(act.dtype)
            return act

        if target:
            out.append((hook, lambda act, hook, seen=seen: seen.__setitem__("x", act)))
        out.append((target or hook, replace))
    return out


@torch.no_grad()
def splice_metrics(
    model, replacements, tokens: torch.Tensor, special_ids, batch_size: int = 16, make_hooks=None
) -> dict:
    """CE and KL with the dictionaries spliced in (and with zero ablation / the scaffold removed): one
    (sae, hook, target or None) for one SAE or transcoder, one per layer for a whole transcoder set.
    make_hooks(mask, mode): the fwd_hooks of a dictionary `_splice_hooks` cannot build (a CLT, whose replacement
    at one layer reads every earlier layer); replacements then only name the hooks."""
    from workbench.cache.hooks import mlp_in_hooks

    r = _codes_layout(replacements[0][0])[1] if len(replacements) == 1 and make_hooks is None else 0
    make_hooks = make_hooks or partial(_splice_hooks, replacements)
    modes = ["sae", "zero"] + (["no_scaffold"] if r else [])
    sums = {m: 0.0 for m in ["clean"] + modes}
    kl = {m: 0.0 for m in modes}
    n_pred = 0
    special = torch.tensor(sorted(special_ids), dtype=torch.long)
    with mlp_in_hooks(model, [h for _, h, _ in replacements]):
        for i in range(0, tokens.shape[0], batch_size):
            toks = tokens[i : i + batch_size].to(model.cfg.device)
            mask = ~torch.isin(toks, special.to(toks.device))
            logp_clean = model(toks)[:, :-1].log_softmax(-1)
            target = toks[:, 1:]
            sums["clean"] += float(F.nll_loss(logp_clean.flatten(0, 1), target.flatten(), reduction="sum"))
            n_pred += target.numel()
            for mode in modes:
                logits = model.run_with_hooks(toks, fwd_hooks=make_hooks(mask, mode))
                logp = logits[:, :-1].log_softmax(-1)
                sums[mode] += float(F.nll_loss(logp.flatten(0, 1), target.flatten(), reduction="sum"))
                kl[mode] += float((logp_clean.exp() * (logp_clean - logp)).sum())
    return _splice_summary(tokens, n_pred, sums, kl, r)


def _splice_summary(tokens, n_pred: int, sums: dict, kl: dict, r: int) -> dict:
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
    }
    lost = ce["zero"] - ce["clean"]
    no_loss = (
        f"zero ablation does not raise the CE loss (ce_zero_ablation {ce['zero']:.4g} <= ce_clean "
        f"{ce['clean']:.4g}), so there is no loss to recover"
    )
    out.update(scores.ratio("ce_loss_recovered", ce["zero"] - ce["sae"], lost, no_loss))
    unchanged = "zero ablation leaves the next-token distribution unchanged (kl_zero_ablation 0): nothing to recover"
    out.update(scores.ratio("kl_score", kls["zero"] - kls["sae"], kls["zero"], unchanged))
    if r:
        out.update(
            {
                "ce_no_scaffold": ce["no_scaffold"],
                "kl_no_scaffold": kls["no_scaffold"],
                "ce_no_scaffold_over_clean": ce["no_scaffold"] / ce["clean"],
                **scores.ratio("ce_loss_recovered_no_scaffold", ce["zero"] - ce["no_scaffold"], lost, no_loss),
            }
        )
    return out


def _hooks(sae, sae_dir: Path, cache, tcache) -> tuple[str, str | None]:
    """(input hook, target hook or None) of a saved SAE or transcoder, checked against the caches' widths (tcache:
    the target's cache)."""
    hook, target = sae.cfg.metadata.hook_name, sae.cfg.metadata.hook_name_out
    if not hook:
        raise BadValueError(f"{sae_dir}/cfg.json has no metadata.hook_name; cannot tell which activations it reads")
    for h, what, c in ((hook, "hook", cache), (target, "target hook", tcache)):
        if h and h not in c.hooks:
            raise BadValueError(f"{what} {h!r} of {sae_dir} is not in the cache at {c.path}; cached hooks: {c.hooks}")
    cache_path = cache.path
    if cache.d(hook) != sae.cfg.d_in:
        raise BadValueError(
            f"SAE {sae_dir} has d_in={sae.cfg.d_in} but hook {hook!r} in {cache_path} has width {cache.d(hook)}"
        )
    if target and tcache.d(target) != sae.cfg.d_out:
        raise BadValueError(
            f"transcoder {sae_dir} has d_out={sae.cfg.d_out} but target hook {target!r} in {tcache.path} has width "
            f"{tcache.d(target)}"
        )
    return hook, target


@torch.no_grad()
def _reconstruct(sae, cache, tcache, hook: str, target: str | None, n: int, n_sparse: int, b: int, device):
    """(accumulator, targets, reconstructions, codes) over the first n held-out rows."""
    acc = metrics.ReconAccumulator(n_sparse, b)
    ys, y_hats, zs = [], [], []
    for start in range(0, n, 4096):
        rows = np.arange(start, min(n, start + 4096))
        x = cache.rows(hook, rows, split="heldout", device=device)
        y = tcache.rows(target, rows, split="heldout", device=device) if target else x
        codes = sae.encode(x.to(sae.dtype))
        y_hat = transcode(sae, x, codes)
        acc.add(y, y_hat, codes[:, :n_sparse])
        ys.append(y.cpu())
        y_hats.append(y_hat.cpu())
        zs.append(codes.cpu())
    return acc, torch.cat(ys), torch.cat(y_hats), torch.cat(zs)


def evaluate(
    sae_dir: str | Path,
    cache_path: str | Path,
    model_spec: str | None = "tiny",
    cfg: EvalConfig | None = None,
    *,
    write: bool = True,
    target_cache: str | Path | None = None,
    **options,
) -> dict:
    """Evaluate one saved SAE or transcoder on the cache's held-out split; model_spec=None skips the splice
    metrics. A transcoder's reconstruction metrics are of its target (the MLP's output), and its splice
    metrics replace that MLP by it (zero ablation: the MLP's output zeroed).

    target_cache: where the target's rows are when it was trained from another cache (default: the one its
    workbench.json records, if any); its rows must be the same tokens as the cache's.

    options override fields of `cfg` (EvalConfig), e.g. evaluate(folder, cache, max_tokens=5000).
    """
    cfg = dataclasses.replace(cfg or EvalConfig(), **options)
    from workbench.cache import ActivationCache
    from workbench.cache.reader import check_aligned

    t0 = time.time()
    sae_dir = Path(sae_dir)
    device = cfg.device or ("cuda" if torch.cuda.is_available() else "cpu")
    sae = load_sae(sae_dir, device=device).eval()
    info = read_info(sae_dir)
    cache = tcache = ActivationCache.open(cache_path)
    recorded = info.get("data", {}).get("target_cache")
    if target_cache is None and recorded:
        target_cache = sae_dir / recorded
    if target_cache is not None:
        tcache = ActivationCache.open(target_cache)
        check_aligned(cache, tcache)
    hook, target = _hooks(sae, sae_dir, cache, tcache)
    n_sparse, r, b = _codes_layout(sae)
    tau = float(info.get("sae_config", {}).get("dense_tau", 0.1))
    n = min(cfg.max_tokens, cache.n_tokens("heldout"))
    if n == 0:
        raise BadValueError(f"the cache at {cache_path} has no held-out rows to evaluate on")
    acc, Y, Y_hat, Z = _reconstruct(sae, cache, tcache, hook, target, n, n_sparse, b, device)
    labels = {k: v[:n] for k, v in cache.labels("heldout").items()}
    train_mask = cache.seq_index("heldout")[:n] % 2 == 0  # probes fit on even sequences, tested on odd ones
    label_names = cache.manifest.get("label_names", {})
    W_dec = sae.W_dec.detach().cpu()[:n_sparse]
    result = {
        "sae": sae_dir.name,
        "architecture": sae.cfg.architecture(),
        "training_architecture": sae.cfg.metadata.training_architecture,
        "hook": hook,
        **({"target_hook": target} if target else {}),
        "cache": os.path.relpath(Path(cache_path).resolve(), sae_dir.resolve()),
        "model": model_spec,
        "reconstruction": acc.result(tau),
        "description_length": metrics.description_length(
            Y, Y_hat, Z[:, :n_sparse], b, cfg.mdl_precision, Z[:, n_sparse:]
        ),
        "probing": metrics.sparse_probing(Z[:, :n_sparse], labels, label_names, train_mask, cfg.probe_ks),
    }
    if "role" in labels and "entity" in labels and "role" in label_names:
        parents = {int(p): label_names["role"][int(p)] for p in np.unique(labels["role"][labels["entity"] >= 0])}
        result["absorption"] = metrics.absorption(
            Y, Z[:, :n_sparse], W_dec, labels["role"], labels["entity"], parents, train_mask, b, cfg.absorption_main
        )
    if model_spec is not None:
        model, tokens, special = _splice_inputs(cache, cache_path, model_spec, [hook], cfg, device)
        result["splice"] = splice_metrics(model, [(sae, hook, target)], tokens, special, cfg.batch_size)
    result["eval_config"] = {**cfg.to_dict(), "dense_tau": tau, "seconds": round(time.time() - t0, 1)}
    if write:
        atomic_write_text(sae_dir / METRICS, json.dumps(result, indent=2))
    return result


def _splice_inputs(cache, cache_path, model_spec: str, hooks, cfg: EvalConfig, device):
    """(model, held-out token sequences, special ids left as they are) for the splice metrics."""
    from workbench.cache import ActivationCache
    from workbench.models import load

    model, _ = load(model_spec, device=device)
    ActivationCache.open(cache_path, model=model, hooks=hooks)  # the model must be the one the cache came from
    tokens = torch.from_numpy(cache.sequences("heldout")[: cfg.n_sequences])
    special = cache.config.special_ids if cache.config.exclude_special else ()
    return model, tokens, special


def evaluate_set(
    set_dir: str | Path, cache_path: str | Path, model_spec: str = "tiny", cfg: EvalConfig | None = None
) -> dict:
    """Evaluate a transcoder set: every member on its own (its metrics.json: its MLP replaced), then, for each
    of the set's configs, every layer's MLP replaced by its transcoder at once (the replacement model);
    written to <set_dir>/metrics.json."""
    from workbench.cache import ActivationCache
    from workbench.sae.transcoders import load_set

    cfg = cfg or EvalConfig()
    set_dir = Path(set_dir)
    manifest = load_set(set_dir)
    device = cfg.device or ("cuda" if torch.cuda.is_available() else "cpu")
    layers = manifest["layers"]
    members = {n: evaluate(set_dir / n, cache_path, model_spec, cfg) for e in layers for n in e["transcoders"]}
    cache = ActivationCache.open(cache_path)
    hooks = [h for e in layers for h in (e["input_hook"], e["target_hook"])]
    model, tokens, special = _splice_inputs(cache, cache_path, model_spec, hooks, cfg, device)
    replaced = {}
    for i in range(len(layers[0]["transcoders"]) if layers else 0):
        names = [e["transcoders"][i] for e in layers]
        reps = [
            (load_sae(set_dir / n, device=device).eval(), e["input_hook"], e["target_hook"])
            for n, e in zip(names, layers)
        ]
        replaced[names[0].split("-", 1)[-1]] = {
            "members": names,
            **splice_metrics(model, reps, tokens, special, cfg.batch_size),
        }
    result = {
        "set": set_dir.name,
        "model": manifest["model"],
        "layers": [e["layer"] for e in layers],
        "members": {n: {**m["reconstruction"], **m.get("splice", {})} for n, m in members.items()},
        "all_replaced": replaced,
        "eval_config": cfg.to_dict(),
    }
    atomic_write_text(set_dir / METRICS, json.dumps(result, indent=2))
    return result


@torch.no_grad()
def fvu_at_inference_k(sae, x: torch.Tensor, ks) -> dict[int, float]:
    """FVU of a Top-k-family SAE (SAELens topk or jumprelu, no scaffold) run with the rule "each token keeps
    its k' largest ReLU pre-activations" for each k' in ks, whatever rule it was trained with (the Top-k
    regulariser paper's robustness to the inference-time k)."""
    if int(getattr(sae.cfg, "scaffold_rank", 0)) or getattr(sae.cfg, "block_size", 1) != 1:
        raise BadValueError(
            f"fvu_at_inference_k takes a Top-k-family SAE without scaffold, not {sae.cfg.architecture()}"
        )
    x = x.to(sae.dtype)
    h = (sae.process_sae_in(x) @ sae.W_enc + sae.b_enc).relu()
    total = (x - x.mean(0)).double().pow(2).sum().clamp_min(1e-12)
    out = {}
    for k in ks:
        top = h.topk(min(int(k), h.shape[1]), dim=-1)
        z = torch.zeros_like(h).scatter(-1, top.indices, top.values)
        out[int(k)] = float((x - sae.decode(z)).double().pow(2).sum() / total)
    return out
