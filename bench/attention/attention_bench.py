"""Sparse-attention post-training cost: the gated step and forward against the plain model's.

Per model shape, each side in its own subprocess (peak RSS per side): a plain fine-tuning step
(AdamW on CE, same batch), the gated training step as `workbench attention train` runs it
(dual_ce "paired": + a no-grad base forward; and "fixed"), the base evaluation forward and the gated
one (deterministic gates). Shapes: the embedded model at its n_ctx (batch 16), every side run in
turn `--rounds` times (each ratio against its own round's plain step: the load moves between
rounds), and a random GPT-2-small-shaped model at context 1024 (batch 1, one round: a side takes
minutes). Wall and CPU seconds both. Goals: gated step <= 1.3x the plain step; the GPT-2 shape fits
in 8 GB on the CPU.

    .venv/bin/python bench/attention/attention_bench.py --shapes embedded   # ~5 min on 2 busy cores
    .venv/bin/python bench/attention/attention_bench.py                      # + the GPT-2 shape: ~15 min, <= 8 GB a side
    .venv/bin/python bench/attention/attention_bench.py --quick              # a smoke run: small shapes, one repetition, in-process
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
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
CONTROL_SIDES = {"gated_step_frozen": "frozen", "gated_step_finetune": "finetune"}  # --control, paired dual
SIDES = ("plain_step", "gated_step_paired", "gated_step_fixed", *CONTROL_SIDES, "base_forward", "gated_forward")
GOAL_STEP, GOAL_GB = 1.3, 8.0  # issue #21: gated step <= 1.3x the plain step


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _side_call(spec: dict, side: str):
    """(call, tokens): one side's model, built from seed 0, and the no-argument call that is timed."""
    import torch

    from workbench.attention import gates as G
    from workbench.attention.config import GateConfig, SparsifyConfig
    from workbench.attention.control import FineTunedControl
    from workbench.attention.train import Sparsifier

    torch.manual_seed(0)
    if spec["model"] == "tiny":
        from workbench.models import load

        model, _ = load("tiny", device="cpu")
    else:
        from transformer_lens import HookedTransformer, HookedTransformerConfig

        model = HookedTransformer(HookedTransformerConfig(**spec["model"], device="cpu", seed=0))
    tokens = torch.randint(1, model.cfg.d_vocab, (spec["batch"], spec["ctx"] or model.cfg.n_ctx))
    control = CONTROL_SIDES.get(side, "none")
    cfg = SparsifyConfig(dual_ce="fixed" if side.endswith("fixed") else "paired", control=control, progress=False)
    cfg = cfg.resolve()
    if side == "plain_step":
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)

        def call():
            loss = model(tokens, return_type="loss")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()

        return call, tokens
    if side.startswith("gated_step"):
        import copy

        paired = cfg.dual_ce == "paired" and control != "finetune"
        base = copy.deepcopy(model).eval().requires_grad_(False) if paired else None
        fine_tuned = FineTunedControl(model, cfg) if control == "finetune" else None
        G.install(model, GateConfig(init_bias=4.0))
        trainer = Sparsifier(model, cfg, base, 3.0 if side.endswith("fixed") else None, control=fine_tuned)
        return (lambda: trainer.step(tokens)), tokens
    if side == "gated_forward":
        G.install(model, GateConfig(init_bias=4.0))
    model.eval()

    def forward():
        with torch.no_grad():
            model(tokens)

    return forward, tokens


def _timed(call) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - t0, time.process_time() - c0


def run_side(spec: dict) -> dict:
    """One side in this process: build the model, time `reps` calls after one warm-up call."""
    side = spec["side"]
    if side == "interleaved":
        return run_interleaved(spec)
    call, tokens = _side_call(spec, side)
    rss_loaded = _rss_mb()
    for _ in range(spec.get("warmup", 1)):
        call()
    times, cpu = zip(*[_timed(call) for _ in range(spec["reps"])])
    return {
        "side": side,
        "seconds": statistics.median(times),
        "times": list(times),
        "cpu_seconds": statistics.median(cpu),  # this process's CPU time: not charged while descheduled
        "load": os.getloadavg()[0],
        "rss_loaded_mb": rss_loaded,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "tokens": tokens.numel(),
        "n_ctx": tokens.shape[1],
    }


