"""The benchmark scripts run at HEAD: every one compiles, and each quick mode runs on tiny sizes.

The quick runs use the workbench side only when the peers' venvs (bench/setup_peers.sh) are absent:
a missing peer is reported in the table, not a crash. Results go to a temporary folder, never over
bench/results/, and every table names the commit it was measured at.
"""

import ast
import json
import os
import py_compile
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(  # bench/ and its area folders, not the peer venvs (bench/.venv*) or the scratch folder (bench/work)
    [*(ROOT / "bench").glob("*.py"), *(p for p in (ROOT / "bench").glob("*/*.py") if p.parent.name[0] not in "._")]
)


@pytest.mark.parametrize("script", SCRIPTS, ids=[str(p.relative_to(ROOT)) for p in SCRIPTS])
def test_every_bench_script_compiles(script, tmp_path):
    py_compile.compile(str(script), cfile=str(tmp_path / "x.pyc"), doraise=True)


def test_the_bench_readme_names_every_script_by_its_path_and_no_other():
    """bench/README.md lists each script as `<area>/<name>.py` (`name.py` at bench/ itself), and every script path it
    names exists: a script added, moved or removed shows up here."""
    text = (ROOT / "bench" / "README.md").read_text()
    paths = {str(p.relative_to(ROOT / "bench")) for p in SCRIPTS}
    assert sorted(p for p in paths if f"`{p}`" not in text) == []
    named = set(re.findall(r"`([a-z_]+/[a-z_]+\.py)`", text))
    assert sorted(named - paths) == []


