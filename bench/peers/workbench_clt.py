"""Workbench side (main venv) of bench/circuits/clt_bench.py's memory measurements, one process per measurement so each
peak is its own; cfg["mode"] picks it:

memory  train a CLT for cfg["steps"] steps from a cache through sae.transcoders.train_clt (the CLI's path): the
        run's own memory estimate (what it checks against the budget) and the process's peak RSS above its start
gpt2    a random GPT-2-small-shaped model and a random Top-k CLT over its 12 layers: build_graph on cfg["n_tokens"]
        random tokens (top logits as targets, at most cfg["max_feature_nodes"] features given rows): peak RSS
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))

import common  # noqa: E402
import torch  # noqa: E402


def memory_mode(cfg) -> dict:
    from workbench.cache import ActivationCache
    from workbench.sae import TrainConfig
    from workbench.sae.config import CLTConfig
    from workbench.sae.transcoders import _check_clt_memory, _layer_group, train_clt

    arch = cfg.get("architecture", "topk")
    clt_cfg = CLTConfig(architecture=arch, k=cfg["k"], n_latents=cfg["n_latents"], transcoder=True)
    tc = TrainConfig(batch_size=cfg["batch"], n_tokens=cfg["batch"] * cfg["steps"], lr=1e-3, seed=0, progress=False)
    cache = ActivationCache.open(cfg["cache"])
    stream = [h for layer in range(4) for h in _layer_group(cache, cfg["cache"], layer, [])[:2]]
    resolved = clt_cfg.resolve(cache.d(stream[0]), tc.n_tokens, cache.d(stream[1]), 4)
    estimate = _check_clt_memory(cache, resolved, stream, tc)
    start = common.reset_peak()
    c0 = time.process_time()
    with tempfile.TemporaryDirectory() as out:
        train_clt(cfg["cache"], "all", clt_cfg, tc, out)
    return {
        "estimate_mib": estimate / 2**20,
        "rss_at_start_mib": start,
        "peak_rss_mib": common.rss_mb(),
        "peak_above_start_mib": common.rss_mb() - start,
        "cpu_seconds": time.process_time() - c0,
    }


def gpt2_mode(cfg) -> dict:
    from workbench_graph import gpt2_shaped

    from workbench.circuits.feature.attribution_graph import GraphConfig, build_graph
    from workbench.circuits.feature.transcoders import CrossLayerTranscoders
    from workbench.sae.architectures import build
    from workbench.sae.config import CLTConfig

    start = common.reset_peak()
    model = gpt2_shaped({"n_tokens": cfg["n_tokens"], "shape": cfg.get("shape", {})})
    L, d = model.cfg.n_layers, model.cfg.d_model
    torch.manual_seed(0)
    clt_cfg = CLTConfig(architecture="topk", k=cfg["k"], n_latents=cfg["n_latents"], transcoder=True)
    clt = build(clt_cfg.resolve(d, None, d, L)).eval().requires_grad_(False)
    tcs = CrossLayerTranscoders(clt, [f"blocks.{i}.ln2.hook_normalized" for i in range(L)])
    loaded = common.rss_mb()
    params = sum(p.numel() for p in clt.parameters())
    tokens = torch.randint(0, model.cfg.d_vocab, (cfg["n_tokens"],), generator=torch.Generator().manual_seed(0))
    gcfg = GraphConfig(max_feature_nodes=cfg["max_feature_nodes"], batch_size=cfg["batch"], heads=False)
    common.reset_peak()
    t0, c0 = time.perf_counter(), time.process_time()
    g = build_graph(model, tcs, tokens, cfg=gcfg)
    return {
        "rss_at_start_mib": start,
        "rss_loaded_mib": loaded,
        "clt_parameters": params,
        "peak_rss_mib": common.rss_mb(),
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - c0,
        "active": g.n_active,
        "rows": g.n_features,
        "kept_edges": int(g.pruned.edge_mask.sum()),
        **g.scores,
    }


def main():
    cfg = common.load_config()
    modes = {"memory": memory_mode, "gpt2": gpt2_mode}
    common.emit(modes[cfg["mode"]](cfg))


if __name__ == "__main__":
    main()
