"""`workbench demo`: the whole workbench on the embedded model, offline, at demo scale.

A list of steps (workbench.steps), each recording its artifact in the workspace: a cache of the default hooks
(every residual stream, each MLP's input and output) -> a Top-k, a Matryoshka, a block-sparse and a Top-k +
scaffold SAE on the middle layer, evaluated, with their feature stores -> a Top-k transcoder set (one transcoder
per layer, from the MLP's normalised input to its output), evaluated with every MLP replaced at once, with its
feature stores -> template explanations of every feature store, scored (detection, fuzzing), so the app opens with
meanings on feature pages, search and graph node labels -> a short sparse-attention post-training run (few steps:
demo scale, to show the trainer) -> the embedded sparse model data/models/tiny-sparse (the full run, with its
verdict) copied into the workspace -> query circuits for the first queries of each task family in the base and that
sparse model, and `attention compare` per family -> for the first family's first query, an attribution graph and a
feature circuit through the transcoder set, each checked by interventions, and one steering example per SAE and for
the set (workbench.demo.examples). Every step is skipped when its artifact is complete in the workspace
(its manifest is written last), and the interrupted one resumes from its checkpoint, so rerunning after an
interruption continues where it stopped.
"""

from __future__ import annotations

import time
from pathlib import Path

from workbench.attention.config import SparsifyConfig
from workbench.cache.config import HarvestConfig
from workbench.cache.hooks import default_hooks
from workbench.corpus import tasks
from workbench.demo.config import (
    CACHE,
    DEMO_HOOK,
    DEMO_SAES,
    DEMO_TRANSCODER,
    SAE_BATCH,
    SPARSE,
    SPARSE_RUN,
    TRANSCODERS,
    DemoConfig,
)
from workbench.demo.examples import demo_examples
from workbench.dictionaries import kinds
from workbench.errors import BadValueError, UserError
from workbench.features.explain import ExplainConfig
from workbench.features.explanations import summary
from workbench.features.store import FeatureStore
from workbench.models import load
from workbench.provenance import model_id
from workbench.sae.config import TrainConfig
from workbench.sae.scores import shown
from workbench.steps.artifacts import slug
from workbench.steps.attention import compare_attention, embedded_sparse_model, train_attention
from workbench.steps.cache import make_cache
from workbench.steps.circuits import find_circuit
from workbench.steps.dictionaries import evaluate_sae, train_saes, train_transcoder_set
from workbench.steps.features import build_features, explain_features
from workbench.workspace import Workspace


class DemoSteps:
    """Runs the demo's steps one after another, timing each and logging from the demo's start; a step that
    recorded nothing new in the workspace (every artifact it makes was complete) is counted as skipped."""

    def __init__(self, ws: Workspace, summary: dict):
        self.ws, self.summary, self.t0 = ws, summary, time.time()

    def log(self, text: str) -> None:
        print(f"[{time.time() - self.t0:5.0f}s] {text}", flush=True)

    def __call__(self, name: str, run):
        before, start = self._manifests(), time.time()
        out = run()
        self.summary["seconds"][name] = round(time.time() - start, 1)
        if self._manifests() == before:
            self.log(f"{name}: complete in the workspace, skipped")
            self.summary["skipped"].append(name)
        return out

    def _manifests(self) -> dict:
        return {a.path: a.manifest for a in self.ws.artifacts()}


