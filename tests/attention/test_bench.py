"""bench/attention_bench.py --quick runs every side and writes the table (no timing is asserted)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_bench_writes_the_table(tmp_path):
    out = tmp_path / "attention.md"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "attention_bench.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = out.read_text()
    for measure in (
        "gated step (paired dual)",
        "gated step (fixed dual)",
        "gated eval forward",
        "peak RSS of any side",
    ):
        assert text.count(measure) == 2, measure
    assert "Commit `" in text and "quick smoke run" in text
