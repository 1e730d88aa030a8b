"""SAEDashboard side (bench/.venv-dash) of the feature benchmark: SaeVisRunner's feature data for one SAE.

SaeVisRunner.run(encoder, model, tokens) runs the model over every token sequence once per batch of
features (its `minibatch_size_features`), encodes the hook's activations with the SAE and computes each
feature's statistics, histograms, logit tables, top and interval examples and correlation tables.
With `cache_dir` set it keeps the model's activations on disk after the first batch and reads them
back for the later ones (its own activation cache); without, every batch runs the model.

cfg: model_dir, sae_dir, tokens (.npy, [n_seq, ctx]), hook, n_latents, batch_features, n_batches (the
measured batches: features 0 .. n_batches * batch_features - 1), minibatch_size_tokens, ignore_tokens
(ids masked out of the examples and histograms, as the workbench's cache leaves them out),
cache_dir (null: run the model every batch), check_rows / check_seqpos (.npy: cached activations of
a few rows and their (sequence, position), to show the peer's model reproduces the cache).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))

import common  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from sae_dashboard.sae_vis_data import SaeVisConfig  # noqa: E402
from sae_dashboard.sae_vis_runner import SaeVisRunner  # noqa: E402
from sae_lens import SAE  # noqa: E402


@torch.no_grad()
def check_model(model, tokens: torch.Tensor, hook: str, rows: np.ndarray, seqpos: np.ndarray) -> float:
    """Max |peer activation - cached activation| / max |cached activation| on the check rows."""
    seqs = np.unique(seqpos[:, 0])
    _, cache = model.run_with_cache(tokens[seqs], names_filter=[hook])
    where = np.searchsorted(seqs, seqpos[:, 0])
    acts = cache[hook][where, seqpos[:, 1]].float().numpy()
    ref = rows.astype(np.float32)
    return float(np.abs(acts - ref).max() / np.abs(ref).max())


def main() -> None:
    cfg = common.load_config()
    torch.manual_seed(0)
    model = common.load_model(cfg["model_dir"])
    sae = SAE.load_from_disk(cfg["sae_dir"], device="cpu")
    # SaeVisRunner.run first folds the decoder norms into the encoder, which sae-lens refuses for a Top-k
    # SAE (it may change the top-k choice); skipped, so both sides report the SAE's own activations
    sae.fold_W_dec_norm = lambda: None
    tokens = torch.from_numpy(np.load(cfg["tokens"]).astype(np.int64))
    rel_err = check_model(model, tokens, cfg["hook"], np.load(cfg["check_rows"]), np.load(cfg["check_seqpos"]))
    cache_dir = cfg["cache_dir"]
    if cache_dir:
        shutil.rmtree(cache_dir, ignore_errors=True)  # the first batch fills SAEDashboard's cache afresh
    base = common.reset_peak()
    F, times, cpu, maxes = cfg["batch_features"], [], [], []
    for b in range(cfg["n_batches"]):
        feats = list(range(b * F, min((b + 1) * F, cfg["n_latents"])))
        vis = SaeVisConfig(
            hook_point=cfg["hook"],
            features=feats,
            minibatch_size_features=F,
            minibatch_size_tokens=cfg["minibatch_size_tokens"],
            ignore_tokens=set(cfg["ignore_tokens"]),
            cache_dir=Path(cache_dir) if cache_dir else None,
            verbose=False,
        )
        t0, c0 = time.perf_counter(), time.process_time()
        data = SaeVisRunner(vis).run(encoder=sae, model=model, tokens=tokens)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        maxes += data.feature_stats.max
        assert sorted(data.feature_data_dict) == feats
    common.emit(
        {
            "side": "sae-dashboard" + (" (its activation cache)" if cache_dir else ""),
            "n_seq": int(tokens.shape[0]),
            "n_tokens": int(tokens.numel()),
            "batch_features": F,
            "batch_seconds": times,
            "batch_cpu_seconds": cpu,
            "feature_max": maxes,
            "model_check_rel_err": rel_err,
            "rss_base_mb": base,
            "rss_peak_mb": common.rss_mb(),
            "versions": common.versions("sae-dashboard", "sae-lens", "transformer-lens"),
        }
    )


if __name__ == "__main__":
    main()