def run_demo(root: Path, cfg: DemoConfig | None = None, overwrite: bool = False, progress: bool = True) -> dict:
    """Run (or continue) the demo in `root`; returns a summary with the wall time of each step."""
    cfg = cfg or DemoConfig()
    families = cfg.families()
    ws = Workspace(root)
    if overwrite:
        for s in ws.clear():
            print(f"left in place (not the workbench's to remove): {s}")
    model, tok = load("tiny", device="cpu")
    summary: dict = {"model": model_id(model), "config": cfg.to_dict(), "seconds": {}, "skipped": []}
    step = DemoSteps(ws, summary)
    harvest = HarvestConfig(n_tokens=cfg.cache_tokens)
    cache = step(
        "cache",
        lambda: make_cache(
            ws, "tiny", "synthetic", None, harvest, name=CACHE, progress=progress, model=model, ensure=True
        ),
    )
    _check_cache(cache, model)
    step.log(f"cache: {cache.n_tokens('train'):,} + {cache.n_tokens('heldout'):,} tokens x {len(cache.hooks)} hooks")
    train = TrainConfig(n_tokens=cfg.sae_tokens, batch_size=SAE_BATCH, lr=1e-3, progress=progress)
    run = slug(DEMO_HOOK)
    folders = step("saes", lambda: train_saes(ws, cache.path, DEMO_HOOK, list(DEMO_SAES), train, name=run, ensure=True))
    summary["saes"] = step("sae eval", lambda: _evaluate(ws, folders, cache.path, step.log))
    step("features", lambda: build_features(ws, folders, cache.path, "tiny", progress=progress, ensure=True))
    tc_train = TrainConfig(n_tokens=cfg.transcoder_tokens, batch_size=SAE_BATCH, lr=1e-3, progress=progress)
    summary["transcoders"] = step("transcoders", lambda: _transcoders(ws, cache.path, tc_train, progress, step.log))
    summary["explanations"] = step("explain", lambda: _explain(ws, progress, step.log))
    sparsify = SparsifyConfig(
        steps=cfg.sparsify_steps,
        eval_every=cfg.sparsify_eval_every,
        eval_sequences=cfg.sparsify_eval_sequences,
        checkpoint_every=cfg.sparsify_eval_every,
        progress=progress,
    )
    run = step(
        "sparse attention",
        lambda: train_attention(ws, "tiny", sparsify, name=SPARSE_RUN, report_queries=cfg.report_queries, ensure=True),
    )[0]
    step.log(
        f"attention, demo-scale run: {run['mean_open_keys_per_query']:.2f} open keys per query per head, held-out "
        f"CE {run['ce']['base']:.4f} -> {run['ce']['sparse']:.4f} (constraint {_met(run)} at demo scale)"
    )
    report, sparse_dir = step("sparse model", lambda: embedded_sparse_model(ws, SPARSE, ensure=True))
    step.log(
        f"attention, embedded {SPARSE}: {report['mean_open_keys_per_query']:.2f} open keys per query per head "
        f"({report['open_fraction']:.2%} at T = {report['ctx_len']}), constraint {_met(report)} on the fresh split"
    )
    sparse, _ = load(str(sparse_dir), device="cpu")
    models = ((model, "tiny", ""), (sparse, str(sparse_dir), "-sparse"))
    summary["circuits"] = step("circuits", lambda: _circuits(ws, cfg, families, models, tok, step.log))
    query = tasks.queries(families[0], 1, seed=0, tokenizer=tok)[0]
    tc_dir = ws.path(kinds.TRANSCODERS.workspace, TRANSCODERS)
    summary["interventions"] = step("interventions", lambda: demo_examples(ws, model, query, tc_dir, folders, step.log))
    step("compare", lambda: _compare(ws, cfg, families, model, sparse, sparse_dir, progress, step.log))
    summary["open_fraction"] = report["open_fraction"]
    total = time.time() - step.t0
    summary["seconds"]["total"] = round(total, 1)
    print(f"demo finished in {total:.0f}s; workspace: {root} ({len(ws.artifacts())} artifacts)")
    print("step seconds: " + ", ".join(f"{k} {v}" for k, v in summary["seconds"].items()))
    return summary


def _met(report: dict) -> str:
    return "met" if report["constraint_met"] else "NOT met"


def _evaluate(ws: Workspace, folders: list[Path], cache_dir: Path, log) -> dict:
    """Evaluate every SAE not evaluated yet; returns each SAE's metrics."""
    out = {}
    for folder in folders:
        m = evaluate_sae(ws, folder, cache_dir, "tiny", ensure=True)
        rec, splice = m["reconstruction"], m["splice"]
        log(
            f"sae {folder.name}: FVU {rec['fvu']:.3f}, L0 {rec['l0']:.1f}, CE loss recovered "
            f"{shown(splice, 'ce_loss_recovered', '.3f')}"
        )
        out[folder.name] = m
    return out


