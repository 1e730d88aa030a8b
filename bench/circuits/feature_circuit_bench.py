"""Attribution graphs and feature-level query circuits (issue #24's performance and results goals), each part
in its own subprocess (bench/peers/workbench_graph.py) and its own section of the report, so a part can be run,
resumed or re-rendered alone without touching the others:

    python bench/circuits/feature_circuit_bench.py --part graph --transcoders SET [--lengths 16,32,64,128]
    python bench/circuits/feature_circuit_bench.py --part qk --transcoders SET [--reps 3]   # --qk's cost (results/graph_qk.md)
    python bench/circuits/feature_circuit_bench.py --part qk --transcoders SET --render   # from the rounds finished
    python bench/circuits/feature_circuit_bench.py --part bounded      # GPT-2-small shape, 1,024 tokens (~17 CPU min; resumes)
    python bench/circuits/feature_circuit_bench.py --part bounded --render   # its section from the progress file so far
    python bench/circuits/feature_circuit_bench.py --part families --transcoders SET [--n 20]   # resumes per query
    python bench/circuits/feature_circuit_bench.py --quick              # smoke run: a demo set, short prompts, 1 query
    python bench/circuits/feature_circuit_bench.py --part tracer --transcoders CLT --lengths 64   # circuit-tracer on a CLT

graph: time and peak memory against prompt length on the embedded model, and a few IOI circuits' time (goals: a
64-token graph <= 5 s, a feature circuit <= 30 s). bounded: a random GPT-2-small-shaped model with random Top-k
transcoders (24,576 latents, k = 32) on a 1,024-token prompt, 7,500 features kept (goal: within 8 GB). families:
held-out queries per task family, feature circuit vs top-k vs the component circuit's heads.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness  # noqa: E402

from workbench.sae.clt_io import is_clt  # noqa: E402

OUT = harness.BENCH / "results" / "feature_circuits.md"
FAMILIES = ("greater_than", "facts", "addition", "ioi", "induction")  # the fast ones first
BOUNDED = dict(n_tokens=1024, k=32, n_latents=24576, max_feature_nodes=7500, batch=1, shape={})
QUICK_BOUNDED = dict(n_tokens=24, k=4, n_latents=128, max_feature_nodes=40, batch=8, shape=dict(n_layers=2, d_model=64))


def write_section(path: Path, name: str, lines: list[str]) -> None:
    """Replace the report's section `name` (between its markers), or append it: each part is measured alone."""
    start, end = f"<!-- part:{name} -->", f"<!-- /part:{name} -->"
    text = path.read_text() if path.is_file() else "# Attribution graphs and feature circuits\n"
    block = "\n".join([start, *lines, end])
    if start in text and end in text:
        before, rest = text.split(start, 1)
        text = before + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    harness.write_text(path, text)


def header(info: dict, threads: str, title: str) -> list[str]:
    return ["", f"## {title}", ""] + harness.machine_lines(
        info, {}, threads, "times are single runs; CPU seconds (this process) are the figures to compare"
    )


def prompt_tokens(n: int) -> list[int]:
    """The first n tokens of synthetic IOI prompts joined (BOS first), the same text for every length."""
    from workbench.corpus import tasks
    from workbench.models import load

    model, _ = load("tiny", device="cpu")
    text = " ".join(q.prompt for q in tasks.queries("ioi", 40, seed=0, tokenizer=model.tokenizer))
    toks = model.to_tokens(text)[0][:n].tolist()
    if len(toks) < n:
        raise SystemExit(f"the prompt text has {len(toks)} tokens, fewer than {n}")
    return toks


