"""`workbench demo`: the whole workbench on the embedded model, offline, in a few minutes.

A list of steps (workbench.steps), each recording its artifact in the workspace: a cache of every
residual stream and MLP output -> a Top-k SAE and a Matryoshka SAE with a scaffold on the middle
layer, evaluated, with their feature stores -> query circuits for an IOI and an induction query, with
MIB and Neuronpedia exports.
"""

from __future__ import annotations

import time
from pathlib import Path

from workbench import steps
from workbench.cache.config import HarvestConfig
from workbench.errors import OutputExistsError
from workbench.sae.config import SAEConfig, TrainConfig
from workbench.workspace import Workspace

DEMO_HOOK = "blocks.2.hook_resid_post"
DEMO_HOOKS = ("blocks.*.hook_resid_post", "blocks.*.hook_mlp_out")
DEMO_SAES = (
    SAEConfig(architecture="topk", k=16, expansion=8),
    SAEConfig(architecture="matryoshka", k=16, expansion=8, scaffold_rank=8),
)


def run_demo(
    root: Path, overwrite: bool = False, progress: bool = True, cache_tokens: int = 200_000, sae_tokens: int = 1_000_000
) -> dict:
    from workbench.corpus import tasks
    from workbench.models import load, model_id

    ws = Workspace(root)
    if root.exists() and any(root.iterdir()):
        if not overwrite:
            raise OutputExistsError(
                f"workspace {root} already exists and is not empty; pass --overwrite to remove "
                "what the workbench made there"
            )
        ws.clear()
    t0 = time.time()
    model, tok = load("tiny", device="cpu")
    summary: dict = {"model": model_id(model)}

    def log(text: str) -> None:
        print(f"[{time.time() - t0:5.0f}s] {text}")

    cache = steps.make_cache(
        ws,
        "tiny",
        "synthetic",
        DEMO_HOOKS,
        HarvestConfig(n_tokens=cache_tokens),
        name="tiny-synthetic",
        progress=progress,
        model=model,
    )
    log(
        f"cache: {cache.n_tokens('train'):,} + {cache.n_tokens('heldout'):,} tokens x {len(cache.hooks)} hooks "
        f"-> {cache.path}"
    )

    folders = steps.train_saes(
        ws,
        cache.path,
        DEMO_HOOK,
        list(DEMO_SAES),
        TrainConfig(n_tokens=sae_tokens, batch_size=2048, lr=1e-3, progress=progress),
        name=steps.slug(DEMO_HOOK),
    )
    summary["saes"] = {}
    for folder in folders:
        metrics = steps.evaluate_sae(ws, folder, cache.path, "tiny")
        summary["saes"][folder.name] = metrics
        rec, splice = metrics["reconstruction"], metrics["splice"]
        log(
            f"sae {folder.name}: FVU {rec['fvu']:.3f}, L0 {rec['l0']:.1f}, "
            f"CE loss recovered {splice['ce_loss_recovered']:.3f}"
        )

    for store in steps.build_features(ws, folders, cache.path, "tiny", progress=progress):
        m = store.manifest
        log(f"features {m['sae']}: {m['n_units']} {m['unit']}s over {m['n_rows']:,} held-out tokens -> {store.path}")

    summary["circuits"] = {}
    for task in ("ioi", "induction"):
        q = tasks.queries(task, 1, seed=0, tokenizer=tok)[0]
        c, folder = steps.find_circuit(
            ws, model, q.prompt, q.answer, q.counterfactual, wrong=q.wrong, budget=0.05, name=f"{task}-0"
        )
        summary["circuits"][task] = {"ndf": c.ndf, "edges": c.n_edges, "fraction": c.fraction}
        log(f"circuit {task}: {' | '.join(c.summary().splitlines()[:2])} -> {folder}")
    print(f"demo finished in {time.time() - t0:.0f}s; workspace: {root} ({len(ws.artifacts())} artifacts)")
    return summary
