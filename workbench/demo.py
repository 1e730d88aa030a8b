"""`workbench demo`: the whole workbench on the embedded model, offline, in a few minutes.

cache (every residual stream + MLP out) -> a Top-k SAE and a Matryoshka SAE with a scaffold on the
middle layer, evaluated -> query circuits for an IOI and an induction query, exported to the
workbench, MIB and Neuronpedia JSON formats. Every step lands in the workspace with a manifest.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from workbench.workspace import Workspace

DEMO_HOOK = "blocks.2.hook_resid_post"


def run_demo(root: Path, overwrite: bool = False, progress: bool = True, cache_tokens: int = 200_000,
             sae_tokens: int = 1_000_000) -> dict:
    from workbench import circuits, sae
    from workbench.cache import harvest
    from workbench.corpus import load_corpus, tasks
    from workbench.models import load, model_id

    if root.exists() and any(root.iterdir()):
        if not overwrite:
            raise FileExistsError(f"workspace {root} already exists and is not empty; pass --overwrite to replace it")
        shutil.rmtree(root)
    ws = Workspace(root)
    t0 = time.time()
    model, tok = load("tiny", device="cpu")
    mid = model_id(model)
    summary: dict = {"model": mid}

    # 1. the shared activation cache
    cache_dir = ws.path("caches", "tiny-synthetic")
    hooks = [f"blocks.{i}.hook_resid_post" for i in range(model.cfg.n_layers)] + \
            [f"blocks.{i}.hook_mlp_out" for i in range(model.cfg.n_layers)]
    cache = harvest(model, load_corpus("synthetic", tok), hooks, cache_dir, n_tokens=cache_tokens, progress=progress)
    ws.record("caches", cache_dir.name, made_by="workbench cache", config=cache.manifest["config"],
              inputs={"model": mid, "corpus": "synthetic"},
              summary={"train_tokens": cache.n_tokens("train"), "heldout_tokens": cache.n_tokens("heldout")},
              checksums=False)
    print(f"[{time.time() - t0:5.0f}s] cache: {cache.n_tokens('train'):,} + {cache.n_tokens('heldout'):,} tokens x "
          f"{len(hooks)} hooks -> {cache_dir}")

    # 2. SAEs on the middle residual stream, trained side by side on one stream of batches
    cfgs = [sae.SAEConfig(architecture="topk", k=16, expansion=8),
            sae.SAEConfig(architecture="matryoshka", k=16, expansion=8, scaffold_rank=8)]
    train_cfg = sae.TrainConfig(n_tokens=sae_tokens, batch_size=2048, lr=1e-3, progress=progress)
    sae_root = ws.root / "saes"
    folders = sae.train(cache_dir, DEMO_HOOK, cfgs, train_cfg, sae_root)
    summary["saes"] = {}
    for folder in folders:
        metrics = sae.evaluate(folder, cache_dir, "tiny")
        summary["saes"][folder.name] = metrics
        rec, splice = metrics["reconstruction"], metrics["splice"]
        headline = {"fvu": rec["fvu"], "l0": rec["l0"], "dead_frac": rec["dead_frac"], "dense_frac": rec["dense_frac"],
                    "ce_loss_recovered": splice["ce_loss_recovered"], "kl_score": splice["kl_score"]}
        ws.record("saes", folder.name, made_by="workbench sae train", config={"hook": DEMO_HOOK},
                  inputs={"cache": str(cache_dir), "model": mid}, summary=headline)
        print(f"[{time.time() - t0:5.0f}s] sae {folder.name}: FVU {rec['fvu']:.3f}, L0 {rec['l0']:.1f}, "
              f"CE loss recovered {splice['ce_loss_recovered']:.3f}")

    # 3. query circuits with exports
    summary["circuits"] = {}
    for task in ("ioi", "induction"):
        q = tasks.queries(task, 1, seed=0, tokenizer=tok)[0]
        c = circuits.find_circuit(model, q.prompt, q.answer, q.counterfactual, wrong=q.wrong, budget=0.05)
        folder = ws.path("circuits", f"{task}-0")
        folder.mkdir(parents=True, exist_ok=True)
        c.save(folder / "circuit.json")
        c.to_mib(folder / "mib.json")
        c.to_neuronpedia(folder / "neuronpedia.json")
        ws.record("circuits", folder.name, made_by="workbench circuit find", config=c.method,
                  inputs={"model": mid, "prompt": q.prompt, "answer": q.answer, "counterfactual": q.counterfactual},
                  summary={"ndf": c.ndf, "nfs": c.nfs, "edges": c.n_edges, "fraction": c.fraction})
        summary["circuits"][task] = {"ndf": c.ndf, "edges": c.n_edges, "fraction": c.fraction}
        headline = " | ".join(c.summary().splitlines()[:2])
        print(f"[{time.time() - t0:5.0f}s] circuit {task}: {headline} -> {folder}")
    print(f"demo finished in {time.time() - t0:.0f}s; workspace: {root} ({len(ws.artifacts())} artifacts)")
    return summary