def circuit_lines(queries: list[dict]) -> list[str]:
    """The feature-circuit table: one row per query."""
    head = ["", "## Feature-level query circuits (IOI, target NDF 0.8, 1 resampled counterfactual)", ""]
    return head + harness.table(
        [
            "tokens",
            "nodes of",
            "circuit nodes",
            "circuit edges",
            "NDF (in-sample: the query searched)",
            "top-k NDF, same size",
            "graph replacement score",
            "CPU s (wall s)",
        ],
        [
            [
                q["n_tokens"],
                q["universe"],
                q["nodes"],
                q["edges"],
                f"{q['ndf']:.3f}",
                f"{q['topk_ndf']:.3f}",
                f"{q['replacement']:.3f}",
                f"{q['cpu_seconds']:.1f} ({q['seconds']:.1f})",
            ]
            for q in queries
        ],
    )


def graph_part(args, info, threads, base) -> list[str]:
    """Graph time and memory against prompt length, then a few IOI circuits' time (the embedded model)."""
    rows = []
    for n in [int(x) for x in args.lengths.split(",") if x]:
        r = harness.run_side(
            "main", "workbench_graph.py", {**base, "mode": "graph", "tokens": prompt_tokens(n)}, f"fg{n}"
        )
        rows.append(
            [
                n,
                r["active"],
                r["rows"],
                r["kept_edges"],
                f"{r['cpu_seconds']:.2f} ({r['seconds']:.1f})",
                f"{r['cpu_seconds_with_heads']:.2f} ({r['seconds_with_heads']:.1f})",
                f"{r['cpu_seconds_with_qk']:.2f} ({r['seconds_with_qk']:.1f}), "
                f"{r['cpu_seconds_with_qk'] / r['cpu_seconds_with_heads']:.1f}x, {r['qk_entries']} entries",
                f"{r['graph_peak_mb_above_start']:.0f}",
                f"{r['peak_rss_mb']:.0f}",
            ]
        )
        print(rows[-1], flush=True)
    cfg = {**base, "mode": "circuit", "task": "ioi", "n": args.queries, "seed": 0, "target_ndf": 0.8, "samples": 1}
    c = harness.run_side("main", "workbench_graph.py", cfg, "fcirc")
    lines = header(info, threads, "Graph time and memory against prompt length (the embedded model)")
    lines += [f"- Transcoder set: {base['transcoders']}", ""]
    lines += harness.table(
        [
            "tokens",
            "active features",
            "features given rows",
            "kept edges",
            "graph CPU s (wall s), no head split",
            "graph CPU s (wall s), with head split",
            "with head split and --qk: CPU s (wall s), x head split, QK entries",
            "graph peak MB above start",
            "process peak RSS MB",
        ],
        rows,
    )
    return (
        lines
        + circuit_lines(c["queries"])
        + ["", "Goals (issue #24): a 64-token graph <= 5 s, a feature circuit <= 30 s."]
    )


QK_OUT = harness.BENCH / "results" / "graph_qk.md"
QK_GPT2 = dict(
    gpt2=True, n_tokens=64, k=32, n_latents=24576, shape={}, max_feature_nodes=256
)  # BOUNDED's model and set
# at 64 tokens: its ~24,000 active features all given rows take > 4 CPU min per graph here, so the 256 most influential


def qk_side(args, cfg: dict, i: int) -> dict:
    """One model's paired rounds (workbench_graph.py's qk mode). A side stopped at its time limit (--qk-timeout)
    keeps the rounds it finished (its progress file, rewritten after each round); --render reads those files."""
    progress = harness.WORK / f"fqk{i}.progress.json"
    if not args.render:
        progress.unlink(missing_ok=True)
        cfg = {**cfg, "mode": "qk", "reps": args.reps, "progress": str(progress)}
        try:
            return harness.run_side("main", "workbench_graph.py", cfg, f"fqk{i}", timeout=args.qk_timeout)
        except harness.PeerError as e:
            stopped = e.summary
    else:
        stopped = "the side's progress file"
    if not progress.is_file():
        return {"stopped": f"{stopped}, before its first round"}
    return {**json.loads(progress.read_text()), "stopped": stopped}