def _check_cache(cache, model) -> None:
    """A cache an older demo harvested (before the transcoder set) lacks each MLP's input: say so before training."""
    missing = [h for h in default_hooks(model) if h not in cache.hooks]
    if missing:
        raise BadValueError(
            f"the demo's cache {cache.path} lacks {missing[0]}"
            + (f" and {len(missing) - 1} more hooks" if len(missing) > 1 else "")
            + " (harvested by an older demo, before the transcoder set): rerun with --overwrite"
        )


def _transcoders(ws: Workspace, cache_dir: Path, train: TrainConfig, progress: bool, log) -> dict:
    """The transcoder set (one per layer), evaluated with every MLP replaced at once, and its feature stores;
    returns the set's metrics."""
    folder, members = train_transcoder_set(
        ws, cache_dir, "all", [DEMO_TRANSCODER], train, name=TRANSCODERS, ensure=True
    )
    m = evaluate_sae(ws, folder, cache_dir, "tiny", ensure=True)
    for name, flat in m["members"].items():
        log(
            f"transcoder {name}: FVU {flat['fvu']:.3f}, L0 {flat['l0']:.1f}, CE recovered {shown(flat, 'ce_loss_recovered', '.3f')}"
        )
    for name, r in m["all_replaced"].items():
        log(f"transcoders {name}, every MLP replaced at once: CE loss recovered {shown(r, 'ce_loss_recovered', '.3f')}")
    build_features(ws, members, cache_dir, "tiny", progress=progress, ensure=True)
    return m


def _explain(ws: Workspace, progress: bool, log) -> dict:
    """Template explanations of every feature store in the workspace (the SAEs' and the transcoders'), scored by
    detection and fuzzing (no model runs); a store already explained is kept. Returns each store's summary."""
    root = ws.root.resolve()
    stores = [a.path for a in ws.artifacts("features") if a.path.resolve().is_relative_to(root)]
    explain_features(ws, stores, ExplainConfig(), ("detection", "fuzz"), ensure=True, progress=progress)
    out = {}
    for path in stores:
        said = out[ws.rel(path.parent)] = summary(FeatureStore(path))
        auc = shown(said, "mean_detection_auc", ".3f")
        log(
            f"explain {ws.rel(path.parent)}: {said['latents']} {said['explainer']} explanations, "
            f"mean detection AUC {auc}"
        )
    return out


def _compare(ws: Workspace, cfg: DemoConfig, families: list[str], model, sparse, sparse_dir: Path, progress, log):
    """`attention compare` per family, kept with the sparse model."""
    for task in families:
        res = compare_attention(
            ws,
            model,
            sparse,
            sparse_dir,
            task,
            cfg.compare_queries,
            n_samples=cfg.samples,
            progress=progress,
            ensure=True,
        )
        log(f"compare {task}: {res['n_used']}/{res['n']} queries with a gap on both models")


def _circuits(ws: Workspace, cfg: DemoConfig, families: list[str], models, tok, log) -> dict:
    """Query circuits for the first queries of each family in each model, at equal NDF; a query without a
    logit gap on a model is logged and skipped (and tried again on the next run)."""
    out = {}
    for task in families:
        for i, q in enumerate(tasks.queries(task, cfg.queries, seed=0, tokenizer=tok)):
            for model, spec, suffix in models:
                name = f"{task}-{i}{suffix}"
                try:
                    c, _ = find_circuit(
                        ws,
                        model,
                        q,
                        model_spec=spec,
                        target_ndf=cfg.target_ndf,
                        n_samples=cfg.samples,
                        name=name,
                        ensure=True,
                    )
                except UserError as e:
                    log(f"circuit {name}: skipped ({e})")
                    continue
                out[name] = {"ndf": c.ndf, "edges": c.n_edges}
                log(f"circuit {name}: {c.n_edges} edges, NDF {c.ndf:.3f}")
    return out
