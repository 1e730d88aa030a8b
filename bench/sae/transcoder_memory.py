"""A transcoder set's memory estimate (workbench/sae/memory.py) against its measured peak, and the estimate alone
for a GPT-2-small-shaped set, with the passes it splits into at a few budgets.

    OMP_NUM_THREADS=1 .venv/bin/python bench/sae/transcoder_memory.py [--cache bench/work/transcoders/cache]

1. measured: bench/sae/transcoder_quality.py's set (4 layers x Top-k/Matryoshka at L0 16 with and without a skip
   path, n 1024, batch 1024) trained for a few steps on the embedded model's cache, once inside tracemalloc
   (numpy and Python: the cache reader's window, the checkpoint's bytes) and once inside the torch profiler
   (torch's CPU allocations), against the estimate its transcoders.json records. The two peaks are added: an
   upper bound on the joint peak.
2. estimated only (nothing trained): 12 layers of d 768 (GPT-2 small), Top-k k 32 at 16x expansion, batch 4096,
   a float16 cache, as bench/sae/transcoder_bench.py's d 768 case; the passes at budgets of 4, 8 and 16 GiB.

Writes bench/results/transcoder_memory.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402
from transcoder_quality import configs  # noqa: E402

from workbench.sae import SAEConfig, TrainConfig, memory  # noqa: E402

OUT = harness.BENCH / "results" / "transcoder_memory.md"
BATCH = 1024


def measured(cache: Path, steps: int) -> dict:
    """Train the set for `steps` steps twice, once inside tracemalloc and once inside the profiler (apart: the
    profiler's own records would count in tracemalloc); the peaks and the estimate the set records."""
    from torch.profiler import ProfilerActivity, profile

    from workbench.sae import io, trainer  # noqa: F401  (imported before measuring, see below)
    from workbench.sae.transcoders import load_set, train_set

    tc = TrainConfig(
        n_tokens=BATCH * steps, batch_size=BATCH, lr=1e-3, warmup_steps=1, checkpoint_every=0, progress=False
    )
    from workbench.cache import ActivationCache, reader

    # the process's own memory (Python, torch, the libraries the run imports) is outside the estimate, as it is
    # outside the free memory the default budget is half of: import them first
    next(ActivationCache.open(cache).batches("blocks.0.hook_mlp_out", 8))
    reader._VERIFIED.clear()  # as in a fresh process: each file's checksum is checked when first opened
    with tempfile.TemporaryDirectory() as tmp:
        tracemalloc.start()
        train_set(cache, "all", configs(), tc, Path(tmp) / "a")
        numpy_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            train_set(cache, "all", configs(), tc, Path(tmp) / "b")
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        mem = [e["args"] for e in json.loads(trace.read_text())["traceEvents"] if e.get("name") == "[memory]"]
        torch_peak = max(m["Total Allocated"] for m in mem) - (mem[0]["Total Allocated"] - mem[0]["Bytes"])
        recorded = load_set(Path(tmp) / "b")["memory"]
    return {"torch": torch_peak, "numpy": numpy_peak, "memory": recorded, "steps": steps}


def gpt2_estimate(n_layers: int = 12, d: int = 768, batch: int = 4096, itemsize: int = 2) -> dict:
    """Per layer, the whole set in one pass, and the passes at 4, 8 and 16 GiB, as plan_passes counts them."""
    from workbench.cache.reader import WINDOW_BYTES
    from workbench.sae.transcoders import group_layers

    cfg = SAEConfig("topk", k=32, expansion=16, transcoder=True).resolve(d, 10**8, d)
    foot = memory.sae_footprint(cfg, batch)
    window = max(batch, WINDOW_BYTES // (2 * n_layers * d * itemsize))  # the one-pass run's window, in rows
    window = -(-window // 16) * 16  # whole 16-row chunks (a cache far larger than one window)

    def estimate(members: list[int]) -> int:
        buffers = memory.buffer_bytes([d] * 2 * len(members), window, batch, 1, itemsize)
        return memory.run_bytes([foot] * len(members), buffers)

    layers = list(range(n_layers))
    passes = {gib: group_layers(layers, lambda m, g=gib: estimate(m) <= g << 30) for gib in (4, 8, 16)}
    return {"footprint": foot, "layer": estimate([0]), "all": estimate(layers), "passes": passes, "window": window}


def report(m: dict, g: dict) -> str:
    info = harness.machine_info()
    mib = memory.mib
    est = m["memory"]["estimate_mib"][0]
    total = mib(m["torch"] + m["numpy"])
    f = g["footprint"]
    lines = [
        "# Transcoder set memory: the estimate against the measured peak",
        "",
        f"- Commit: {info['commit']}",
        f"- Date: {info['date']}; command: `OMP_NUM_THREADS=1 .venv/bin/python bench/sae/transcoder_memory.py`",
        f"- Machine: {info['cpu']}, {info['cores']} cores, {info['ram']} RAM",
        "",
        "## Embedded model (measured)",
        "",
        f"bench/sae/transcoder_quality.py's set (4 layers x 4 configs, n 1024, batch {BATCH}) trained {m['steps']} steps "
        "on its cache (1,050,000 tokens, float16), on the CPU, once inside tracemalloc and once inside the torch "
        "profiler. "
        f"The set's recorded estimate for its one pass: {est} MiB (budget {m['memory']['budget_mib']:g} MiB, "
        f"passes {m['memory']['passes']}). Measured: torch {mib(m['torch'])} MiB + numpy {mib(m['numpy'])} MiB "
        f"= {total} MiB (the two peaks added, an upper bound on the joint peak); the estimate is "
        f"{est / total:.2f}x the measurement.",
        "",
        "## GPT-2-small shape (an estimate, nothing trained)",
        "",
        f"12 layers, d 768, Top-k k 32 at 16x expansion (n 12,288), batch 4096, a float16 cache "
        f"(window {g['window']} rows). Estimated per transcoder: state {mib(f.state)} MiB (parameters, gradients, "
        f"Adam's moments), step {mib(f.step)} MiB; one layer alone with its cache buffers {mib(g['layer'])} MiB; "
        f"all 12 in one pass {mib(g['all'])} MiB.",
        "",
        *harness.table(
            ["budget", "passes", "layers per pass"],
            [[f"{gib} GiB", len(p), " ".join(str(len(x)) for x in p)] for gib, p in g["passes"].items()],
        ),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, default=harness.WORK / "transcoders" / "cache")
    ap.add_argument("--steps", type=int, default=3, help="training steps measured (the peak is in the first)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    text = report(measured(args.cache, args.steps), gpt2_estimate())
    harness.write_text(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
