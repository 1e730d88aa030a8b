"""Run every bench/<area>/*_bench.py in turn (each writes its own bench/results/*.md).

Extra options go to every driver that defines them (an option a driver does not define is left out
for it, e.g. --quick for the cache benchmark):

    .venv/bin/python bench/run_all.py                # full runs
    .venv/bin/python bench/run_all.py --threads 1    # every side single-threaded (busy CPU)
    .venv/bin/python bench/run_all.py --quick        # smoke runs where a driver has them
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def args_for(source: str, args: list[str]) -> list[str]:
    """The options (with their values) that the driver's source defines."""
    out, keep = [], True
    for a in args:
        if a.startswith("--"):
            keep = f'"{a.split("=")[0]}"' in source
        if keep:
            out.append(a)
    return out


def main() -> int:
    failed = []
    for script in sorted(BENCH.glob("[a-z]*/*_bench.py")):  # the area folders, not bench/.venv*
        t0 = time.time()
        args = args_for(script.read_text(), sys.argv[1:])
        name = script.relative_to(BENCH)
        print(f"== {name} {' '.join(args)}", flush=True)
        rc = subprocess.run([sys.executable, str(script), *args], cwd=BENCH.parent).returncode
        print(f"== {name}: exit {rc} after {time.time() - t0:.0f}s", flush=True)
        if rc:
            failed.append(str(name))
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
