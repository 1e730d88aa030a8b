"""bench/attention/: attention_bench.py --quick runs every side and writes the table (no timing is asserted);
attention_frontier.py judges a small run's kept states per tolerance; sparse_choice.py judges them against the whole
goal; attention_dual_stream.py sets a held-out-dual run beside a training-dual one."""

import shutil
import subprocess
import sys
from pathlib import Path

from workbench.attention import train as T

ROOT = Path(__file__).resolve().parents[2]


def _bench(script: str, *args: str) -> None:
    """Run a bench script as the integrator does (its own process, this checkout's code)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "attention" / script), *args],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_quick_bench_writes_the_table(tmp_path):
    out = tmp_path / "attention.md"
    _bench("attention_bench.py", "--quick", "--out", str(out))
    text = out.read_text()
    for measure in ("gated step (paired dual)", "gated step (fixed dual)", "gated eval forward"):
        assert text.count(measure) == 4, measure  # two shapes, each in its own processes and interleaved
        assert text.count(f"{measure}, interleaved (1 rounds, one process)") == 2, measure
    assert text.count("peak RSS of any side") == 2
    assert "Commit `" in text and "quick smoke run" in text


def test_frontier_picks_per_tolerance_among_kept_states_and_judges_them(small_dir, tmp_path):
    from .test_train import _cfg

    run, kept = tmp_path / "run", tmp_path / "kept"
    kept.mkdir()
    T.sparsify(small_dir, run, _cfg(steps=3), report_queries=2)
    shutil.copy(run / T.CHECKPOINT, kept / "step3.pt")
    T.sparsify(small_dir, run, _cfg(steps=6), resume=True, report_queries=2)  # extended: evals at 3 and 6
    out = tmp_path / "frontier.md"
    args = ("--run", str(run), "--checkpoints", str(kept), "--tolerances=-5,0.5,5", "--queries", "2", "--out", str(out))
    _bench("attention_frontier.py", *args)
    text = out.read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and not ln.startswith("| tolerance")]
    assert len(rows) == 3 and "no kept state admitted" in rows[0]  # a negative tolerance admits nothing
    assert "states kept for steps [3, 6]" in text and "not separate runs per tolerance" in text
    assert "fresh split" in text and "- Commit: " in text


def test_choice_bench_judges_each_kept_state_and_ships_only_a_candidate_meeting_the_rule(small_dir, tmp_path):
    from workbench.attention.config import JudgeConfig

    from .test_train import _cfg

    run, kept = tmp_path / "run", tmp_path / "kept"
    kept.mkdir()
    cfg = _cfg(steps=3, judge=JudgeConfig(untouched_sequences=6))
    T.sparsify(small_dir, run, cfg, report_queries=2)
    shutil.copy(run / T.CHECKPOINT, kept / "step3.pt")
    out = tmp_path / "choice.md"
    args = ("--base", small_dir, "--run", str(run), "--checkpoints", str(kept), "--queries", "2", "--out", str(out))
    _bench("sparse_choice.py", *args)
    text = out.read_text()
    rows = [ln.split(" | ") for ln in text.splitlines() if ln.startswith("| step 3 |")]
    assert len(rows) == 1 and "%" in rows[0][2] and " / " in rows[0][2]  # rows with no / one open key
    assert "# Which sparse-attention state ships as small-sparse" in text and "(held-out sequences, T = 24)" in text
    meets = rows[0][10] == "**yes**" and rows[0][7] == "**yes**"
    assert ("Decision: **ship step 3**" in text) == meets and ("**nothing ships**" in text) != meets
    assert "- Commit: " in text and "current" not in text.split("| state |")[1]  # no --current: no such row


def test_choice_bench_judges_a_fair_run_against_its_control_at_each_step(small_dir, tmp_path, monkeypatch):
    """A `--control finetune` run (reference both): each state is judged against the control at its step and the
    frozen base; the saved state's judgement reproduces the run's own verdict; a kept checkpoint's control is the
    averaged control the run saved."""
    import importlib.util
    import json

    import torch
    from safetensors.torch import load_file

    from workbench.attention.config import JudgeConfig

    from .test_train import _cfg

    run, kept = tmp_path / "run", tmp_path / "kept"
    kept.mkdir()
    cfg = _cfg(steps=3, control="finetune", lr=0.05, control_average=0.5, judge=JudgeConfig(untouched_sequences=6))
    report = T.sparsify(small_dir, run, cfg, report_queries=2)
    shutil.copy(run / T.CHECKPOINT, kept / "step3.pt")
    out, cache = tmp_path / "choice.md", tmp_path / "cache.json"
    args = ("--base", small_dir, "--run", str(run), "--checkpoints", str(kept), "--queries", "2", "--out", str(out))
    _bench("sparse_choice.py", *args, "--cache", str(cache))
    (j,) = (states["3"] for states in json.loads(cache.read_text()).values())
    assert j["reference"] == "control"
    assert abs(j["verdict"]["difference"] - report["verdict"]["difference"]) < 1e-9
    assert abs(j["verdict"]["against_base"]["difference"] - report["verdict"]["against_base"]["difference"]) < 1e-9
    text = out.read_text()
    row = next(ln.split(" | ") for ln in text.splitlines() if ln.startswith("| step 3 |"))
    assert "; frozen base " in row[4] and "; frozen base " in row[8] and "sparse - control" in text
    assert "Every evaluation the run logged" in text and "| 3 | " in text  # the run's own log, every evaluation
    assert "The sparsest admitted evaluation per tolerance" in text
    monkeypatch.syspath_prepend(str(ROOT / "bench" / "attention"))  # as the script sees its neighbours
    spec = importlib.util.spec_from_file_location("sparse_choice", ROOT / "bench" / "attention" / "sparse_choice.py")
    choice = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(choice)
    (run / "sparsify.json").rename(tmp_path / "sparsify.json")  # the checkpoint's control alone
    weights = choice.frontier.read_kept(run, kept).controls[3]
    saved = load_file(str(run / T.CONTROL_DIR / "model.safetensors"))
    assert all(torch.allclose(weights[k], saved[k], atol=1e-6) for k in saved)


def test_dual_stream_bench_sets_a_held_out_dual_run_beside_a_training_dual_run(small_dir, tmp_path):
    from .test_train import HELDOUT_DUAL, _cfg

    T.sparsify(small_dir, tmp_path / "ref", _cfg(steps=3), report_queries=2)
    T.sparsify(small_dir, tmp_path / "dual", _cfg(steps=3, **HELDOUT_DUAL), report_queries=2)
    out = tmp_path / "dual.md"
    args = ("--run", str(tmp_path / "dual"), "--ref-run", str(tmp_path / "ref"), "--base", small_dir, "--steps", "3")
    _bench("attention_dual_stream.py", *args, "--out", str(out))
    text = out.read_text()
    rows = [ln.split(" | ") for ln in text.splitlines() if ln.startswith("| 3 |")]
    assert len(rows) == 2 and all("not kept" not in c and c.strip() != "-" for c in rows[0])  # fresh split, both
    assert "3 steps reached, dual stream every 2 steps on 4 held-out sequences" in text
    assert "held-out sequences 4-11 (n = 8)" in text and "held-out sequences 0-3 as" in text and "- Commit: " in text


def test_mechanism_section_replaces_its_old_self_and_keeps_the_rest(tmp_path):
    out = tmp_path / "sparsify.md"
    stale = "<!-- induction-mechanism: written by bench/attention/attention_mechanism.py -->\nSTALE\n<!-- end induction-mechanism -->"
    out.write_text(f"# kept title\n\nkept text\n\n{stale}\n\nkept tail\n")
    _bench("attention_mechanism.py", "--sequences", "1", "--out", str(out))
    text = out.read_text()
    assert text.startswith("# kept title\n\nkept text\n") and text.endswith("\n\nkept tail\n")
    assert "STALE" not in text and text.count("## Induction mechanism") == 1
    assert "- Commit: " in text and "| a3.h0 | induction |" in text
    assert (tmp_path / "attention" / "mechanism.json").is_file()


def test_an_unknown_bench_shape_is_refused_naming_the_valid_ones():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "attention" / "attention_bench.py"), "--shapes", "embedded,gpt3"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode != 0
    assert "unknown shape(s) ['gpt3']; valid: ['embedded', 'gpt2-small shape']" in proc.stderr
