"""`workbench demo`: the whole workbench on the embedded model, offline, at demo scale.

A list of steps (workbench.steps), each recording its artifact in the workspace: a cache of every
residual stream and MLP output -> a Top-k, a Matryoshka, a block-sparse and a Top-k + scaffold SAE on
the middle layer, evaluated, with their feature stores -> sparse-attention post-training (few steps:
demo scale, not the sparsify defaults) -> query circuits for the first queries of each task family in
the base and the sparse model, and `attention compare` per family. Every step is skipped when its
artifact is complete in the workspace (its manifest is written last), and the interrupted one resumes
from its checkpoint, so rerunning after an interruption continues where it stopped.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from workbench import steps
from workbench.cache.config import HarvestConfig
from workbench.configcheck import check_minimums, to_json
from workbench.errors import UserError
from workbench.sae.config import SAEConfig, TrainConfig
from workbench.workspace import MANIFEST, Workspace

DEMO_HOOK = "blocks.2.hook_resid_post"
DEMO_HOOKS = ("blocks.*.hook_resid_post", "blocks.*.hook_mlp_out")
DEMO_SAES = (
    SAEConfig(architecture="topk", k=16, expansion=8),
    SAEConfig(architecture="matryoshka", k=16, expansion=8),
    SAEConfig(architecture="block_topk", expansion=8, block_size=4, n_active_blocks=4),
    SAEConfig(architecture="topk", k=16, expansion=8, scaffold_rank=8, name="topk-scaffold"),
)
CACHE, SPARSE = "tiny-synthetic", "tiny-sparse"
SAE_BATCH = 2048  # tokens per step of the demo's SAEs


@dataclass
class DemoConfig:
    """Demo-scale sizes: every step of the workbench in minutes on two CPU cores."""

    cache_tokens: int = field(
        default=200_000, metadata={"min": 1, "help": "activation rows in the cache (train + held-out)"}
    )
    sae_tokens: int = field(default=1_000_000, metadata={"min": 1, "help": "training tokens per SAE"})
    sparsify_steps: int = field(
        default=300, metadata={"min": 1, "help": "sparse-attention post-training steps (demo scale)"}
    )
    sparsify_eval_every: int = field(
        default=50, metadata={"min": 1, "help": "steps between held-out checks of the constraint"}
    )
    sparsify_eval_sequences: int = field(default=32, metadata={"min": 1, "help": "held-out sequences of each check"})
    report_queries: int = field(
        default=40, metadata={"min": 1, "help": "queries per family for the sparse model's accuracy"}
    )
    queries: int = field(default=1, metadata={"min": 1, "help": "query circuits per task family, in each model"})
    compare_queries: int = field(
        default=1, metadata={"min": 1, "help": "queries per task family for `attention compare`"}
    )
    target_ndf: float = field(default=0.8, metadata={"help": "NDF the circuits of both models reach (equal NDF)"})
    samples: int = field(default=2, metadata={"help": "paraphrases and resampled counterfactuals per query"})
    tasks: str = field(
        default="ioi,induction,greater_than,addition,facts", metadata={"help": "task families, comma separated"}
    )

    def __post_init__(self):
        """Token counts too small for one SAE batch would fail only after the cache is harvested."""
        from workbench.errors import BadValueError

        check_minimums(self, BadValueError)
        train_share = 1 - HarvestConfig().heldout_fraction
        need = math.ceil(2 * SAE_BATCH / train_share)  # two batches of train rows: the sampler drops a few
        if self.cache_tokens < need:
            raise BadValueError(
                f"cache_tokens={self.cache_tokens} is too few for the demo's SAEs, whose batches take {SAE_BATCH} "
                f"train rows: --cache-tokens must be at least {need} ({train_share:.0%} of it is train); "
                "raise --cache-tokens"
            )
        if self.sae_tokens < SAE_BATCH:
            raise BadValueError(
                f"sae_tokens={self.sae_tokens} is less than one SAE batch: --sae-tokens must be at least "
                f"{SAE_BATCH}; raise --sae-tokens"
            )

    def families(self) -> list[str]:
        from workbench.corpus import tasks
        from workbench.errors import BadValueError

        out = [t.strip() for t in self.tasks.split(",") if t.strip()]
        bad = [t for t in out if t not in tasks.QUERY_TASKS]
        if bad or not out:
            raise BadValueError(f"demo tasks {bad or self.tasks!r} unknown; valid: {', '.join(tasks.QUERY_TASKS)}")
        return out

    def to_dict(self) -> dict:
        return to_json(self)


def _done(folder: Path) -> bool:
    return (folder / MANIFEST).is_file()


def run_demo(root: Path, cfg: DemoConfig | None = None, overwrite: bool = False, progress: bool = True) -> dict:
    """Run (or continue) the demo in `root`; returns a summary with the wall time of each step."""
    from workbench.attention.config import SparsifyConfig
    from workbench.cache import ActivationCache
    from workbench.corpus import tasks
    from workbench.models import load, model_id

    cfg = cfg or DemoConfig()
    families = cfg.families()
    ws = Workspace(root)
    if overwrite:
        ws.clear()
    t0 = time.time()
    model, tok = load("tiny", device="cpu")
    summary: dict = {"model": model_id(model), "config": cfg.to_dict(), "seconds": {}, "skipped": []}

    def log(text: str) -> None:
        print(f"[{time.time() - t0:5.0f}s] {text}", flush=True)

    def step(name: str, done: bool, run) -> object:
        """Run one step unless its artifacts are complete; time it."""
        if done:
            log(f"{name}: complete in the workspace, skipped")
            summary["skipped"].append(name)
        s = time.time()
        out = run(done)
        summary["seconds"][name] = round(time.time() - s, 1)
        return out

    # 1. the cache
    cache_dir = ws.path("caches", CACHE)

    def make_cache(done):
        if done:
            return ActivationCache.open(cache_dir)
        log("cache: harvesting every residual stream and MLP output")
        return steps.make_cache(
            ws,
            "tiny",
            "synthetic",
            DEMO_HOOKS,
            HarvestConfig(n_tokens=cfg.cache_tokens),
            name=CACHE,
            progress=progress,
            model=model,
            resume=(cache_dir / "progress.json").is_file() or (cache_dir / "manifest.json").is_file(),
        )

    cache = step("cache", _done(cache_dir), make_cache)
    log(f"cache: {cache.n_tokens('train'):,} + {cache.n_tokens('heldout'):,} tokens x {len(cache.hooks)} hooks")

    # 2. four SAEs on one hook, trained side by side on one batch stream, then evaluated
    run_dir = ws.path("saes", steps.slug(DEMO_HOOK))
    trained = sorted(p.parent for p in run_dir.glob(f"*/{MANIFEST}"))

    def train(done):
        if done:
            return trained
        log(f"saes: training {len(DEMO_SAES)} SAEs on {DEMO_HOOK}")
        return steps.train_saes(
            ws,
            cache.path,
            DEMO_HOOK,
            list(DEMO_SAES),
            TrainConfig(n_tokens=cfg.sae_tokens, batch_size=SAE_BATCH, lr=1e-3, progress=progress),
            name=run_dir.name,
            resume=(run_dir / "checkpoint.pt").is_file(),
        )

    folders = step("saes", len(trained) == len(DEMO_SAES), train)

    def evaluate(done):
        out = {}
        for folder in folders:
            if _evaluated(folder):
                continue
            m = steps.evaluate_sae(ws, folder, cache.path, "tiny")
            rec, splice = m["reconstruction"], m["splice"]
            log(
                f"sae {folder.name}: FVU {rec['fvu']:.3f}, L0 {rec['l0']:.1f}, "
                f"CE loss recovered {splice['ce_loss_recovered']:.3f}"
            )
            out[folder.name] = m
        return out

    summary["saes"] = step("sae eval", all(_evaluated(f) for f in folders), evaluate)

    def features(done):
        pending = [f for f in folders if not _done(f / "features")]
        for store in steps.build_features(ws, pending, cache.path, "tiny", progress=progress) if pending else []:
            m = store.manifest
            log(f"features {m['sae']}: {m['n_units']} {m['unit']}s over {m['n_rows']:,} held-out tokens")

    step("features", all(_done(f / "features") for f in folders), features)

    # 3. sparse attention (demo scale)
    sparse_dir = ws.path("models", SPARSE)

    def sparsify(done):
        if not done:
            log(f"attention: post-training gates for {cfg.sparsify_steps} steps (demo scale)")
            steps.sparsify_attention(
                ws,
                "tiny",
                SparsifyConfig(
                    steps=cfg.sparsify_steps,
                    eval_every=cfg.sparsify_eval_every,
                    eval_sequences=cfg.sparsify_eval_sequences,
                    checkpoint_every=cfg.sparsify_eval_every,
                    progress=progress,
                ),
                name=SPARSE,
                resume=(sparse_dir / "checkpoint.pt").is_file(),
                report_queries=cfg.report_queries,
            )
        from workbench.attention.report import read_report

        r = read_report(sparse_dir)
        log(
            f"attention: {r['open_fraction']:.1%} of causal edges open, held-out CE {r['ce']['base']:.4f} -> "
            f"{r['ce']['sparse']:.4f} (constraint {'met' if r['constraint_met'] else 'NOT met'} at demo scale)"
        )
        return r

    report = step("sparse attention", _done(sparse_dir), sparsify)
    sparse, _ = load(str(sparse_dir), device="cpu")

    # 4. query circuits in both models, at equal NDF
    summary["circuits"] = {}

    def circuits(done):
        for task in families:
            for i, q in enumerate(tasks.queries(task, cfg.queries, seed=0, tokenizer=tok)):
                for m, spec, suffix in ((model, "tiny", ""), (sparse, str(sparse_dir), "-sparse")):
                    name = f"{task}-{i}{suffix}"
                    if _done(ws.path("circuits", name)):
                        continue
                    try:
                        c, _ = steps.find_circuit(
                            ws, m, q, model_spec=spec, target_ndf=cfg.target_ndf, n_samples=cfg.samples, name=name
                        )
                    except UserError as e:  # a query without a gap on this model: say so, go on
                        log(f"circuit {name}: skipped ({e})")
                        continue
                    summary["circuits"][name] = {"ndf": c.ndf, "edges": c.n_edges}
                    log(f"circuit {name}: {c.n_edges} edges, NDF {c.ndf:.3f}")

    names = [f"{t}-{i}{s}" for t in families for i in range(cfg.queries) for s in ("", "-sparse")]
    step("circuits", all(_done(ws.path("circuits", n)) for n in names), circuits)

    def compare(done):
        for task in families:
            if not (sparse_dir / "compare" / f"{task}.json").is_file():
                res = steps.compare_attention(
                    ws, model, sparse, sparse_dir, task, cfg.compare_queries, n_samples=cfg.samples, progress=progress
                )
                log(f"compare {task}: {res['n_used']}/{res['n']} queries with a gap on both models")

    step(
        "compare",
        all((sparse_dir / "compare" / f"{t}.json").is_file() for t in families),
        compare,
    )
    summary["open_fraction"] = report["open_fraction"]
    total = time.time() - t0
    summary["seconds"]["total"] = round(total, 1)
    print(f"demo finished in {total:.0f}s; workspace: {root} ({len(ws.artifacts())} artifacts)")
    print("step seconds: " + ", ".join(f"{k} {v}" for k, v in summary["seconds"].items()))
    return summary


def _evaluated(folder: Path) -> bool:
    import json

    m = folder / MANIFEST
    return m.is_file() and "fvu" in json.loads(m.read_text()).get("summary", {})
