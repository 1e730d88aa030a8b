"""Workbench side (main venv) of the feature-circuit benchmark; cfg["mode"] picks what one process measures.

graph    build_graph on the first n tokens of a text through a transcoder set: seconds (wall and this process's
         CPU) without and with the per-head split of the kept edges, active features, rows, kept edges
circuit  find_feature_circuit on synthetic queries (target NDF cfg["target_ndf"]): seconds and what it found
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

import common  # noqa: E402
import torch  # noqa: E402


def graph_mode(cfg, model, tcs):
    from workbench.circuits.attribution_graph import build_graph

    tokens = torch.tensor(cfg["tokens"])
    build_graph(model, tcs, tokens[:8], heads=False)  # warm-up
    base = common.reset_peak()
    t0, c0 = time.perf_counter(), time.process_time()
    g = build_graph(model, tcs, tokens, heads=False)
    plain, plain_cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = common.rss_mb() - base
    t0, c0 = time.perf_counter(), time.process_time()
    h = build_graph(model, tcs, tokens, heads=True)
    with_heads, with_heads_cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "n_tokens": len(tokens),
        "seconds": plain,
        "seconds_with_heads": with_heads,
        "cpu_seconds": plain_cpu,
        "cpu_seconds_with_heads": with_heads_cpu,
        "active": g.n_active,
        "rows": g.n_features,
        "kept_edges": int(g.pruned.edge_mask.sum()),
        "split_edges": int(h.heads["edges"].shape[0]),
        "graph_peak_mb_above_start": peak,
    }


def circuit_mode(cfg, model, tcs):
    from workbench.circuits.feature_circuit import find_feature_circuit
    from workbench.corpus import tasks

    out = []
    for q in tasks.queries(cfg["task"], cfg["n"], seed=cfg["seed"], tokenizer=model.tokenizer):
        t0, c0 = time.perf_counter(), time.process_time()
        c, g = find_feature_circuit(model, tcs, q, target_ndf=cfg["target_ndf"], n_samples=cfg["samples"])
        out.append(
            {
                "seconds": time.perf_counter() - t0,
                "cpu_seconds": time.process_time() - c0,
                "n_tokens": len(c.query["tokens"]),
                "nodes": len(c.nodes),
                "universe": c.universe["nodes"],
                "edges": len(c.edges),
                "ndf": c.ndf,
                "topk_ndf": c.faithfulness["baseline_topk_ndf"],
                "replacement": c.graph_scores["replacement"],
            }
        )
    return {"queries": out}


def main():
    cfg = common.load_config()
    from workbench.circuits.replacement import load_transcoders
    from workbench.models import load

    model, _ = load(cfg["model"], device="cpu")
    tcs = load_transcoders(cfg["transcoders"])
    result = {"graph": graph_mode, "circuit": circuit_mode}[cfg["mode"]](cfg, model, tcs)
    common.emit({**result, "peak_rss_mb": common.rss_mb()})


if __name__ == "__main__":
    main()
