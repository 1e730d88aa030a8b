"""The transcoder issue's "results must show" experiments on the embedded model, reproducible in one command.

    OMP_NUM_THREADS=1 .venv/bin/python bench/transcoder_quality.py

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

sys.path.insert(0, str(Path(__file__).resolve().parent))
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


def run(args, timings: dict) -> None:
    from workbench import steps
    from workbench.cache.config import HarvestConfig
    from workbench.features.build import build_stores
    from workbench.features.config import FeatureConfig
    from workbench.sae.config import EvalConfig
    from workbench.sae.eval import evaluate, evaluate_set
    from workbench.sae.trainer import fit_cache
    from workbench.sae.transcoders import train_set
    from workbench.workspace import Workspace

    w = args.work
    cache, tset, resid = w / "cache", w / "set", w / "resid"
    tc = TrainConfig(n_tokens=args.tokens, batch_size=1024, lr=1e-3, warmup_steps=50, progress=False)
    ev = EvalConfig(max_tokens=20_000, n_sequences=args.sequences)
    hc = HarvestConfig(n_tokens=args.cache_tokens)
    stage(
        "harvest",
        (cache / "manifest.json").is_file(),
        timings,
        lambda: steps.make_cache(Workspace(w / "ws"), "tiny", "synthetic", None, hc, out=cache, progress=False),
    )
    stage(
        "train set",
        (tset / "transcoders.json").is_file(),
        timings,
        lambda: train_set(cache, "all", configs(), tc, tset, resume=(tset / "checkpoint.pt").is_file()),
    )
    stage("eval set", (tset / "metrics.json").is_file(), timings, lambda: evaluate_set(tset, cache, "tiny", ev))
    members = sorted(p for p in tset.iterdir() if (p / "cfg.json").is_file())
    fc = FeatureConfig(split="heldout")
    done = all((p / "features" / "manifest.json").is_file() for p in members)
    stage("features set", done, timings, lambda: build_stores(members, cache, "tiny", fc, progress=False))
    harness.write_text(args.out, report(args, timings))  # the transcoders' results, before the comparison
    resid_names = {layer: [f"L{layer}-resid-{c.architecture}" for c in configs()[:2]] for layer in range(4)}
    groups = [
        (f"blocks.{layer}.hook_resid_post", None, [replace(c, name=n) for c, n in zip(configs(), resid_names[layer])])
        for layer in range(4)
    ]
    stage(
        "train residual SAEs",
        all((resid / n / "cfg.json").is_file() for ns in resid_names.values() for n in ns),
        timings,
        lambda: fit_cache(cache, groups, tc, resid, resume=(resid / "checkpoint.pt").is_file()),
    )
    resid_dirs = sorted(p for p in resid.iterdir() if (p / "cfg.json").is_file())
    stage(
        "eval residual SAEs",
        all((p / "metrics.json").is_file() for p in resid_dirs),
        timings,
        lambda: [evaluate(p, cache, "tiny", ev) for p in resid_dirs],
    )
    done = all((p / "features" / "manifest.json").is_file() for p in resid_dirs)
    stage("features residual SAEs", done, timings, lambda: build_stores(resid_dirs, cache, "tiny", fc, progress=False))


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


def report(args, timings: dict) -> str:
    tset, resid = args.work / "set", args.work / "resid"
    sm = json.loads((tset / "metrics.json").read_text())
    manifest = json.loads((tset / "transcoders.json").read_text())
    out = [
        "# Transcoders on the embedded model",
        "",
        f"- Commit: {args.commit} (when the run started)",
        f"- Date: {args.date}; command: `OMP_NUM_THREADS=1 .venv/bin/python bench/transcoder_quality.py` "
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
        "## Per layer",
        "",
    ]
    head = ["transcoder", "FVU (MLP out)", "L0", "dead", "dense", "CE recovered (this MLP)", "KL score", "labels ≥ 0.8"]
    body = []
    for e in manifest["layers"]:
        for name in e["transcoders"]:
            m = sm["members"][name]
            body.append(
                [
                    name,
                    f"{m['fvu']:.3f}",
                    f"{m['l0']:.1f}",
                    m["n_dead"],
                    m["n_dense"],
                    f"{m['ce_loss_recovered']:.4f}",
                    f"{m['kl_score']:.4f}",
                    _fmt(label_share(tset / name), ".3f"),
                ]
            )
    out += harness.table(head, body)
    out += ["", "## Every MLP replaced at once", ""]
    rows = [
        [
            k,
            f"{v['ce_clean']:.4f}",
            f"{v['ce_sae']:.4f}",
            f"{v['ce_zero_ablation']:.4f}",
            f"{v['ce_loss_recovered']:.4f}",
            f"{v['kl_score']:.4f}",
            "met" if v["ce_loss_recovered"] >= 0.9 else "missed",
        ]
        for k, v in sm["all_replaced"].items()
    ]
    out += harness.table(
        [
            "set member config",
            "CE clean",
            "CE replaced",
            "CE all MLPs zeroed",
            "CE recovered",
            "KL score",
            "goal ≥ 0.9",
        ],
        rows,
    )
    out += residual_section(resid)
    return "\n".join(out) + "\n"


def residual_section(resid: Path) -> list[str]:
    out = ["", "## Residual-stream SAEs on the same layers (hook_resid_post, same training)", ""]
    body = []
    for p in sorted(q for q in resid.iterdir() if (q / "metrics.json").is_file()) if resid.is_dir() else []:
        m = json.loads((p / "metrics.json").read_text())
        r, s = m["reconstruction"], m.get("splice", {})
        row = [p.name, f"{r['fvu']:.3f}", f"{r['l0']:.1f}", r["n_dead"], r["n_dense"]]
        body.append(row + [f"{s.get('ce_loss_recovered', float('nan')):.4f}", _fmt(label_share(p), ".3f")])
    if not body:
        return out + ["(not run yet: the residual SAEs train after the transcoders' results are written)"]
    return out + harness.table(["SAE", "FVU (residual)", "L0", "dead", "dense", "CE recovered", "labels ≥ 0.8"], body)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, default=harness.WORK / "transcoders")
    p.add_argument("--tokens", type=int, default=2_000_000, help="training tokens per dictionary")
    p.add_argument("--cache-tokens", type=int, default=1_050_000, help="cached tokens (train + 5%% held out)")
    p.add_argument("--sequences", type=int, default=128, help="held-out sequences for the CE metrics")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()
    args.commit = harness.commit()
    args.date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    args.work.mkdir(parents=True, exist_ok=True)
    timings: dict = {}
    run(args, timings)
    harness.write_text(args.out, report(args, timings))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