def _script_imports(path: Path) -> set[str]:
    """The module names a script imports anywhere (module level or inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_no_bench_script_imports_one_that_imports_it_back():
    """Scripts import helpers from their own folder or bench/ (harness.py); no two import each other, even inside a
    function (the app_bench <-> app_floor circle: the shared browser clock is app/app_browser.py)."""
    graph = {}
    for path in SCRIPTS:
        visible = {p.stem for p in (*path.parent.glob("*.py"), *(ROOT / "bench").glob("*.py"))} - {path.stem}
        graph[path.parent / path.stem] = {
            path.parent / m if (path.parent / f"{m}.py").is_file() else ROOT / "bench" / m
            for m in _script_imports(path) & visible
        }

    def reach(start):
        seen, todo = set(), list(graph.get(start, ()))
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo += graph.get(n, ())
        return seen

    assert sorted(str(n.relative_to(ROOT)) for n in graph if n in reach(n)) == []


def test_every_committed_results_table_names_its_commit():
    for md in sorted((ROOT / "bench" / "results").glob("*.md")):
        assert any(line.startswith("- Commit: ") for line in md.read_text().splitlines()), md.name


def _run(tmp_path, *argv) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_WORK": str(tmp_path / "work"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, *map(str, argv)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def _names_the_commit(text: str) -> None:
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    assert f"Commit: {head.stdout.strip()}" in text


def _quick(tmp_path, script: str, *extra) -> str:
    """The report of `bench/<area>/<script> --quick --threads 1 ...`, checked to name the commit it measured."""
    out = tmp_path / "report.md"
    _run(tmp_path, f"bench/{script}", "--quick", "--threads", "1", *extra, "--out", out)
    text = out.read_text()
    _names_the_commit(text)
    return text


@pytest.mark.slow
def test_sae_bench_quick(tmp_path):
    text = _quick(tmp_path, "sae/sae_bench.py", "--datasets", "tiny", "--no-variants")
    row = next(line for line in text.splitlines() if line.startswith("| workbench |"))
    assert "nan" not in row and "failed" not in row.lower()


@pytest.mark.slow
def test_cli_bench_quick(tmp_path):
    text = _quick(tmp_path, "app/cli_bench.py", "--rounds", "1")
    assert "| `workbench --help` |" in text and "| `import torch, transformer_lens` | " in text


@pytest.mark.slow
def test_transcoder_bench_quick(tmp_path):
    text = _quick(tmp_path, "sae/transcoder_bench.py", "--datasets", "tiny")
    row = next(line for line in text.splitlines() if line.startswith("| workbench |"))
    assert "nan" not in row and "failed" not in row.lower()
    assert "ln2.hook_normalized + blocks.1.hook_mlp_out" in text and "(d_in = d_out = 128)" in text


@pytest.mark.slow
def test_sae_quality_quick_renders_intervals_and_resumes(tmp_path):
    """Two seeds give every figure an interval and every claim a verdict; a rerun on the same work folder
    finds every (configuration, seed) row stored and trains nothing."""
    work = tmp_path / "sq"
    text = _quick(tmp_path, "sae/sae_quality.py", "--work", work)
    assert "| topk_n1024_k16 | 2 |" in text and "## Each paper's claims here" in text
    assert "Top-k regularisers: l1/l2 — more monosemantic" in text
    assert len(list((work / "rows").rglob("*_seed1.json"))) == 3
    again = _run(tmp_path, "bench/sae/sae_quality.py", "--quick", "--work", work, "--out", tmp_path / "again.md")
    assert "FVU" not in again and (tmp_path / "again.md").read_text().count("| topk_n1024_k16 | 2 |") == 1


@pytest.mark.slow
def test_transcoder_quality_quick_fills_every_table_and_resumes(tmp_path):
    """Every stage runs (set, residual SAEs, feature stores, evaluations): no cell is left '–'; a rerun on the
    same work folder skips every stage."""
    work = tmp_path / "tq"
    text = _quick(tmp_path, "sae/transcoder_quality.py", "--work", work)
    assert "–" not in text and "not run yet" not in text and "not trained yet" not in text
    assert "| 3 | " in text.split("## Label share ≥ 0.8: transcoders against residual-stream SAEs")[1]
    again = _run(tmp_path, "bench/sae/transcoder_quality.py", "--quick", "--work", work, "--out", tmp_path / "again.md")
    assert again.count("done before, skipped") == 7


@pytest.mark.slow
def test_circuit_claims_quick_reuses_the_base_side_resumes_and_refuses_other_settings(
    tiny_set, sparse_set, tiny_clt, tiny_sparse_clt, tmp_path
):
    """--base-only (its last query measured first by a --from-end run beside it), then base vs sparse (through
    transcoder sets, then CLTs with --heads-only) on the same results folder: the paired run takes the base side
    from the base-only JSON, renders every measure with its intervals and each dictionary kind's heads rows, a rerun
    measures nothing, other settings and a set against a CLT are refused."""
    work, script = tmp_path / "claims", "bench/circuits/circuit_claims.py"
    _run(tmp_path, script, "--base-only", "--quick", "--from-end", "--results", work, "--out", tmp_path / "end.md")
    ahead = json.loads((work / "tiny" / "ahead-heldout-ioi-n2.json").read_text())["ahead"]
    assert list(ahead) == ["1"]  # the last query only: the ordered store has none, so query 1 is left to it
    _run(tmp_path, script, "--base-only", "--quick", "--results", work, "--out", tmp_path / "base.md")
    text = (tmp_path / "base.md").read_text()
    _names_the_commit(text)
    assert "## Base model alone (section 1)" in text and "## Base vs sparse" not in text
    assert "- ioi query 2, base side: measured by a --from-end run beside the ordered one" in text
    assert json.loads((work / "tiny" / "heldout-ioi-n2.json").read_text())["queries"][1] == ahead["1"]
    paired = ("--sparse", "tiny-sparse", "--quick", "--results", work, "--transcoders", tiny_set, sparse_set)
    _run(tmp_path, script, *paired, "--out", tmp_path / "paired.md")
    text = (tmp_path / "paired.md").read_text()
    _names_the_commit(text)
    for name in ("heads", "MLPs", "component edges", "attention entries", "attention entries per circuit edge"):
        table = text.split(f"### {name}\n", 1)[1]
        assert "| ioi | 0.8 | " in table and "| greater_than | 0.9 | " in table and "(n=" in table
    assert "- Base side of ioi, greater_than: measured by the --base-only run in " in text
    assert "- ioi, sparse: wrong on " in text and "| greater_than | " in text.split("### Seconds per query")[1]
    flows = text.split("### Through per-layer transcoder sets")[1].split("###")[0]
    assert "| ioi | 2 | " in flows and "| greater_than | 2 | " in flows and "cross-layer" not in text
    assert "- base dictionary: topk k 8, " in flows and "; not evaluated (`workbench sae eval` writes" in flows
    store = work / "tiny-vs-tiny-sparse" / "heldout-ioi-n2.json"
    base = json.loads((work / "tiny" / "heldout-ioi-n2.json").read_text())
    res = json.loads(store.read_text())
    assert [q["base"] for q in res["queries"]] == [q["base"] for q in base["queries"]]
    assert res["split"] == "heldout" and all(q["sparse"]["seconds"] > 0 for q in res["queries"])
    _run(tmp_path, script, *paired, "--out", tmp_path / "again.md")
    assert json.loads(store.read_text())["runs"] == res["runs"]
    heads = work / "tiny-vs-tiny-sparse" / "heads-set-heldout-ioi-n2.json"
    assert json.loads(heads.read_text())["split"] == "heldout"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_WORK": str(tmp_path / "work"), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, script, *paired, "--targets", "0.8", "--out", str(tmp_path / "other.md")]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0 and "was made with targets=[0.8, 0.9], this run has targets=[0.8]" in proc.stderr
    mixed = [sys.executable, script, *paired[:-1], tiny_sparse_clt]
    proc = subprocess.run(mixed, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "one per-layer set and one CLT; pass two of a kind" in proc.stderr
    proc = subprocess.run([*argv, "--from-end"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "--from-end measures component circuits ahead of an ordered run" in proc.stderr
    store.unlink()  # --heads-only measures no component circuit
    clts = (*paired[:-2], tiny_clt, tiny_sparse_clt, "--heads-only")
    _run(tmp_path, script, *clts, "--out", tmp_path / "clts.md")
    text = (tmp_path / "clts.md").read_text()
    flows = text.split("### Through cross-layer transcoders")[1].split("###")[0]
    assert "| ioi | 2 | " in flows and f"sparse {tiny_sparse_clt}" in flows and "### Through per-layer" in text
    assert "- sparse dictionary: batchtopk k 8, " in flows
    assert not store.exists() and (work / "tiny-vs-tiny-sparse" / "heads-clt-heldout-ioi-n2.json").is_file()


@pytest.mark.slow
def test_circuit_claims_with_a_control_splits_base_minus_sparse_and_reuses_both_sides(tmp_path):
    """--control beside base vs sparse: the control run takes the base and sparse sides from the base-vs-sparse
    store and measures only the control's; with the base itself as the control (the same weights, so the same
    circuits), "from training" is exactly 0 and "from the gates" equals base - sparse on every measure."""
    work, script = tmp_path / "claims", "bench/circuits/circuit_claims.py"
    paired = ("--sparse", "tiny-sparse", "--quick", "--results", work)
    _run(tmp_path, script, *paired, "--out", tmp_path / "paired.md")
    _run(tmp_path, script, *paired, "--control", "data/models/tiny", "--out", tmp_path / "control.md")
    text = (tmp_path / "control.md").read_text()
    _names_the_commit(text)
    assert "## Base vs control vs sparse (section 3, split)" in text and "- ioi, control: wrong on " in text
    assert "- Base and sparse side of ioi, greater_than: measured by the base-vs-sparse run in " in text
    pair = json.loads((work / "tiny-vs-tiny-sparse" / "heldout-ioi-n2.json").read_text())
    res = json.loads((work / "tiny-vs-tiny-vs-tiny-sparse" / "heldout-ioi-n2.json").read_text())
    assert [{k: q[k] for k in ("base", "sparse")} for q in res["queries"]] == [
        {k: q[k] for k in ("base", "sparse")} for q in pair["queries"]
    ]
    assert res["control_model"] == res["base_model"] and all(q["control"]["seconds"] > 0 for q in res["queries"])
    for q in res["queries"]:
        assert {k: v for k, v in q["control"].items() if k != "seconds"} == {
            k: v for k, v in q["base"].items() if k != "seconds"
        }
    row = text.split("### component edges\n", 1)[1].split("| ioi | 0.9 | ", 1)[1].split("\n")[0].split(" | ")
    # queries, 3 means, ratio of means, then (geometric mean, difference) for base-sparse, training, gates
    assert row[7].startswith("1.00 [1.00, 1.00]") and row[8].startswith("0.00 [0.00, 0.00]")
    assert (row[9], row[10]) == (row[5], row[6])
    proc = subprocess.run(
        [sys.executable, script, "--base-only", "--control", "data/models/tiny", "--quick"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert (
        proc.returncode == 2 and "--control data/models/tiny splits base - sparse: pass --sparse MODEL" in proc.stderr
    )


def test_paper_edges_keeps_circuits_per_model_and_splits_with_a_control(tmp_path):
    """paper_edges.py base vs sparse, then with the base itself as the control: the store keeps circuits by model
    id, so the control run measures nothing new (the control is the base's weights) and its "from training" pair is
    exactly 1x and 0 while "from the gates" equals base / sparse; other settings are refused."""
    store, script = tmp_path / "edges.json", "bench/circuits/paper_edges.py"
    argv = ("--base", "data/models/tiny", "--sparse", "data/models/tiny-sparse", "--n", "1", "--targets", "0.8")
    argv += ("--families", "ioi", "--samples", "1", "--results", store)
    _run(tmp_path, script, *argv)
    res = json.loads(store.read_text())
    assert len(res["sides"]) == 2 and all(s["ioi"][0]["0.8"]["pairs"] > 0 for s in res["sides"].values())
    assert res["queries"]["ioi"][0]["prompt"] and res["runs"][0]["models"]["base"] == res["base_model"]
    out = _run(tmp_path, script, *argv, "--control", "data/models/tiny")
    again = json.loads(store.read_text())
    assert again == res  # nothing to measure, so not even a run is recorded
    row = out.split("### pairs\n", 1)[1].split("| ioi | 0.8 | ", 1)[1].split("\n")[0].split(" | ")
    # queries, 3 means, ratio of means, then (geometric mean, difference) for base-sparse, training, gates
    assert row[0] == "1" and row[7].startswith("1.00 (n=1)") and row[8].startswith("0.00 (n=1)")
    assert (row[9], row[10]) == (row[5], row[6])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, script, *map(str, argv[:-6]), "0.9", "--families", "ioi", "--results", str(store)]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0 and "was made with other settings" in proc.stderr


def test_circuit_claims_renders_what_the_split_shows_from_the_stored_rows(tmp_path):
    """The control report's closing section is rendered, not written by hand: from the committed tiny-fair rows,
    per measure, each pair's rows whose paired 95% interval excludes 0, the same rows claims.paired finds here."""
    from workbench.attention.claims import MEASURES, paired

    stored = ROOT / "bench" / "results" / "circuit_claims"
    out = tmp_path / "control.md"
    argv = ["--sparse", "runs/tiny-fair", "--control", "runs/tiny-fair/control", "--results", stored, "--render"]
    _run(tmp_path, "bench/circuits/circuit_claims.py", *argv, "--out", out)
    summary = out.read_text().split("## What the split shows (rendered from the rows above", 1)[1]
    results = {
        p.stem.split("-")[1]: json.loads(p.read_text())
        for p in sorted(stored.glob("tiny-vs-tiny-fair-control-vs-tiny-fair/heldout-*-n20.json"))
    }
    assert len(results) == 5
    for name, measure in MEASURES.items():
        line = next(x for x in summary.splitlines() if x.startswith(f"- **component circuits, {name}**"))
        for label, (a, b) in {"base - sparse": ("base", "sparse"), "control - sparse": ("control", "sparse")}.items():
            rows = []
            for task, res in results.items():
                for t in map(str, res["targets"]):
                    d = paired(res, measure, t, a, b)["difference"]
                    if d.n >= 2 and not d.lo <= 0 <= d.hi:
                        rows.append(f"{task} {t} {d.mean:+.2f} [{d.lo:+.2f}, {d.hi:+.2f}] (n={d.n})")
            assert f"{label}{' (from the gates)' if a == 'control' else ''} excludes 0 on {len(rows)}" in line
            assert all(r in line for r in rows)


@pytest.mark.slow
def test_circuit_bench_quick(tmp_path):
    assert "# Query-circuit benchmark" in _quick(tmp_path, "circuits/circuit_bench.py", "--lengths", "")


@pytest.mark.slow
def test_gpu_check_quick_on_the_cpu(tmp_path):
    _run(
        tmp_path,
        "bench/sae/gpu_check.py",
        "--device",
        "cpu",
        "--quick",
        "--out",
        tmp_path / "gpu",
        "--only",
        "kernels",
        "steps",
        "circuit",
    )
    res = json.loads((tmp_path / "gpu" / "gpu.json").read_text())
    assert res["errors"] == {} and res["kernels"] and res["steps"]
    _names_the_commit((tmp_path / "gpu" / "gpu.md").read_text())


@pytest.mark.slow
def test_features_bench_quick(tmp_path):
    text = _quick(tmp_path, "sae/features_bench.py")
    assert "| 256 latents |" in text and "(one shared pass)" in text


@pytest.mark.slow
def test_cache_bench_quick(tmp_path):
    text = _quick(tmp_path, "sae/cache_bench.py")
    assert "GPT-2-small-shaped" in text


@pytest.mark.slow
def test_app_bench_quick(tmp_path):
    text = _quick(tmp_path, "app/app_bench.py")
    assert "| sparse attention |" in text and "GPT-2-shaped circuit:" in text
    if Path("/usr/bin/chromium").exists():
        assert "| GPT-2-shaped (bench-gpt2-shaped) | 300 |" in text
        assert "Switching circuits on the open page" in text and "budget move s" in text


@pytest.mark.slow
def test_sae_ground_truth_quick(tmp_path):
    text = _quick(tmp_path, "sae/sae_ground_truth.py")
    assert "Every (architecture, seed) finished." in text and "paired difference matryoshka − topk" in text
    assert "| block_topk | 0,1,2 |" in text and "nan" not in text


@pytest.mark.slow
def test_feature_circuit_bench_quick(tmp_path):
    text = _quick(tmp_path, "circuits/feature_circuit_bench.py")
    assert "<!-- part:bounded -->" in text and "| ioi | 1 of 1 |" in text
    assert "RANDOM (quick run" in text  # no trained set in a fresh work folder: a random one, said so


@pytest.mark.slow
@pytest.mark.skipif(
    not (ROOT / "bench" / ".venv-sae" / "bin" / "python").exists(),
    reason="bench/.venv-sae is missing (bench/setup_peers.sh builds it): sparsify and dictionary_learning cannot be "
    "installed beside the workbench, so their round trip runs in their own venv",
)
def test_byo_roundtrip_equals_sparsify_and_dictionary_learning(tmp_path):
    """Files made by sparsify's and dictionary_learning's own code import with codes and outputs within 1e-5 of their
    own loaders', the workbench's sparsify export loads back in sparsify equal to it, and the hookpoint table reads
    what sparsify's forward hooks read."""
    import re

    out = tmp_path / "report.md"
    _run(tmp_path, "bench/sae/byo_roundtrip.py", "--steps", "20", "--threads", "1", "--out", out)
    text = out.read_text()
    _names_the_commit(text)
    rows = [ln for ln in text.splitlines() if re.match(r"\| (sparsify|dictionary_learning|dl-topk|h\.)", ln)]
    assert len(rows) == 9 + 3 + 5, text
    for row in rows:
        diffs = [float(x) for x in re.findall(r"\d\.\d\de[+-]\d\d", row)]
        assert diffs and max(diffs) < 1e-5, row


def test_clt_bench_pairs_the_stored_queries(tmp_path):
    """`clt_bench.py --part compare` reads two dictionaries' per-query stores and pairs them query by query: the
    cell holds both means over the shared queries and the paired t interval of the differences."""
    from workbench.intervals import paired_difference

    queries = tmp_path / "work" / "clts" / "queries"
    queries.mkdir(parents=True)
    nodes = {"set": [10, 14, 9, None], "clt-params": [8, 11, 9, 7]}  # query 3: no circuit for the set
    for name, sizes in nodes.items():
        rows = {
            str(i): {"circuit": {"graph": {"replacement": 0.5 + i / 10}, "circuit": {"nodes": s} if s else {}}}
            for i, s in enumerate(sizes)
        }
        (queries / f"{name}-ioi-n4.json").write_text(json.dumps({"rows": rows}))
    out = tmp_path / "report.md"
    _run(tmp_path, "bench/circuits/clt_bench.py", "--part", "compare", "--families", "ioi", "--n", "4", "--out", out)
    row = next(line for line in out.read_text().splitlines() if line.startswith("| ioi |"))
    gap = paired_difference({i: v for i, v in enumerate(nodes["set"][:3])}, dict(enumerate(nodes["clt-params"][:3])))
    assert f"11.0 / 9.3; {gap.format('{:.1f}')}" in row
    assert "0.650 / 0.650; 0.000" in row  # replacement: all four queries, identical


@pytest.mark.slow
def test_finetune_control_quick_resumes_and_starts_at_the_base(tmp_path):
    """The control is the base fine-tuned without gates: at 0 steps it is the base (difference exactly 0); a rerun
    continues from its checkpoint, and a checkpoint of other settings is refused."""
    script, work = "bench/attention/finetune_control.py", tmp_path / "control"
    common = ("--sparse", "data/models/tiny-sparse", "--quick", "--work", work, "--out", tmp_path / "c.md")
    _run(tmp_path, script, *common)
    text = (tmp_path / "c.md").read_text()
    _names_the_commit(text)
    assert "| verdict | 256-271 (n = 16) | " in text and "| untouched | " in text
    assert "the base fine-tuned 3 steps on the run's own training batches" in text
    assert "resumed at step 3" in _run(tmp_path, script, *common)
    zero = ("--sparse", "data/models/tiny-sparse", "--quick", "--steps", "0", "--work", tmp_path / "zero")
    _run(tmp_path, script, *zero, "--out", tmp_path / "zero.md")
    rows = [r for r in (tmp_path / "zero.md").read_text().splitlines() if r.startswith("| verdict")]
    assert rows and rows[0].split(" | ")[2] == "+0.0000 [+0.0000, +0.0000]"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_WORK": str(tmp_path / "work"), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, script, *map(str, common), "--steps", "4"]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0 and "written by a different configuration" in proc.stderr


def test_finetune_control_write_records_the_differences_and_the_card_states_them(tmp_path):
    """--write puts the control's differences in the model's report and its card (the command once, however often
    it is recorded); the card's figures are the report's."""
    import json

    from workbench.attention.card import copy_model, shipped

    model = copy_model(
        ROOT / "data/models/tiny-sparse", tmp_path / "tiny-sparse", shipped(ROOT / "data/models/tiny-sparse")
    )
    args = ("--sparse", model, "--quick", "--steps", "2", "--work", tmp_path / "control", "--out", tmp_path / "c.md")
    for _ in range(2):
        _run(tmp_path, "bench/attention/finetune_control.py", *args, "--write")
    c = json.loads((model / "attention_report.json").read_text())["fine_tuned_control"]
    assert c["steps"] == 2 and set(c["splits"]) == {"verdict", "untouched"}
    d = c["splits"]["verdict"]["sparse - control"]
    card = (model / "README.md").read_text()
    assert f"CE sparse - control {d['difference']:+.4f}, 95% interval [{d['ci95'][0]:+.4f}" in card
    assert "Against a control fine-tuned after the run (2 steps" in card
    assert card.count("finetune_control.py --sparse DIR --steps 2 --write") == 1
    # the control itself is saved beside the model, read back by compare's reader and shipped with the model
    from workbench.attention.compare import saved_control
    from workbench.provenance import model_id

    control = saved_control(model)
    assert model_id(control) == c["model"] != json.loads((model / "attention_report.json").read_text())["base_model"]
    assert f"({c['model']}) is saved beside the model as control/" in card
    assert {"control/config.json", "control/model.safetensors"} <= set(shipped(model))


def test_finetune_control_can_average_the_controls_weights_as_a_fair_run_does(tmp_path):
    """--control-average D: the differences and the saved control use the running average of the control's weights
    (the checkpoint's average, not its last weights), as `attention train --control-average` does; the report, the
    card and the results say so; a decay outside [0, 1) is refused by name."""
    import torch
    from safetensors.torch import load_file

    from workbench import checkpoint
    from workbench.attention.card import copy_model, shipped

    model = copy_model(
        ROOT / "data/models/tiny-sparse", tmp_path / "tiny-sparse", shipped(ROOT / "data/models/tiny-sparse")
    )
    work, out = tmp_path / "control", tmp_path / "c.md"
    args = ("--sparse", model, "--quick", "--steps", "2", "--work", work, "--out", out, "--write")
    _run(tmp_path, "bench/attention/finetune_control.py", *args, "--control-average", "0.5")
    state, saved = checkpoint.read(work / "checkpoint.pt"), load_file(str(model / "control" / "model.safetensors"))
    assert all(torch.equal(saved[k], state["average"][k]) for k in saved)
    assert not all(torch.equal(saved[k], state["model"][k]) for k in saved)  # two steps moved the last weights
    assert json.loads((model / "attention_report.json").read_text())["fine_tuned_control"]["control_average"] == 0.5
    card = (model / "README.md").read_text()
    assert "no gates, the running average of its weights (decay 0.5);" in card
    assert "finetune_control.py --sparse DIR --steps 2 --control-average 0.5 --write" in card
    assert card.count("finetune_control.py --sparse DIR") == 1  # the earlier control's command left with its figures
    assert "the running average of its weights (decay 0.5)" in out.read_text()
    script = [sys.executable, "bench/attention/finetune_control.py", "--control-average", "1"]
    proc = subprocess.run(script, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and "--control-average 1.0 must be in [0, 1)" in proc.stderr