def qk_row(name: str, r: dict, reps: int) -> list:
    if "cpu_seconds_heads" not in r:
        return [name] + ["-"] * 7 + [f"not measured ({r['stopped']})"]
    ratios = sorted(q / h for h, q in zip(r["cpu_seconds_heads"], r["cpu_seconds_qk"]))
    done = len(ratios)
    note = f"; {done} of {reps} rounds ({r['stopped']})" if r.get("stopped") and done < reps else ""
    return [
        name,
        r["n_tokens"],
        r["active"],
        r["rows"],
        f"{r['kept_edges']:,}",
        f"{r['qk_entries']:,} ({r['qk_uses']:,} uses)",
        ", ".join(f"{x:.2f}" for x in r["cpu_seconds_heads"]),
        ", ".join(f"{x:.2f}" for x in r["cpu_seconds_qk"]),
        f"{ratios[done // 2]:.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f}){note}",
    ]


def qk_part(args, info, threads, base) -> list[str]:
    """What `circuit graph --qk` costs over the graph with its head split (the default), paired in one process per
    model: the embedded model through its transcoder set, and a GPT-2-small-shaped random model with random Top-k
    transcoders, both at 64 tokens (goal: <= 1.5x, to make it the default)."""
    sides = {
        f"embedded model (tiny), its transcoder set ({base['transcoders'] or 'random'})": {
            **base,
            "tokens": prompt_tokens(64),
        },
        "GPT-2-small-shaped random model, random Top-k transcoders (24,576 latents, k 32)": {
            **base,
            **QK_GPT2,
            **({"shape": QUICK_BOUNDED["shape"], "n_latents": 128, "k": 4} if args.quick else {}),
            "transcoders": None,
            "set_dir": str(harness.WORK / "feature_circuits" / "random-gpt2-set"),
        },
    }
    stored = harness.WORK / "fqk.info.json"  # the run's machine, commit and date, for --render
    if args.render:
        info, threads = json.loads(stored.read_text()).values()
    else:
        harness.write_text(stored, json.dumps({"info": info, "threads": threads}))
    rows = []
    for i, (name, cfg) in enumerate(sides.items()):
        rows.append(qk_row(name, qk_side(args, cfg, i), args.reps))
        print(rows[-1], flush=True)
    lines = header(
        info, threads, "What QK attribution costs (`circuit graph --qk` against the graph with its head split)"
    )
    lines += [
        f"- Each model in one process: {args.reps} rounds of the graph with its head split then the same graph with "
        "QK attribution, on the same 64 tokens (the embedded model: the IOI text of the graph part; the GPT-2-shaped "
        "one: random tokens), batch 32, one thread; rows: every feature with influence (the embedded model), the 256 "
        "most influential (GPT-2-shaped: its ~24,000 active random features would take minutes per graph on this "
        "shared CPU); CPU seconds of each build; the ratio is the median (range) of the rounds' paired ratios",
        "",
    ]
    cols = ["model", "tokens", "active features", "features given rows", "kept edges", "QK entries"]
    cols += ["CPU s, head split", "CPU s, head split and QK", "QK / head split"]
    return lines + harness.table(cols, rows) + ["", "Goal (issue #45): <= 1.5x on both, to make it the default."]


