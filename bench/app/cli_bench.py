"""CLI start-up: `workbench --help` against `import torch, transformer_lens` (goal: under half its time).

Every command's flags come from the config dataclasses, so `--help` must build them without the heavy
imports; this measures what a user waits for. Each round runs every command once in a fresh interpreter
(interleaved, so a busy CPU slows every side alike); the table reports medians and the ratio of medians.

    .venv/bin/python bench/app/cli_bench.py          # 9 rounds
    .venv/bin/python bench/app/cli_bench.py --quick  # 2 rounds (smoke run)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

OUT = harness.BENCH / "results" / "cli.md"
BASELINE = "import torch, transformer_lens"
COMMANDS = {
    "workbench --help": ["-m", "workbench.cli", "--help"],
    "workbench sae train --help": ["-m", "workbench.cli", "sae", "train", "--help"],
    "workbench attention train --help": ["-m", "workbench.cli", "attention", "train", "--help"],
    BASELINE: ["-c", BASELINE],
}
GOAL = 0.5  # `workbench --help` under half the baseline's time (issue #19)


def run_once(argv: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, *argv], cwd=harness.ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise harness.PeerError(f"{' '.join(argv)} exited {proc.returncode}", proc.stderr[-2000:])
    return seconds


def measure(rounds: int, env: dict) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for argv in COMMANDS.values():  # one warm-up each: the file cache, not the interpreter, is shared
        run_once(argv, env)
    for _ in range(rounds):
        for name, argv in COMMANDS.items():
            times[name].append(run_once(argv, env))
    return times


def report(times: dict[str, list[float]], info: dict, threads: str) -> str:
    base = statistics.median(times[BASELINE])
    rows = []
    for name, ts in times.items():
        med = statistics.median(ts)
        goal = "" if name == BASELINE else ("met" if med < GOAL * base else "missed")
        rows.append([f"`{name}`", f"{med:.2f}", f"{min(ts):.2f}", f"{med / base:.2f}", goal])
    lines = [
        "# CLI start-up",
        "",
        *harness.machine_lines(info, {}, threads, "ratios are of medians over interleaved rounds"),
        f"- Rounds: {len(times[BASELINE])} per command, each in a fresh interpreter, after one warm-up run each",
        "",
        f"Goal (issue #19): every `--help` under {GOAL:g} x the time of `{BASELINE}`.",
        "",
        *harness.table(["command", "median s", "best s", "x baseline", f"< {GOAL:g} x"], rows),
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 rounds (smoke run)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default 9; quick 2)")
    harness.add_common_args(ap, OUT, threads=1)
    args = ap.parse_args()
    threads = harness.set_threads(args.threads)
    env = {**os.environ, "PYTHONPATH": str(harness.ROOT)}  # this checkout's workbench, not an installed one
    info = harness.machine_info()
    times = measure(args.rounds or (2 if args.quick else 9), env)
    text = report(times, info, threads)
    harness.write_text(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
