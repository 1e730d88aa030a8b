"""The transcoder issue's "results must show" experiments on the embedded model, reproducible in one command.

    OMP_NUM_THREADS=1 .venv/bin/python bench/sae/transcoder_quality.py
    .venv/bin/python bench/sae/transcoder_quality.py --quick   # every stage at tiny sizes (a few minutes)

1. a cache with the default hooks (every residual stream, each MLP's input and output) of the embedded model
   over the synthetic corpus (once, under bench/work/transcoders/);
2. one transcoder set over all layers (Top-k and Matryoshka at L0 16, each with and without a skip path) on
   ONE pass over the cache, and residual-stream SAEs (the same two architectures, hook_resid_post of every
   layer) on a second pass;
3. the set evaluated on held-out tokens: per-layer FVU of the MLP output, CE recovered with that MLP replaced,
   and with every MLP replaced at once; dead/dense latents; then feature stores of every dictionary on the
   held-out split for the share of latents whose best ground-truth label has precision >= 0.8;
4. bench/results/transcoders.md. Stages whose outputs exist are not redone (a rerun resumes).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

from workbench.sae import SAEConfig, TrainConfig  # noqa: E402

OUT = harness.BENCH / "results" / "transcoders.md"
L0, N, PREFIXES = 16, 1024, [64, 128, 256, 512, 1024]
PRECISION = 0.8


def configs() -> list[SAEConfig]:
    return [
        SAEConfig("topk", k=L0, n_latents=N),
        SAEConfig("matryoshka", k=L0, n_latents=N, prefixes=PREFIXES),
        SAEConfig("topk", k=L0, n_latents=N, skip=True),
        SAEConfig("matryoshka", k=L0, n_latents=N, prefixes=PREFIXES, skip=True),
    ]


def stage(name: str, done: bool, timings: dict, fn) -> None:
    if done:
        print(f"{name}: done before, skipped", flush=True)
        return
    t0 = time.time()
    fn()
    timings[name] = round(time.time() - t0)
    print(f"{name}: {timings[name]} s", flush=True)


def dictionaries(folder: Path) -> list[Path]:
    """The saved dictionaries under a run folder (a set's members, or the residual SAEs)."""
    return sorted(p for p in folder.iterdir() if (p / "cfg.json").is_file()) if folder.is_dir() else []


def _all_have(folder: Path, name: str) -> bool:
    found = dictionaries(folder)
    return bool(found) and all((p / name).is_file() for p in found)


def run(args, timings: dict) -> None:
    """Every stage in turn: the label-share comparison (training and feature stores) before the evaluations, so a
    run stopped early has it; the report is rewritten after each stage."""
    from workbench.cache.config import HarvestConfig
    from workbench.features.build import build_stores
    from workbench.features.config import FeatureConfig
    from workbench.sae.config import EvalConfig
    from workbench.sae.eval import evaluate, evaluate_set
    from workbench.sae.trainer import fit_cache
    from workbench.sae.transcoders import started, train_set
    from workbench.steps.cache import make_cache
    from workbench.workspace import Workspace

    w = args.work
    cache, tset, resid = w / "cache", w / "set", w / "resid"
    tc = TrainConfig(n_tokens=args.tokens, batch_size=1024, lr=1e-3, warmup_steps=50, progress=False)
    ev = EvalConfig(max_tokens=20_000, n_sequences=args.sequences)
    hc = HarvestConfig(n_tokens=args.cache_tokens)
    fc = FeatureConfig(split="heldout")
    resid_names = {layer: [f"L{layer}-resid-{c.architecture}" for c in configs()[:2]] for layer in range(4)}
    groups = [
        (f"blocks.{layer}.hook_resid_post", None, [replace(c, name=n) for c, n in zip(configs(), resid_names[layer])])
        for layer in range(4)
    ]
    stages = [
        (
            "harvest",
            (cache / "manifest.json").is_file(),
            lambda: make_cache(Workspace(w / "ws"), "tiny", "synthetic", None, hc, out=cache, progress=False),
        ),
        (
            "train set",
            (tset / "transcoders.json").is_file(),
            lambda: train_set(cache, "all", configs(), tc, tset, resume=started(tset)),
        ),
        (
            "features set",
            lambda: _all_have(tset, "features/manifest.json"),
            lambda: build_stores(dictionaries(tset), cache, "tiny", fc, progress=False),
        ),
        (
            "train residual SAEs",
            all((resid / n / "cfg.json").is_file() for ns in resid_names.values() for n in ns),
            lambda: fit_cache(cache, groups, tc, resid, resume=(resid / "checkpoint.pt").is_file()),
        ),
        (
            "features residual SAEs",
            lambda: _all_have(resid, "features/manifest.json"),
            lambda: build_stores(dictionaries(resid), cache, "tiny", fc, progress=False),
        ),
        ("eval set", (tset / "metrics.json").is_file(), lambda: evaluate_set(tset, cache, "tiny", ev)),
        (
            "eval residual SAEs",
            lambda: _all_have(resid, "metrics.json"),
            lambda: [evaluate(p, cache, "tiny", ev) for p in dictionaries(resid)],
        ),
    ]
    for name, done, fn in stages:
        stage(name, done() if callable(done) else done, timings, fn)
        if name not in ("harvest", "train set"):
            harness.write_text(args.out, report(args, timings))


def label_share(folder: Path) -> float | None:
    """Share of the latents that fired whose best ground-truth label has precision >= PRECISION (held-out split)."""
    import pyarrow.parquet as pq

    p = folder / "features" / "units.parquet"
    if not p.is_file():
        return None
    t = pq.read_table(p, columns=["count", "label_precision"]).to_pandas()
    fired = t[t["count"] > 0]
    return float((fired["label_precision"] >= PRECISION).mean()) if len(fired) else 0.0


def _fmt(v, spec: str) -> str:
    return "–" if v is None else format(v, spec)


def _json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def report(args, timings: dict) -> str:
    """The results so far: a stage not run yet leaves its columns '–' and says so."""
    tset, resid = args.work / "set", args.work / "resid"
    manifest = json.loads((tset / "transcoders.json").read_text())
    out = [
        "# Transcoders on the embedded model",
        "",
        f"- Commit: {args.commit} (when the run started)",
        f"- Date: {args.date}; command: `OMP_NUM_THREADS=1 .venv/bin/python bench/sae/transcoder_quality.py` "
        f"({', '.join(f'{k} {v} s' for k, v in timings.items()) or 'every stage from an earlier run'})",
        f"- Data: the embedded model over the synthetic corpus, {args.cache_tokens:,} cached tokens (5% held out) with the "
        f"default hooks. Each transcoder reads `blocks.L.ln2.hook_normalized` (the normalised residual the MLP "
        f"reads) and reconstructs `blocks.L.hook_mlp_out`; all {len(manifest['layers']) * len(configs())} "
        f"transcoders of the set train side by side on one pass over the cache, {args.tokens:,} tokens each "
        "(batch 1024, Adam lr 0.001, 50 warm-up steps, linear decay over the last 20%), AuxK on the output residual.",
        f"- Held-out evaluation on {min(20_000, args.cache_tokens // 20):,} tokens (FVU of the MLP output, L0, dead = never fired on them, dense "
        f"= fires on more than 10% of them); CE recovered = (CE with the MLP zeroed − CE with the transcoder) / "
        f"(CE with the MLP zeroed − clean CE) on {args.sequences} held-out sequences, per layer and with every "
        "layer's MLP replaced at once (zero ablation then zeroes every MLP).",
        f"- Label share: of the latents that fire on the held-out split, the share whose best ground-truth label "
        f"(the corpus's role/entity/task labels, from the feature store) has precision >= {PRECISION}.",
        "",
    ]
    sm = _json(tset / "metrics.json")
    out += per_layer(tset, manifest, sm.get("members", {})) + all_replaced(sm.get("all_replaced"))
    out += residual_section(resid) + comparison(tset, resid)
    return "\n".join(out) + "\n"


def per_layer(tset: Path, manifest: dict, metrics: dict) -> list[str]:
    head = ["transcoder", "FVU (MLP out)", "L0", "dead", "dense", "CE recovered (this MLP)", "KL score", "labels ≥ 0.8"]
    body = []
    for e in manifest["layers"]:
        for name in e["transcoders"]:
            m = metrics.get(name, {})
            cells = [("fvu", ".3f"), ("l0", ".1f"), ("n_dead", "d"), ("n_dense", "d")]
            cells += [("ce_loss_recovered", ".4f"), ("kl_score", ".4f")]
            body.append([name, *(_fmt(m.get(k), f) for k, f in cells), _fmt(label_share(tset / name), ".3f")])
    note = [] if metrics else ["", "(the set's evaluation has not run yet: only the label share is filled in)"]
    return ["## Per layer", "", *harness.table(head, body), *note]


def all_replaced(metrics: dict | None) -> list[str]:
    out = ["", "## Every MLP replaced at once", ""]
    if not metrics:
        return out + ["(the set's evaluation has not run yet)"]
    keys = ("ce_clean", "ce_sae", "ce_zero_ablation", "ce_loss_recovered", "kl_score")
    rows = [
        [k, *(f"{v[c]:.4f}" for c in keys), "met" if v["ce_loss_recovered"] >= 0.9 else "missed"]
        for k, v in metrics.items()
    ]
    head = ["set member config", "CE clean", "CE replaced", "CE all MLPs zeroed", "CE recovered", "KL score"]
    return out + harness.table([*head, "goal ≥ 0.9"], rows)


def residual_section(resid: Path) -> list[str]:
    out = ["", "## Residual-stream SAEs on the same layers (hook_resid_post, same training)", ""]
    body = []
    for p in dictionaries(resid):
        m = _json(p / "metrics.json")
        r, s = m.get("reconstruction", {}), m.get("splice", {})
        cells = [_fmt(r.get("fvu"), ".3f"), _fmt(r.get("l0"), ".1f"), _fmt(r.get("n_dead"), "d")]
        cells += [_fmt(r.get("n_dense"), "d"), _fmt(s.get("ce_loss_recovered"), ".4f")]
        body.append([p.name, *cells, _fmt(label_share(p), ".3f")])
    if not body:
        return out + ["(not trained yet)"]
    return out + harness.table(["SAE", "FVU (residual)", "L0", "dead", "dense", "CE recovered", "labels ≥ 0.8"], body)


def comparison(tset: Path, resid: Path) -> list[str]:
    """Label share per layer and architecture: the transcoder (no skip path) beside the residual SAE."""
    archs = [c.architecture for c in configs()[:2]]
    rows = []
    for layer in range(4):
        cells = []
        for arch in archs:
            tc = next(
                (p for p in dictionaries(tset) if p.name.startswith(f"L{layer}-{arch}_") and "_skip" not in p.name),
                None,
            )
            cells += [
                _fmt(label_share(tc) if tc else None, ".3f"),
                _fmt(label_share(resid / f"L{layer}-resid-{arch}"), ".3f"),
            ]
        rows.append([layer, *cells])
    head = ["layer"] + [f"{a} {side}" for a in archs for side in ("transcoder", "residual SAE")]
    return [
        "",
        "## Label share ≥ 0.8: transcoders against residual-stream SAEs (held-out split)",
        "",
        *harness.table(head, rows),
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, help="stage outputs (default: bench/work/transcoders[-quick])")
    p.add_argument("--tokens", type=int, default=2_000_000, help="training tokens per dictionary")
    p.add_argument("--cache-tokens", type=int, default=1_050_000, help="cached tokens (train + 5%% held out)")
    p.add_argument("--sequences", type=int, default=128, help="held-out sequences for the CE metrics")
    p.add_argument("--quick", action="store_true", help="4,096 tokens per dictionary from a 21,000-token cache")
    harness.add_common_args(p, OUT, threads=1)
    args = p.parse_args()
    if args.quick:
        args.tokens, args.cache_tokens, args.sequences = 4096, 21_000, 4
    args.work = args.work or harness.WORK / ("transcoders-quick" if args.quick else "transcoders")
    harness.set_threads(args.threads)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)  # the stages run in this process
    args.commit = harness.commit()
    args.date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    args.work.mkdir(parents=True, exist_ok=True)
    timings: dict = {}
    run(args, timings)
    harness.write_text(args.out, report(args, timings))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
