"""Sparse-attention post-training cost: the gated step and forward against the plain model's.

Per model shape, each side in its own subprocess (peak RSS per side): a plain fine-tuning step
(AdamW on CE, same batch), the gated training step as `workbench attention train` runs it
(dual_ce "paired": + a no-grad base forward; and "fixed"), the base evaluation forward and the gated
one (deterministic gates). Shapes: the embedded model at its n_ctx (batch 16) and a random
GPT-2-small-shaped model at context 1024 (batch 1). Goals: gated step <= 1.3x the plain step; the
GPT-2 shape fits in 8 GB on the CPU.

    .venv/bin/python bench/attention_bench.py            # ~10 min on 2 busy cores
    .venv/bin/python bench/attention_bench.py --quick    # a smoke run: small shapes, one repetition, in-process
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

OUT = harness.BENCH / "results" / "attention.md"
SHAPES = {  # name -> (model: "tiny" or HookedTransformerConfig fields, batch, ctx)
    "embedded": ("tiny", 16, None),
    "gpt2-small shape": (harness.GPT2_SHAPE, 1, 1024),
}
QUICK_SHAPES = {
    "embedded": ("tiny", 2, 16),
    "small random": (
        dict(harness.GPT2_SHAPE, n_layers=2, d_model=64, n_heads=4, d_head=16, d_mlp=256, n_ctx=128, d_vocab=500),
        1,
        128,
    ),
}
SIDES = ("plain_step", "gated_step_paired", "gated_step_fixed", "base_forward", "gated_forward")
GOAL_STEP, GOAL_GB = 1.3, 8.0  # issue #21: gated step <= 1.3x the plain step


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_side(spec: dict) -> dict:
    """One side in this process: build the model, time `reps` calls after one warm-up call."""
    import torch

    from workbench.attention import gates as G
    from workbench.attention.config import GateConfig, SparsifyConfig
    from workbench.attention.train import Sparsifier

    torch.manual_seed(0)
    if spec["model"] == "tiny":
        from workbench.models import load

        model, _ = load("tiny", device="cpu")
    else:
        from transformer_lens import HookedTransformer, HookedTransformerConfig

        model = HookedTransformer(HookedTransformerConfig(**spec["model"], device="cpu", seed=0))
    ctx = spec["ctx"] or model.cfg.n_ctx
    tokens = torch.randint(1, model.cfg.d_vocab, (spec["batch"], ctx))
    side = spec["side"]
    cfg = SparsifyConfig(dual_ce="paired" if side.endswith("paired") else "fixed", progress=False).resolve()
    if side == "plain_step":
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)

        def call():
            loss = model(tokens, return_type="loss")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
    elif side.startswith("gated_step"):
        import copy

        base = copy.deepcopy(model).eval().requires_grad_(False) if cfg.dual_ce == "paired" else None
        G.install(model, GateConfig(init_bias=4.0))
        trainer = Sparsifier(model, cfg, base, ce_ref_fixed=None if base is not None else 3.0)

        def call():
            trainer.step(tokens)
    else:
        if side == "gated_forward":
            G.install(model, GateConfig(init_bias=4.0))
        model.eval()

        def call():
            with torch.no_grad():
                model(tokens)

    rss_loaded = _rss_mb()
    for _ in range(spec.get("warmup", 1)):
        call()
    times = []
    for _ in range(spec["reps"]):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return {
        "side": side,
        "seconds": statistics.median(times),
        "times": times,
        "rss_loaded_mb": rss_loaded,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "tokens": tokens.numel(),
        "n_ctx": ctx,
    }


def _side_subprocess(spec: dict) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--side", json.dumps(spec)],
        capture_output=True,
        text=True,
        cwd=harness.ROOT,
        env={**os.environ, "PYTHONPATH": str(harness.ROOT)},
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"side {spec['side']} failed: {proc.stderr[-2000:]}")
    return json.loads(lines[-1])


def pick_shapes(names: str | None) -> dict:
    """The SHAPES named in --shapes (all when None); an unknown name is an error naming the valid ones."""
    if names is None:
        return SHAPES
    picked = [n.strip() for n in names.split(",") if n.strip()]
    bad = [n for n in picked if n not in SHAPES]
    if bad or not picked:
        raise SystemExit(f"attention_bench: --shapes {names!r}: unknown shape(s) {bad}; valid: {list(SHAPES)}")
    return {n: SHAPES[n] for n in picked}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small shapes, one repetition (a smoke run)")
    p.add_argument("--reps", type=int, default=3, help="timed calls per side after one warm-up (default: %(default)s)")
    p.add_argument(
        "--gpt2-reps",
        type=int,
        default=1,
        help="timed calls per side on the GPT-2 shape, without warm-up: a CPU step there takes minutes "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--shapes",
        help=f"comma-separated shapes to measure (default: all of {', '.join(SHAPES)}; --quick: its own two)",
    )
    harness.add_common_args(p, OUT, threads=1)
    p.add_argument("--side", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.side:
        print(json.dumps(run_side(json.loads(a.side))))
        return 0
    threads = harness.set_threads(a.threads)
    shapes, reps = (QUICK_SHAPES, 1) if a.quick else (pick_shapes(a.shapes), a.reps)
    info = harness.machine_info()
    commit = (
        subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=harness.ROOT
        ).stdout.strip()
        or "?"
    )
    results = {}
    for name, (model, batch, ctx) in shapes.items():
        for side in SIDES:
            big = name.startswith("gpt2") and not a.quick
            spec = {
                "model": model,
                "batch": batch,
                "ctx": ctx,
                "side": side,
                "reps": a.gpt2_reps if big else reps,
                "warmup": 0 if big else 1,
            }
            r = run_side(spec) if a.quick else _side_subprocess(spec)
            results[(name, side)] = r
            print(f"{name:<18} {side:<18} {r['seconds']:8.3f} s  peak RSS {r['peak_rss_mb']:8.0f} MB", flush=True)
    rows = []
    for name in shapes:
        r = {s: results[(name, s)] for s in SIDES}
        plain, fwd = r["plain_step"]["seconds"], r["base_forward"]["seconds"]
        peak_gb = max(v["peak_rss_mb"] for v in r.values()) / 1024
        for label, key in (("paired", "gated_step_paired"), ("fixed", "gated_step_fixed")):
            ratio = r[key]["seconds"] / plain
            rows.append(
                [
                    name,
                    f"{r[key]['n_ctx']} x {r[key]['tokens'] // r[key]['n_ctx']}",
                    f"gated step ({label} dual)",
                    f"{r[key]['seconds']:.3f}",
                    f"{plain:.3f}",
                    f"{ratio:.2f}x",
                    "met" if ratio <= GOAL_STEP else "missed",
                    f"{r[key]['peak_rss_mb']:.0f}",
                ]
            )
        g = r["gated_forward"]["seconds"]
        rows.append(
            [
                name,
                "",
                "gated eval forward",
                f"{g:.3f}",
                f"{fwd:.3f}",
                f"{g / fwd:.2f}x",
                "-",
                f"{r['gated_forward']['peak_rss_mb']:.0f}",
            ]
        )
        rows.append(
            [
                name,
                "",
                "peak RSS of any side",
                "",
                "",
                "",
                "met" if peak_gb <= GOAL_GB else "missed",
                f"{peak_gb * 1024:.0f} (plain step {r['plain_step']['peak_rss_mb']:.0f})",
            ]
        )
    text = "\n".join(
        [
            "# Sparse-attention post-training: cost of the gates",
            "",
            f"Commit `{commit}`{' (quick smoke run: small shapes, one repetition, every side in this one process, so RSS is cumulative)' if a.quick else ''}; "
            f"`bench/attention_bench.py`, {reps} timed call(s) per side after one warm-up "
            f"({a.gpt2_reps} without warm-up on the GPT-2 shape)"
            f"{'' if a.quick else ', each side in its own process'}.",
            *harness.machine_lines(info, {}, threads, "ratios compare sides run one after another"),
            "",
            *harness.table(
                [
                    "shape",
                    "ctx x batch",
                    "measure",
                    "seconds",
                    "plain / base",
                    "ratio",
                    f"goal (step <= {GOAL_STEP}x, <= {GOAL_GB:g} GB)",
                    "peak RSS MB",
                ],
                rows,
            ),
            "",
            "The plain step is AdamW on the CE of the same batch (same clipping); the gated step is "
            "`Sparsifier.step` (sampled gates, the Lagrangian, the dual step; 'paired' adds the frozen base "
            "model's no-grad forward on the batch). The sparsity is only masked, not exploited: the dense "
            "scores and softmax are still computed, the gates add elementwise work over every (query, key) pair, "
            "so the gated forward costs more than the base one at any open fraction.",
            "",
        ]
    )
    harness.write_text(Path(a.out), text)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