def tracer_part(args, info, threads, base) -> list[str]:
    """circuit-tracer 0.5's `attribute` beside build_graph on the same prompts, model and (exported) transcoders or
    cross-layer transcoder."""
    from workbench.corpus import tasks
    from workbench.models import load

    model, _ = load("tiny", device="cpu")
    ioi = tasks.queries("ioi", 1, seed=0, tokenizer=model.tokenizer)[0]
    prompts = [prompt_tokens(n) for n in [int(x) for x in args.lengths.split(",") if x]]
    prompts.append(model.to_tokens(ioi.prompt)[0].tolist())
    r = harness.run_side("main", "workbench_graph.py", {**base, "mode": "tracer", "prompts": prompts}, "ftracer")
    if is_clt(args.transcoders):
        title = "circuit-tracer 0.5 side by side through a cross-layer transcoder (the embedded model, the same CLT)"
        what = (
            f"- CLT: {base['transcoders']}, trained here (`workbench sae train --clt`) and read by circuit-tracer's "
            "own `load_clt` from the circuit_tracer/ files written beside it (BatchTopK as JumpReLU at its threshold, "
            "every scale folded in, the same input hook ln2.hook_normalized), in its TransformerLens ReplacementModel "
            "(the embedded model's config and weights); each feature writes every later layer in both"
        )
    else:
        title = "circuit-tracer 0.5 side by side (the embedded model, the same transcoders)"
        what = (
            f"- Transcoder set: {base['transcoders']}, exported by workbench/circuits/feature/tracer_export.py to "
            "circuit-tracer's TranscoderSet (Top-k with negatives zeroed, the encoder's input bias folded into its "
            "bias, the same input hook ln2.hook_normalized) and its TransformerLens ReplacementModel (the embedded "
            "model's config and weights)"
        )
    lines = header(info, threads, title)
    lines += [
        what,
        "- Both: the top logits covering 0.95 of the probability (at most 10), every feature given a row, batch 32, "
        "one thread; circuit-tracer's `attribute` vs `build_graph(heads=False)`, CPU seconds of each call",
        "- circuit-tracer leaves out every feature and error at position 0 (BOS); the workbench keeps them and "
        'gives rows only to features with influence, so the node sets differ; "max rel. diff": the largest '
        "difference between the two adjacencies over the entries both have (shared features, errors off position 0, "
        "tokens, logits), relative to the largest entry",
        "- circuit-tracer 0.5 needs one shim here: it imports huggingface_hub.constants.HF_HUB_ENABLE_HF_TRANSFER, "
        "removed in huggingface_hub 1.x (tracer_export.py sets it to False; it only picks a download path)",
        "",
    ]
    cols = ["tokens", "CPU s circuit-tracer", "CPU s workbench", "features (CT / WB)", "nonzero edges (CT / WB)"]
    cols += ["kept edges at 0.8 / 0.98 (CT / WB)", "shared features", "shared entries", "max rel. diff"]
    rows = [
        [
            p["n_tokens"],
            f"{p['ct_cpu_seconds']:.2f}",
            f"{p['wb_cpu_seconds']:.2f}",
            f"{p['ct_features']} / {p['wb_features']}",
            f"{p['ct_edges']:,} / {p['wb_edges']:,}",
            f"{p['ct_kept_edges']:,} / {p['wb_kept_edges']:,}",
            p["shared_features"],
            f"{p['shared_entries']:,}",
            f"{p['max_rel_diff']:.1e}",
        ]
        for p in r["prompts"]
    ]
    return lines + harness.table(cols, rows) + ["", f"The last row is the IOI query {ioi.prompt!r}."]