def run_interleaved(spec: dict) -> dict:
    """Every side's model in this one process, one call of each in turn per round: the load a round sees is
    nearly the same for all its sides, so its ratios move less than those of sides run minutes apart."""
    calls = {side: _side_call(spec, side)[0] for side in SIDES}
    for call in calls.values():
        call()  # warm-up
    rounds = [{side: _timed(call) for side, call in calls.items()} for _ in range(spec["reps"])]
    return {"side": "interleaved", "rounds": rounds, "load": os.getloadavg()[0]}


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


def _measure(shapes: dict, a) -> dict:
    """{(shape, side): [one result per round]}: every side of a shape in turn, `rounds` times (GPT-2 shape: once),
    then (not the GPT-2 shape) every side again, interleaved in one process."""
    results = {}
    for name, (model, batch, ctx) in shapes.items():
        big = name.startswith("gpt2") and not a.quick
        rounds = 1 if big or a.quick else a.rounds
        spec = {"model": model, "batch": batch, "ctx": ctx}
        spec.update(reps=a.gpt2_reps if big else 1 if a.quick else a.reps, warmup=0 if big else 1)
        sides = [*SIDES * rounds, *([] if big else ["interleaved"])]
        for side in sides:
            run = {**spec, "side": side, **({"reps": 1 if a.quick else a.interleaved} if side == "interleaved" else {})}
            r = run_side(run) if a.quick else _side_subprocess(run)
            results.setdefault((name, side), []).append(r)
            if side != "interleaved":
                print(
                    f"{name:<18} {side:<18} {r['seconds']:8.3f} s  CPU {r['cpu_seconds']:8.3f} s  "
                    f"peak RSS {r['peak_rss_mb']:8.0f} MB  load {r['load']:.1f}",
                    flush=True,
                )
    return results


def _verdict(wall: float, cpu: float) -> str:
    if (wall <= GOAL_STEP) == (cpu <= GOAL_STEP):
        return "met" if cpu <= GOAL_STEP else "missed"
    return f"{'met' if cpu <= GOAL_STEP else 'missed'} on CPU time only"


def _row(cells: list, runs: list[dict], refs: list[dict], goal: bool, rss: str, load: str) -> list:
    """One ratio row: median seconds, the median over rounds of each round's ratio (wall, CPU), the CPU range."""
    wall = statistics.median(r["seconds"] / b["seconds"] for r, b in zip(runs, refs))
    cpu_ratios = [r["cpu_seconds"] / b["cpu_seconds"] for r, b in zip(runs, refs)]
    cpu = statistics.median(cpu_ratios)
    med = lambda rs: (
        f"{statistics.median(r['seconds'] for r in rs):.3f} / {statistics.median(r['cpu_seconds'] for r in rs):.3f}"
    )  # noqa: E731
    spread = f"{min(cpu_ratios):.2f}-{max(cpu_ratios):.2f}x" if len(runs) > 1 else "-"
    return [
        *cells,
        med(runs),
        med(refs),
        f"{wall:.2f}x / {cpu:.2f}x",
        spread,
        _verdict(wall, cpu) if goal else "-",
        rss,
        load,
    ]


PAIRS = (  # (measure, side, reference side, judged against the step goal)
    ("gated step (paired dual)", "gated_step_paired", "plain_step", True),
    ("gated step (fixed dual)", "gated_step_fixed", "plain_step", True),
    ("gated step, --control frozen", "gated_step_frozen", "plain_step", False),
    ("gated step, --control finetune", "gated_step_finetune", "plain_step", False),
    ("gated eval forward", "gated_forward", "base_forward", False),
)