def bounded_lines(cfg: dict, r: dict, done: bool, info: dict, threads: str) -> list[str]:
    """The bounded-memory section, from the side's result (done) or its progress file so far."""
    title = "Bounded memory: GPT-2-small-shaped random model, 1,024-token prompt" + ("" if done else " (PARTIAL)")
    lines = header(info, threads, title)
    lines += [
        f"- Model: random HookedTransformer, 12 layers, d_model 768, 12 heads, d_mlp 3072, vocabulary 50,257 "
        f"(shape overrides: {cfg['shape'] or 'none'}); one random Top-k transcoder per layer ({cfg['n_latents']:,} "
        f"latents, k = {cfg['k']}, input ln2.hook_normalized), saved and loaded through sae-lens",
        f"- Graph: {cfg['n_tokens']:,} random tokens, `build_graph(max_feature_nodes={cfg['max_feature_nodes']}, "
        f"batch_size={cfg['batch']}, heads=False, work_dir=...)`, the top logits as targets: each row computed "
        "once and written in 128 MiB chunk files under the work folder (a stopped build resumes from them; "
        "[rows x all sources] is ~12 GB, over max_matrix_mib), read back one chunk at a time for the chosen "
        "columns; each backward pass runs the prompt only up to its targets' last position rounded up to 128 "
        "tokens (one forward pass held per such span); the feature writes kept (n_active x d, 1.2 GB)",
        "- Peak RSS: the whole process (model and transcoders included), VmHWM reset after loading them",
        "",
    ]
    keys = ["tokens", "active features", "rows", "kept nodes", "kept edges", "backward passes", "peak RSS MB"]
    keys += ["CPU s", "wall s", "replacement", "completeness"]
    row = [
        cfg["n_tokens"],
        r.get("active", "-"),
        r.get("rows", "-"),
        r.get("kept_nodes", "-"),
        r.get("kept_edges", "-"),
        r["backward_calls"],
        f"{r['peak_rss_mb']:,.0f}",
        f"{r['cpu_seconds']:,.0f}",
        f"{r['seconds']:,.0f}",
        f"{r['replacement']:.3f}" if done else "-",
        f"{r['completeness']:.3f}" if done else "-",
    ]
    lines += harness.table(keys, [row])
    if not done:
        total = -(-10 // cfg["batch"]) + -(-cfg["max_feature_nodes"] // cfg["batch"])
        per = r["cpu_seconds"] / max(1, r["backward_calls"])
        lines += [
            "",
            f"NOT FINISHED: the figures are the run's progress file at {r['seconds']:,.0f} s wall: the peak RSS so "
            f"far and {r['backward_calls']} of at most {total:,} backward passes in this process ({per:.2f} CPU s "
            "each so far; passes of the top layers are the longest); no graph yet, so no edges, scores or final "
            "peak. Resume: the same command (the build continues from its chunk files).",
        ]
    return lines


def prune_part(args, info, threads) -> list[str]:
    """The end of the bounded case's build alone (pruning and scores), measured apart from the full run."""
    b = QUICK_BOUNDED if args.quick else BOUNDED
    L = b["shape"].get("n_layers", 12)
    cfg = dict(mode="prune", rows=b["max_feature_nodes"], logits=10, errors=L * b["n_tokens"], tokens=b["n_tokens"])
    r = harness.run_side("main", "workbench_graph.py", cfg, "fprune")
    lines = header(info, threads, "Bounded memory: the pruning at the end of the build, alone")
    lines += [
        f"- `influence.prune` (0.8 / 0.98) and `influence.graph_scores` on a random adjacency of the bounded case's "
        f"shape {r['adjacency']} (features x features lower-triangular: acyclic like a real graph), in a process "
        "holding nothing else; the figure adds to what the build holds then (model, transcoders, the frozen "
        "prompt: the RSS before the sweep's first forward pass)",
        "",
    ]
    cols = ["adjacency", "peak MB above start", "CPU s", "kept edges"]
    row = [" x ".join(f"{x:,}" for x in r["adjacency"]), f"{r['peak_above_start_mb']:,.0f}"]
    return lines + harness.table(cols, [row + [f"{r['cpu_seconds']:.1f}", f"{r['kept_edges']:,}"]])


def bounded_part(args, info, threads) -> list[str]:
    cfg = {**(QUICK_BOUNDED if args.quick else BOUNDED), "mode": "bounded"}
    work, name = harness.WORK / "feature_circuits", "bounded-quick" if args.quick else "bounded"
    cfg.update(
        set_dir=str(work / f"gpt2-shaped-set-{cfg['n_latents']}-{cfg['k']}"),
        progress=str(work / f"{name}.progress.json"),
        rows=str(work / f"{name}-rows"),  # the build's chunk files: a stopped run resumes from them
    )
    result = work / f"{name}.result.json"  # the finished run's figures, so its section can be rendered again
    if args.render:
        if result.is_file():
            return bounded_lines(cfg, json.loads(result.read_text()), True, info, threads)
        progress = Path(cfg["progress"])
        if not progress.is_file():
            raise SystemExit(f"no progress file at {progress}: start the run first (--part bounded)")
        return bounded_lines(cfg, json.loads(progress.read_text()), False, info, threads)
    work.mkdir(parents=True, exist_ok=True)
    r = harness.run_side("main", "workbench_graph.py", cfg, "fbounded", timeout=48 * 3600, mem_cap_mb=args.mem_cap_mb)
    harness.write_text(result, json.dumps(r))
    return bounded_lines(cfg, r, True, info, threads)


def mean(xs, digits: int = 3) -> str:
    xs = [x for x in xs if x is not None]
    return f"{sum(xs) / len(xs):.{digits}f}" if xs else "-"


def family_summary(task: str, store: dict, n: int) -> list:
    """One family's row: means over its finished, answered queries."""
    rows = [r for r in store["rows"].values() if "skipped" not in r]
    seen = [r["in_training_cache"] for r in rows]
    jac = [
        len(set(r["heads"]) & set(r["component_heads"])) / max(1, len(set(r["heads"]) | set(r["component_heads"])))
        for r in rows
    ]
    covered = [set(r["component_heads"]) <= set(r["heads"]) for r in rows]
    return [
        task,
        f"{len(store['rows'])} of {n}" + ("" if len(store["rows"]) >= n else " (PARTIAL)"),
        len(rows),
        "not checked" if None in seen else f"{sum(seen)} of {len(seen)}",
        mean([r["nodes"] for r in rows], 1),
        mean([r["topk_nodes"] for r in rows], 1),
        mean([r["edges"] for r in rows], 1),
        mean(r["ndf"] for r in rows),
        mean(r["replacement"] for r in rows),
        mean(r["completeness"] for r in rows),
        mean(jac),
        f"{sum(covered)} of {len(covered)}",
        mean([r["cpu_seconds"] for r in rows], 1),
    ]


def families_part(args, info, threads, base) -> list[str]:
    """Held-out queries per family (resumable per query: the stores under bench/work/feature_circuits/)."""
    work = harness.WORK / "feature_circuits"
    work.mkdir(parents=True, exist_ok=True)
    tasks = args.families.split(",")
    cache = None
    if base["transcoders"]:
        manifest = json.loads((Path(base["transcoders"]) / "transcoders.json").read_text())
        cache = str((Path(base["transcoders"]) / manifest["cache"]).resolve())
    rows = []
    for task in tasks:
        store = work / f"family-{task}-n{args.n}.json"
        if not args.render:
            cfg = {**base, "mode": "family", "task": task, "n": args.n, "seed": 0, "samples": 1, "target_ndf": 0.8}
            cfg.update(store=str(store), cache=cache)
            harness.run_side("main", "workbench_graph.py", cfg, f"ffam-{task}", timeout=24 * 3600)
        if store.is_file():
            rows.append(family_summary(task, json.loads(store.read_text()), args.n))
    lines = header(info, threads, f"Feature circuits on held-out queries ({args.n} per family, target NDF 0.8)")
    lines += [
        f"- Transcoder set: {base['transcoders'] or 'RANDOM (quick run: a random Top-k set, meaningless circuits)'}",
        "- Queries: `tasks.queries(task, n, seed=0, split='heldout')`: combinations the synthetic corpus's train "
        "split never contains (workbench/corpus/tasks.py is_heldout), one resampled counterfactual each; "
        '"in training cache": how many prompts (their token ids, BOS dropped) occur anywhere in the train split of '
        "the cache the transcoders were trained on (the set's manifest names it), checked per query",
        "- Search: the default drop rule (`SearchConfig.drops = auto`, ordered for feature circuits); "
        "`circuit find --drops greedy` is the exhaustive rule of the earlier tables",
        "- NDF is in-sample (searched and scored on the same query); top-k nodes: the fewest top-k nodes of the "
        "query's own attribution patching reaching NDF 0.8; heads: those carrying >= 5% of a circuit edge's split "
        "(feature) vs the heads among the component-level query circuit's nodes at NDF 0.8 (component); "
        '"component heads all named": queries whose every component head is among the feature circuit\'s heads',
        f"- Per-query rows: {work}/family-TASK-n{args.n}.json (resume: run the same command again)",
        "",
    ]
    header_row = ["family", "queries done", "answered", "in training cache", "circuit nodes", "top-k nodes"]
    header_row += ["circuit edges", "NDF", "replacement", "completeness", "heads Jaccard", "component heads all named"]
    return lines + harness.table(header_row + ["CPU s per feature circuit"], rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parts = ["graph", "qk", "tracer", "bounded", "prune", "families"]
    ap.add_argument("--part", choices=parts + ["all"], default="all", help="what to measure (default: all)")
    ap.add_argument(
        "--transcoders",
        type=Path,
        default=Path("workspace/transcoders/tiny-topk"),
        help="a transcoder set or CLT folder of the embedded model (default: the demo's, %(default)s)",
    )
    ap.add_argument("--lengths", default="16,32,64,128", help="prompt lengths (default: %(default)s)")
    ap.add_argument("--queries", type=int, default=5, help="IOI queries for the circuit timing (default: %(default)s)")
    ap.add_argument("--n", type=int, default=20, help="held-out queries per family (default: %(default)s)")
    ap.add_argument("--families", default=",".join(FAMILIES), help="task families (default: %(default)s)")
    ap.add_argument("--reps", type=int, default=3, help="paired rounds of the qk part (default: %(default)s)")
    ap.add_argument(
        "--qk-timeout", type=float, default=7200, help="seconds per model of the qk part (default: %(default)s)"
    )
    ap.add_argument("--render", action="store_true", help="re-render the part from what is stored, measure nothing")
    ap.add_argument("--mem-cap-mb", type=float, default=12000, help="stop the bounded run above this RSS")
    ap.add_argument("--quick", action="store_true", help="smoke run: tiny shapes, a random set, 1 query, 16 tokens")
    harness.add_common_args(ap, OUT, threads=1)
    args = ap.parse_args()
    if args.quick:
        args.lengths, args.queries, args.n, args.families = "16", 1, 1, "ioi"
        if args.out == OUT:
            args.out = harness.WORK / "feature_circuits_quick.md"
    has_set = (args.transcoders / "transcoders.json").is_file() or is_clt(args.transcoders)
    if args.part in ("graph", "qk", "families") and not has_set and not args.quick:
        raise SystemExit(f"no transcoder set at {args.transcoders}: run `workbench demo` or pass --transcoders SET")
    threads = harness.set_threads(args.threads)
    info = harness.machine_info()
    base = {"model": "tiny", "transcoders": str(args.transcoders.resolve()) if has_set else None}
    base.update(k=4, n_latents=64, set_dir=str(harness.WORK / "feature_circuits" / "random-embedded-set"))
    for part in parts if args.part == "all" else [args.part]:
        if part == "graph" and not args.render:
            write_section(args.out, "graph", graph_part(args, info, threads, base))
        elif part == "qk":
            write_section(QK_OUT if args.out == OUT else args.out, "qk", qk_part(args, info, threads, base))
        elif part == "tracer" and not args.render and base["transcoders"]:
            section = "tracer_clt" if is_clt(args.transcoders) else "tracer"
            write_section(args.out, section, tracer_part(args, info, threads, base))
        elif part == "bounded":
            write_section(args.out, "bounded", bounded_part(args, info, threads))
        elif part == "prune" and not args.render:
            write_section(args.out, "prune", prune_part(args, info, threads))
        elif part == "families":
            write_section(args.out, "families", families_part(args, info, threads, base))
    print(args.out.read_text())


if __name__ == "__main__":
    main()