def _rows(shapes: dict, results: dict) -> list[list]:
    rows = []
    for name in shapes:
        r = {s: results[(name, s)] for s in SIDES}
        ctx = f"{r['plain_step'][0]['n_ctx']} x {r['plain_step'][0]['tokens'] // r['plain_step'][0]['n_ctx']}"
        for measure, side, ref, goal in PAIRS:
            load = " ".join(f"{v['load']:.1f}" for v in r[side])
            rows.append(
                _row([name, ctx, measure], r[side], r[ref], goal, f"{max(v['peak_rss_mb'] for v in r[side]):.0f}", load)
            )
        for inter in results.get((name, "interleaved"), []):
            runs = {s: [{"seconds": w, "cpu_seconds": c} for w, c in (rd[s] for rd in inter["rounds"])] for s in SIDES}
            label = f", interleaved ({len(inter['rounds'])} rounds, one process)"
            for measure, side, ref, goal in PAIRS:
                rows.append(_row([name, ctx, measure + label], runs[side], runs[ref], goal, "", f"{inter['load']:.1f}"))
        peak = max(v["peak_rss_mb"] for runs in r.values() for v in runs)
        plain_peak = max(v["peak_rss_mb"] for v in r["plain_step"])
        verdict = "met" if peak / 1024 <= GOAL_GB else "missed"
        rows.append(
            [name, "", "peak RSS of any side", "", "", "", "", verdict, f"{peak:.0f} (plain {plain_peak:.0f})", ""]
        )
    return rows


HEADER = [
    "shape",
    "ctx x batch",
    "measure",
    "seconds wall / CPU",
    "plain / base, wall / CPU",
    "ratio wall / CPU",
    "CPU ratio over rounds",
    f"goal (step <= {GOAL_STEP}x, <= {GOAL_GB:g} GB)",
    "peak RSS MB",
    "load (1 min) after each side",
]


def _text(a, shapes: dict, results: dict, threads: str) -> str:
    info = harness.machine_info()
    quick = " (quick smoke run: small shapes, one repetition, every side in this one process, so RSS is cumulative)"
    rounds = "" if a.quick else f", {a.rounds} round(s) of every side per shape (the GPT-2 shape: one)"
    return "\n".join(
        [
            "# Sparse-attention post-training: cost of the gates",
            "",
            f"Commit `{info['commit']}`{quick if a.quick else ''}; `bench/attention/attention_bench.py`, "
            f"{1 if a.quick else a.reps} timed call(s) per side after one warm-up ({a.gpt2_reps} without warm-up on "
            f"the GPT-2 shape){rounds}{'' if a.quick else ', each side in its own process'}.",
            *harness.machine_lines(info, {}, threads, "ratios compare sides run one after another"),
            "",
            *harness.table(HEADER, _rows(shapes, results)),
            "",
            "The plain step is AdamW on the CE of the same batch (same clipping); the gated step is "
            "`Sparsifier.step` (sampled gates, the Lagrangian, the dual step; 'paired' adds the frozen base "
            "model's no-grad forward on the batch; `--control frozen` trains the gates alone, `--control finetune` adds the "
            "control copy's own AdamW step on the batch instead of the base forward). Seconds are the median call; a ratio is the median over rounds "
            "of each round's side over that round's plain step (base forward); CPU is the side process's own CPU "
            "time (one thread: not charged while the process waits for a core, so less moved by other jobs than "
            "wall time). 'Interleaved': every side's model built in one process and one call of each in turn per "
            "round, so a round's sides see nearly the same load (no per-side peak RSS there). The sparsity is only masked, not exploited: the dense scores and softmax are still "
            "computed and the gates add elementwise work over every (query, key) pair.",
            "",
        ]
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small shapes, one repetition (a smoke run)")
    p.add_argument("--reps", type=int, default=3, help="timed calls per side after one warm-up (default: %(default)s)")
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="times every side of a shape is run in turn, each ratio against its own round (default: %(default)s; "
        "the GPT-2 shape runs one round)",
    )
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
    p.add_argument(
        "--interleaved",
        type=int,
        default=10,
        help="rounds of the in-process interleaved measure (not the GPT-2 shape; default: %(default)s)",
    )
    harness.add_common_args(p, OUT, threads=1)
    p.add_argument("--side", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.side:
        print(json.dumps(run_side(json.loads(a.side))))
        return 0
    threads = harness.set_threads(a.threads)
    shapes = QUICK_SHAPES if a.quick else pick_shapes(a.shapes)
    results = _measure(shapes, a)
    harness.write_text(Path(a.out), _text(a, shapes, results, threads))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
