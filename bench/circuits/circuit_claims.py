"""Circuit-size claims, base vs sparse attention: per task family, on held-out queries, the component circuit at
each NDF target (heads, MLPs, edges; EAP-IG search with exact patching, `workbench.attention.compare`) and the
attention entries it needs, on a base model and its sparse-attention version, with paired 95% intervals; and,
through transcoders (per-layer sets or CLTs, a store per kind), the heads carrying the attention-mediated attribution (`workbench.attention.head_flow`).

    python bench/circuits/circuit_claims.py --base tiny --sparse data/models/tiny-sparse [--n 20] [--transcoders B S]
    python bench/circuits/circuit_claims.py --base tiny --sparse RUN --control RUN/control [--transcoders B C S]
    python bench/circuits/circuit_claims.py --base data/models/small --base-only [--n 20]   # the base model's sizes alone
    python bench/circuits/circuit_claims.py ... --render                                    # the report, measure nothing

With --control the report closes with "What the split shows", rendered from the same rows (each pair's rows whose
paired interval excludes 0: base - sparse, control - sparse, base - control), so a re-render loses nothing.

Resumable: each family's JSON under --results is rewritten after every query, and a rerun of the same command
measures only what is missing (a stored file made with other settings is refused, not mixed in). A paired run
takes the base side from a --base-only run of the same settings instead of measuring it again, read per query, so the
two can run side by side (the paired run measures a base side itself only where the other has not stored it yet).
`--from-end` beside the same command without it measures the queries from the last one back into an ahead-*.json
beside the store, until the two meet (the query where they meet may be measured by both); the ordered run takes those
rows as stored (two cores on one family).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness  # noqa: E402
from clt_bench import eval_figures  # noqa: E402
from head_flow_bench import family_row  # noqa: E402
from head_flow_bench import header as heads_header  # noqa: E402

from workbench.attention.card import CONTROL_DIR  # noqa: E402
from workbench.attention.claims import MEASURES, format_gap, model_sides, paired, pairs, side_values, undecided  # noqa: E402
from workbench.browse import HEAD_FLOW_KINDS  # noqa: E402
from workbench.intervals import t_interval  # noqa: E402

FAMILIES = ("ioi", "induction", "greater_than", "addition", "facts")
RESULTS = harness.BENCH / "results" / "circuit_claims"
# what must match for stored queries to be continued (or a base-only run's base side reused)
SETTINGS = ("task", "n", "targets", "seed", "split", "samples", "ig_steps", "base_model", "token_removal")


def tag(spec: str) -> str:
    """A model's name in file names: its folder's, a run's control folder named with its run (tiny-fair-control)."""
    path = Path(spec)
    return f"{path.parent.name}-control" if path.name == CONTROL_DIR and path.parent.name else path.name


def run_folder(args, control: bool = True) -> Path:
    """The run's store folder (control False: the base-vs-sparse one a control run takes those two sides from)."""
    if args.base_only:
        return args.results / tag(args.base)
    middle = f"-vs-{tag(args.control)}" if args.control and control else ""
    return args.results / f"{tag(args.base)}{middle}-vs-{tag(args.sparse)}"


def store_path(folder: Path, args, task: str, kind: str = "") -> Path:
    return folder / f"{kind}{args.split}-{task}-n{args.n}.json"


def check_settings(stored: dict, now: dict, path: Path) -> None:
    for key in SETTINGS + ("sparse_model", "control_model"):
        if stored.get(key) != now.get(key):
            raise SystemExit(
                f"{path} was made with {key}={stored.get(key)!r}, this run has {key}={now.get(key)!r}: "
                "delete it or pass another --results folder"
            )


def ahead_path(folder: Path, args, task: str) -> Path:
    """The query rows a --from-end run measures ahead of the ordered store in `folder`, by query index."""
    return store_path(folder, args, task, "ahead-")


def stored_rows(path: Path, now: dict, prompts: list[str], keys: tuple[str, ...] = SETTINGS) -> dict[int, dict]:
    """A store's query rows by index (an ordered store's list, an ahead store's map): those of a store with the
    same settings (`keys`), each for the same prompt (none: empty)."""
    done = json.loads(path.read_text()) if path.is_file() else {}
    if not done or any(done.get(k) != now.get(k) for k in keys):
        return {}
    rows = {int(i): q for i, q in done["ahead"].items()} if "ahead" in done else dict(enumerate(done["queries"]))
    return {i: q for i, q in rows.items() if i < len(prompts) and q["prompt"] == prompts[i]}


def reuse_sources(args) -> list[tuple[Path, tuple[str, ...], tuple[str, ...], str]]:
    """Where a run takes sides measured by others with the same settings: (folder, sides, settings to match, the
    run's name). A paired run takes the base side from a --base-only run; a control run also the base and sparse
    sides from the base-vs-sparse run of the same sparse model."""
    if args.base_only:
        return []
    found = [(args.results / tag(args.base), ("base",), SETTINGS, "--base-only run")]
    if args.control:
        pair = (run_folder(args, control=False), ("base", "sparse"), SETTINGS + ("sparse_model",), "base-vs-sparse run")
        found.append(pair)
    return found


def reusable_base(args, task: str, now: dict, prompts: list[str]) -> dict[int, dict]:
    """The sides of each query measured by other runs (reuse_sources, ordered or --from-end), by query index."""
    found: dict[int, dict] = {}
    for folder, sides, keys, _ in reuse_sources(args):
        ordered, ahead = store_path(folder, args, task), ahead_path(folder, args, task)
        rows = {**stored_rows(ahead, now, prompts, keys), **stored_rows(ordered, now, prompts, keys)}
        for i, q in rows.items():
            found.setdefault(i, {}).update({side: q[side] for side in sides if side in q})
    return found


def family_setup(args, models: dict, task: str) -> tuple[dict, dict, bool, list]:
    """A family's run settings (cfg), its empty result (the settings a store is checked against), the attention
    rule and its queries."""
    from workbench.attention.compare import compare_result, renormalises
    from workbench.corpus import tasks

    rule = renormalises(models[list(models)[-1]])
    cfg = {"task": task, "n": args.n, "targets": list(args.targets), "seed": 0, "split": args.split}
    cfg.update(samples=args.samples, ig_steps=5)
    qs = tasks.queries(task, args.n, seed=0, tokenizer=models["base"].tokenizer, split=args.split)
    return cfg, compare_result(models, [], cfg, rule), rule, qs


def measure_family(args, models: dict, task: str, path: Path) -> None:
    """The family's queries not yet stored, one at a time, the JSON rewritten (atomically) after each."""
    from workbench.attention.compare import compare_result, query_row

    cfg, res, rule, qs = family_setup(args, models, task)
    stored = json.loads(path.read_text()) if path.is_file() else None
    if stored:
        check_settings(stored, res, path)
    rows, runs = (stored["queries"], stored["runs"]) if stored else ([], [])
    if len(rows) >= args.n:
        return
    runs.append({**run_meta(), "from_query": len(rows)})
    prompts = [q.prompt for q in qs]
    for i in range(len(rows), args.n):
        # read per query: --from-end and --base-only runs beside this one keep adding
        ahead = stored_rows(ahead_path(path.parent, args, task), res, prompts)
        known = reusable_base(args, task, res, prompts).get(i)
        rows.append(ahead[i] if i in ahead else query_row(models, qs[i], args.targets, args.samples, 5, 0, rule, known))
        runs[-1]["to_query"] = i + 1
        harness.write_text(path, json.dumps({**compare_result(models, rows, cfg, rule), "runs": runs}, indent=1))
        print(f"{task} {i + 1}/{args.n}", flush=True)


def measure_from_end(args, models: dict, task: str, path: Path) -> None:
    """--from-end: queries from the last one back into the ahead store, one at a time, until the ordered store
    `path` (its run beside this one working on the next query) reaches them; the ordered run then takes them."""
    from workbench.attention.compare import query_row

    _, res, rule, qs = family_setup(args, models, task)
    ahead_file = ahead_path(path.parent, args, task)
    stored = json.loads(ahead_file.read_text()) if ahead_file.is_file() else None
    if stored:
        check_settings(stored, res, ahead_file)
    ahead, runs = (stored["ahead"], stored["runs"]) if stored else ({}, [])
    runs.append(run_meta())
    prompts = [q.prompt for q in qs]
    for i in reversed(range(args.n)):
        if i <= len(json.loads(path.read_text())["queries"] if path.is_file() else []):
            break
        if str(i) not in ahead:
            known = reusable_base(args, task, res, prompts).get(i)
            ahead[str(i)] = query_row(models, qs[i], args.targets, args.samples, 5, 0, rule, known)
            harness.write_text(ahead_file, json.dumps({**res, "runs": runs, "ahead": ahead}, indent=1))
            print(f"{task} query {i + 1} of {args.n} measured ahead", flush=True)


def run_meta() -> dict:
    return {
        "commit": harness.commit(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "load_avg_at_start": " ".join(f"{x:.1f}" for x in os.getloadavg()),
    }


def dictionary_kind(folder: Path) -> str:
    """'clt' for a cross-layer transcoder folder, 'set' for a per-layer transcoder set (heads stores are per kind)."""
    from workbench.sae.clt_io import is_clt

    return "clt" if is_clt(folder) else "set"


def measure_heads(args, models: dict, task: str, path: Path) -> None:
    """One family through the two dictionaries (per family: a stopped family is measured again)."""
    from workbench.attention.head_flow import compare_heads
    from workbench.circuits.feature.graph_config import HeadFlowConfig

    if path.is_file():
        return
    meta, t0 = run_meta(), time.perf_counter()
    cfg = HeadFlowConfig(share=args.share, split=args.split)
    sets = dict(zip(models, args.transcoders, strict=True))  # base, control (if any), sparse
    control = {"control": models["control"], "control_set": sets["control"]} if "control" in models else {}
    res = compare_heads(
        models["base"], models["sparse"], sets["base"], sets["sparse"], task, args.n, cfg=cfg, **control
    )
    res["runs"] = [{**meta, "wall_seconds": time.perf_counter() - t0}]
    harness.write_text(path, json.dumps(res, indent=1))


# ---- the per-query statistics (workbench.attention.claims) as table cells ----


def fmt_interval(iv, digits: int = 2) -> str:
    return "-" if iv is None else iv.format(f"{{:.{digits}f}}")


def paired_row(res: dict, measure, t: str) -> list:
    """base vs sparse (and with a control, each pair of its split) over the queries every model has a gap on:
    the queries, each model's mean, the ratio of base's and sparse's means, per pair the geometric mean of the
    per-query ratios and the difference with their intervals, and the intervals that include no effect."""
    found = {label: paired(res, measure, t, a, b) for label, (a, b) in pairs(res).items()}
    p = found["base - sparse"]
    if p is None:
        return [0] + ["-"] * (len(model_sides(res)) + 1 + 2 * len(found)) + ["no query with a value on both"]
    means = {side: v for q in filter(None, found.values()) for side, v in q.items() if side in model_sides(res)}
    cells = [p["n"], *(f"{means[s]:.2f}" if s in means else "-" for s in model_sides(res))]
    cells.append("-" if p["ratio_of_means"] is None else f"{p['ratio_of_means']:.2f}")
    for q in found.values():
        cells += ["-", "-"] if q is None else [fmt_interval(q["ratio"]), fmt_interval(q["difference"])]
    flags = [f"{label}: {f}" if len(found) > 1 else f for label, q in found.items() if q for f in undecided(q)]
    return cells + ["; ".join(flags) or "-"]


def answers(res: dict, side: str) -> str:
    """The queries a model gets wrong (its top-1 not accepted by the task) and those skipped for a zero gap."""
    wrong = [
        f"#{i} {q['prompt']!r} -> {q[side]['top1']!r} (task: {q['task_answer']!r})"
        for i, q in enumerate(res["queries"])
        if not q[side]["correct"]
    ]
    skipped = [f"#{i}" for i, q in enumerate(res["queries"]) if "skipped" in q[side]]
    text = f"wrong on {len(wrong)}/{len(res['queries'])}" + (": " + "; ".join(wrong) if wrong else "")
    return text + (f"; skipped (no logit-difference gap): {', '.join(skipped)}" if skipped else "")


def seconds(res: dict, side: str) -> float:
    vals = [q[side]["seconds"] for q in res["queries"]]
    return sum(vals) / len(vals)


# ---- the report ----


def render_paired(results: dict[str, dict], measures: dict = MEASURES) -> list[str]:
    """One table per measure (table name -> claims.LEVELS key or a function of one side and the target): per
    family and target each model's mean and each pair's paired intervals (paper_edges.py passes its counts)."""
    first = next(iter(results.values()))
    header = ["family", "NDF", "queries", *(f"{s} mean" for s in model_sides(first)), "base / sparse (ratio of means)"]
    for label, (a, b) in pairs(first).items():
        named = "" if label == "base - sparse" else f"{label}: "
        header += [f"{named}geometric mean of per-query {a} / {b} [95% CI]", f"{named}{a} - {b} [95% CI]"]
    header.append("flags")
    lines = []
    for name, measure in measures.items():
        rows = [[task, t, *paired_row(res, measure, t)] for task, res in results.items() for t in targets(res)]
        lines += ["", f"### {name}", "", *harness.table(header, rows)]
    return lines


def render_base(results: dict[str, dict]) -> list[str]:
    """Section 1's table: one model's circuit sizes (mean with its Student-t 95% interval over the queries)."""
    first = next(iter(results.values()))
    total = first["components"]
    header = ["family", "NDF", "queries with a gap", f"heads (of {total['heads']})", f"MLPs (of {total['mlps']})"]
    header += ["component edges (of the graph's)", "attention entries"]
    rows = []
    for task, res in results.items():
        for t in targets(res):
            cells = []
            for measure in ("heads", "mlps", "component_edges", "token_entries"):
                v = side_values(res, "base", measure, t, sides=("base",))
                cells.append(fmt_interval(t_interval(v.values()) if v else None, 1))
            graph = {q["base"]["graph_edges"] for q in res["queries"] if "skipped" not in q["base"]}
            cells[2] += f" (of {', '.join(map(str, sorted(graph)))})"
            rows.append([task, t, len(side_values(res, "base", "heads", t, sides=("base",))), *cells])
    return harness.table(header, rows)


def targets(res: dict) -> list[str]:
    return [str(t) for t in res["targets"]]


def render_answers(results: dict[str, dict], sides: tuple[str, ...]) -> list[str]:
    lines = ["", "### Queries each model gets wrong", ""]
    for task, res in results.items():
        for side in sides:
            lines.append(f"- {task}, {side}: {answers(res, side)}")
    lines += ["", "### Seconds per query (measurement only, one thread)", ""]
    header = ["family", *(f"{s} s / query" for s in sides), "queries"]
    rows = [[task, *(f"{seconds(res, s):.1f}" for s in sides), len(res["queries"])] for task, res in results.items()]
    return lines + harness.table(header, rows)


def render_heads(kind: str, heads: dict[str, dict]) -> list[str]:
    if not heads:
        return []
    title = f"### Through {HEAD_FLOW_KINDS[kind]}: heads carrying the attention-mediated attribution, entries per edge"
    first = next(iter(heads.values()))
    lines = ["", title, ""]
    sets = first["transcoders"]
    lines.append(
        f"- Dictionaries: {', '.join(f'{side} {folder}' for side, folder in sets.items())}; share "
        f"{first['config']['share']}; base - sparse: mean per-query difference with its paired Student-t 95% interval"
    )
    lines += [f"- {side} dictionary: {dictionary_line(Path(folder))}" for side, folder in sets.items()]
    lines += [""] + harness.table(heads_header(first), [family_row(r) for r in heads.values()])
    if "control" not in sets:
        return lines
    header = ["family", "heads for the share, control (mean / median)", "from training: base - control heads"]
    header += ["from the gates: control - sparse heads", "entries per edge covering the share, control"]
    header += ["from training: base - control entries", "from the gates: control - sparse entries"]
    return (
        lines
        + ["", "Split through the control (paired over the same queries):", ""]
        + harness.table(header, [split_row(r) for r in heads.values()])
    )


def split_row(res: dict) -> list:
    """A family's head-flow row for the control: its counts and base - sparse split into training and gates."""
    c, train, gates = res["summary"]["control"], res["base_minus_control"], res["control_minus_sparse"]
    f = lambda key, d=1: f"{c[key]['mean']:.{d}f} / {c[key]['median']:.{d}f}"  # noqa: E731
    cells = [res["task"], f("heads_needed"), format_gap(train["heads_needed"]), format_gap(gates["heads_needed"])]
    return cells + [
        f("entries_covering", 2),
        format_gap(train["entries_covering"]),
        format_gap(gates["entries_covering"]),
    ]


def dictionary_line(folder: Path) -> str:
    """How a dictionary was trained (its saved config) and what `sae eval` measured of it on its cache's held-out
    rows, or that it has not been evaluated."""
    from workbench.circuits.feature.transcoders import TranscoderSet
    from workbench.sae.clt_io import is_clt

    if not folder.is_dir():
        return f"{folder} (not on this machine)"
    if is_clt(folder):
        saved = json.loads((folder / "clt.json").read_text())
        arch = saved["clt_config"]
    else:  # the first layer's member: every member of a set is trained by one recipe
        saved = json.loads((next(iter(TranscoderSet(folder).member_folders().values())) / "workbench.json").read_text())
        arch = saved["sae_config"]
    made = (
        f"{arch['architecture']} k {arch['k']}, {arch['n_latents']} latents per layer, "
        f"{saved['train_config']['n_tokens']:,} training tokens of {saved['data']['corpus']} on {saved['data']['model']} "
        f"(batch {saved['train_config']['batch_size']:,}, lr {saved['train_config']['lr']:g}"
        + (f", from a {saved['data']['cache_n_tokens']:,}-row cache)" if saved["data"].get("cache_n_tokens") else ")")
    )
    q = eval_figures(folder)
    if not q["replaced"]:
        return f"{made}; not evaluated (`workbench sae eval` writes metrics.json)"
    fvu = ", ".join(f"{v:.3f}" for v in q["fvu"] if v is not None)
    return (
        f"{made}; FVU per layer {fvu}; total L0 {q['l0']:.1f}; every MLP replaced at once: CE recovered "
        f"{q['replaced']['ce_loss_recovered']:.3f}, KL score {q['replaced']['kl_score']:.3f} (`workbench sae eval`, "
        "held-out cache rows)"
    )


def render(args, stores: dict[str, Path], heads: dict[str, dict[str, Path]]) -> str:
    results = {t: json.loads(p.read_text()) for t, p in stores.items() if p.is_file()}
    flows = {k: {t: json.loads(p.read_text()) for t, p in paths.items() if p.is_file()} for k, paths in heads.items()}
    partial = [t for t in stores if t not in results or len(results[t]["queries"]) < args.n]
    runs = [(t, r) for part in (results, *flows.values()) for t, res in part.items() for r in res["runs"]]
    info = harness.machine_info()
    measured = ", ".join(sorted({r["commit"] for _, r in runs})) or "-"
    info["commit"] = f"{measured} (measured); rendered at {harness.commit()}"
    first = next(iter(results.values()), None)
    title = f"# Circuit sizes: {tag(args.base)}" + ("" if args.base_only else f" vs {tag(args.sparse)}")
    title += f", against the control {tag(args.control)}" if args.control else ""
    lines = [title + (f" (PARTIAL: {', '.join(partial)} incomplete)" if partial else ""), ""]
    lines += harness.machine_lines(info, {}, "1", "the figures are counts, not times")
    done = [
        f"{t} {r['date']} load {r['load_avg_at_start']} (queries {r.get('from_query', 0)}-{r.get('to_query', '')})"
        for t, r in runs
    ]
    lines.append("- Runs (family, start, load average at start, queries measured): " + "; ".join(done))
    lines += reuse_lines(args, results) + method_lines(args, first)
    if not first:
        return "\n".join(lines) + "\n"
    sides = model_sides(first)
    lines += ["", "## Base model alone (section 1)", "", *render_base(results)]
    if not args.base_only:
        section = "Base vs control vs sparse (section 3, split)" if args.control else "Base vs sparse (section 3)"
        lines += ["", f"## {section}", *render_paired(results)]
        lines += [line for kind, found in flows.items() for line in render_heads(kind, found)]
    lines += render_answers(results, sides)
    if args.control:
        lines += render_summary(args, first, results, flows)
    return "\n".join(lines) + "\n"


# ---- what the split shows: read from the rows' paired intervals, rendered (a re-render rewrites it) ----

SUMMARY_PAIRS = {  # the pairs the summary reads, in its order: the whole change, the gates' part, training's part
    "base - sparse": ("base", "sparse"),
    "control - sparse (from the gates)": ("control", "sparse"),
    "base - control (from training)": ("base", "control"),
}
FLOW_KEYS = {
    "heads carrying the share": "heads_needed",
    "entries per feature edge covering the share": "entries_covering",
}


def decided(mean: float, lo, hi, n: int) -> str | None:
    """'+52.75 [+25.80, +79.70] (n=20)' where a paired interval over two or more queries excludes 0, else None."""
    if n < 2 or lo is None or lo != lo or (lo <= 0 <= hi):
        return None
    return f"{mean:+.2f} [{lo:+.2f}, {hi:+.2f}] (n={n})"


def decided_rows(results: dict[str, dict], measure) -> tuple[int, dict[str, dict[str, str]]]:
    """(rows in the table, pair label -> {'family NDF': its decided difference}) for one component measure."""
    found: dict[str, dict[str, str]] = {label: {} for label in SUMMARY_PAIRS}
    n_rows = 0
    for task, res in results.items():
        for t in targets(res):
            n_rows += 1
            for label, (a, b) in SUMMARY_PAIRS.items():
                p = paired(res, measure, t, a, b)
                d = p and p["difference"]
                if d and (cell := decided(d.mean, d.lo, d.hi, d.n)):
                    found[label][f"{task} {t}"] = cell
    return n_rows, found


def decided_flows(flows: dict[str, dict], key: str) -> tuple[int, dict[str, dict[str, str]]]:
    """decided_rows for one head-flow measure: one row per family (its stored a_minus_b paired gaps)."""
    found: dict[str, dict[str, str]] = {label: {} for label in SUMMARY_PAIRS}
    for task, res in flows.items():
        for label, (a, b) in SUMMARY_PAIRS.items():
            g = res.get(f"{a}_minus_{b}", {}).get(key)
            if g and g["mean"] is not None and (cell := decided(g["mean"], g["lo"], g["hi"], g["n"])):
                found[label][task] = cell
    return len(flows), found


def summary_line(name: str, n_rows: int, found: dict[str, dict[str, str]]) -> str:
    """One measure: each pair's decided rows, then what they add up to (a positive difference: the first model's
    count is the larger, so for base - sparse and control - sparse the sparse model's circuit is the smaller)."""
    parts = []
    for label, cells in found.items():
        listed = ", ".join(f"{row} {cell}" for row, cell in cells.items())
        parts.append(f"{label} excludes 0 on {len(cells)}" + (f" ({listed})" if cells else ""))
    total, gates, train = (set(found[k]) for k in SUMMARY_PAIRS)
    whole = found["base - sparse"]
    smaller = sum(whole[r].startswith("+") for r in total)
    same = lambda part: sum(found[part][r][0] == whole[r][0] for r in total & set(found[part]))  # noqa: E731
    reading = [
        f"base - sparse decided on {len(total)} of {n_rows} rows ({smaller} with the sparse model's smaller, "
        f"{len(total) - smaller} larger); of those the gates' part is decided the same way on "
        f"{same('control - sparse (from the gates)')} and training's on {same('base - control (from training)')}"
    ]
    if gates - total:
        reading.append(f"the gates' part alone is decided on {', '.join(sorted(gates - total))}")
    reading.append("training decides no row" if not train else f"training decides {', '.join(sorted(train))}")
    return f"- **{name}** ({n_rows} rows): " + "; ".join(parts) + ". Reading: " + "; ".join(reading) + "."


def render_summary(args, first: dict, results: dict[str, dict], flows: dict[str, dict]) -> list[str]:
    """The section a person would write under the split tables, generated from the same rows."""
    lines = ["", "## What the split shows (rendered from the rows above: the paired 95% intervals that exclude 0)", ""]
    lines += measured_on(args, first, results)
    for name, measure in MEASURES.items():
        lines.append(summary_line(f"component circuits, {name}", *decided_rows(results, measure)))
    for kind, found in flows.items():
        if found and all("control_minus_sparse" in r for r in found.values()):
            for name, key in FLOW_KEYS.items():
                lines.append(summary_line(f"through {HEAD_FLOW_KINDS[kind]}, {name}", *decided_flows(found, key)))
    return lines


def measured_on(args, first: dict, results: dict[str, dict]) -> list[str]:
    """What each figure is measured on: the three models (the sparse run's own report where it has one) and the
    queries the intervals pair over."""
    report = Path(args.sparse) / "attention_report.json"
    run = json.loads(report.read_text()) if report.is_file() else {}
    state = (
        f", the saved state of its run (step {run.get('selected_step')}, "
        f"{'a state the selection admitted' if run.get('selection_feasible') else 'no state admitted: the fallback'}; "
        f"{run['mean_open_keys_per_query']:.2f} open keys per query per head)"
        if run
        else ""
    )
    used = ", ".join(f"{task} {res['n_used']}" for task, res in results.items())
    return [
        f"- Measured on: base `{args.base}` ({first['base_model']}); sparse `{args.sparse}` ({first['sparse_model']})"
        f"{state}; control `{args.control}` ({first['control_model']}); {args.n} {args.split} queries per family, "
        f"every model asked for the base model's answer; each interval pairs over the queries every model has a gap "
        f"on ({used})",
    ]


def reuse_lines(args, results: dict[str, dict]) -> list[str]:
    """Where sides were taken from another run (reuse_sources: a --base-only run's base side, a control run's base
    and sparse sides from the base-vs-sparse run) and from a --from-end run, with their folder and commits."""
    lines = []
    for folder, sides, _, name in reuse_sources(args):
        reused = {}
        for t, res in results.items():
            path = store_path(folder, args, t)
            done = json.loads(path.read_text()) if path.is_file() else {"queries": []}
            same = lambda s: (
                [q.get(s) for q in done["queries"][: len(res["queries"])]] == [q[s] for q in res["queries"]]
            )  # noqa: E731
            if done["queries"] and all(same(s) for s in sides):
                reused[t] = done["runs"]
        if reused:
            commits = ", ".join(sorted({r["commit"] for runs in reused.values() for r in runs}))
            lines.append(
                f"- {' and '.join(sides).capitalize()} side of {', '.join(reused)}: measured by the {name} in "
                f"{rel(folder)} (commits {commits}), taken as stored"
            )
    return lines + [line for t, res in results.items() for line in ahead_line(args, t, res)]


def ahead_line(args, task: str, res: dict) -> list[str]:
    """The queries of a family whose stored sides a --from-end run measured (this run's or a --base-only one's)."""
    rows, lines = res["queries"], []
    for folder in dict.fromkeys([run_folder(args), args.results / tag(args.base)]):
        path = ahead_path(folder, args, task)
        done = json.loads(path.read_text()) if path.is_file() else {"ahead": {}}
        taken = sorted(
            int(i)
            for i, q in done["ahead"].items()
            if int(i) < len(rows) and all(rows[int(i)].get(k) == q[k] for k in model_sides(res) if k in q)
        )
        if taken:
            commits = ", ".join(sorted({r["commit"] for r in done["runs"]}))
            sides = " and ".join(k for k in model_sides(res) if k in done["ahead"][str(taken[0])])
            lines.append(
                f"- {task} {'query' if len(taken) == 1 else 'queries'} {', '.join(str(i + 1) for i in taken)}, {sides} "
                f"side: measured by a --from-end run beside the ordered one ({rel(path)}, commits {commits}), taken as stored"
            )
    return lines


def default_out(args) -> Path:
    """The report's default path: named by the base and the kind of run only, so a second run of that kind on the same
    base needs --out (the report's command then names it)."""
    name = tag(args.base) + ("_base" if args.base_only else "_control" if args.control else "")
    return harness.BENCH / "results" / f"circuit_claims_{name}.md"


def method_lines(args, first: dict | None) -> list[str]:
    cmd = f"python bench/circuits/circuit_claims.py --base {args.base} " + (
        "--base-only" if args.base_only else f"--sparse {args.sparse}"
    )
    cmd += f" --control {args.control}" if args.control else ""
    cmd += f" --out {rel(args.out)}" if Path(args.out).resolve() != default_out(args).resolve() else ""
    lines = [
        f"- Command: `{cmd} --n {args.n} --split {args.split} --targets {','.join(map(str, args.targets))} "
        f"--samples {args.samples}`; JSON per family in {rel(run_folder(args))}",
        f"- Queries: `tasks.queries(task, {args.n}, seed=0, split='{args.split}')` (heldout: combinations the "
        "training text never contains); every model is asked for the base model's answer; a model gets a query "
        "wrong when its own top-1 is not an answer the task accepts",
        "- Component circuit: the sparsest edge set of the EAP-IG-ranked query circuit reaching the NDF target under "
        "exact patching (`QuerySearch.sparsest`), its heads and MLPs; attention entries: the fewest top-ranked "
        "(layer, head, query, key) entries keeping NDF >= target with the rest removed (an upper bound)",
        "- Entries per circuit edge: per query, attention entries / component edges at the same NDF target",
    ]
    if first:
        lines.append(
            f"- Models: base {first['base_model']}, sparse {first['sparse_model'] or '-'}"
            + (f", control {first['control_model']}" if first.get("control_model") else "")
            + f"; attention entries left out are {first['token_removal']}"
        )
    if not args.base_only:
        lines += [
            "- base / sparse (ratio of means) divides the base model's mean count by the sparse model's over the "
            "queries both have a value for (> 1: the sparse model's circuit is smaller); the geometric mean of the "
            "per-query ratios has a Student-t 95% interval on log(base / sparse) over the queries where both counts "
            "are > 0; base - sparse: the paired Student-t 95% interval (`workbench.intervals.paired_difference`)",
            "- flags: where the ratio's interval includes 1 or the difference's includes 0",
        ]
    if args.control:
        lines.append(
            "- Control: the base fine-tuned like the sparse model (same batches, optimiser and steps) without gates. "
            "base - sparse = (base - control: from training) + (control - sparse: from the gates), per query, so the "
            "two paired intervals split the one above over the same queries (those every model has a gap on)"
        )
    return lines


def rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(harness.ROOT))
    except ValueError:
        return str(path)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="tiny", help="base model spec (default: %(default)s)")
    ap.add_argument("--sparse", help="its sparse-attention version (a model folder)")
    ap.add_argument(
        "--control",
        help="with --sparse: the base fine-tuned like the sparse model without gates (a model folder, e.g. a "
        "`attention train --control finetune` run's control/), measured beside both to split base - sparse",
    )
    ap.add_argument("--base-only", action="store_true", help="the base model's circuit sizes alone (no --sparse)")
    ap.add_argument(
        "--from-end",
        action="store_true",
        help="the queries from the last one back, beside the same command without it (which takes them when it "
        "gets there): two cores on one family",
    )
    ap.add_argument("--families", default=",".join(FAMILIES), help="task families (default: %(default)s)")
    ap.add_argument("--n", type=int, default=20, help="queries per family (default: %(default)s)")
    ap.add_argument("--targets", default="0.8,0.9", help="NDF targets (default: %(default)s)")
    ap.add_argument("--samples", type=int, default=3, help="paraphrases and counterfactuals per query (default: 3)")
    ap.add_argument("--split", default="heldout", choices=("heldout", "train"), help="query split (default: heldout)")
    ap.add_argument(
        "--transcoders",
        nargs="+",
        type=Path,
        metavar="SET",
        help="one per-layer set or CLT per model, all of a kind: BASE SPARSE, or with --control BASE CONTROL SPARSE",
    )
    ap.add_argument("--share", type=float, default=0.8, help="with --transcoders: attribution share (default: 0.8)")
    ap.add_argument(
        "--heads-only",
        action="store_true",
        help="with --transcoders: the heads rows alone (e.g. while another run measures these families' circuits)",
    )
    ap.add_argument("--results", type=Path, help=f"per-family JSON (default: {rel(RESULTS)}, --quick: bench/work)")
    ap.add_argument("--render", action="store_true", help="write the report from the stored JSON, measure nothing")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 queries of ioi and greater_than, 1 sample")
    harness.add_common_args(ap, None, threads=1)
    args = ap.parse_args()
    if args.base_only == bool(args.sparse):
        ap.error("pass --sparse MODEL (base vs sparse) or --base-only, not both")
    if args.control and not args.sparse:
        ap.error(f"--control {args.control} splits base - sparse: pass --sparse MODEL too")
    if args.from_end and args.transcoders:
        ap.error("--from-end measures component circuits ahead of an ordered run: not with --transcoders")
    if args.transcoders and args.base_only:
        ap.error("--transcoders compares two models: not with --base-only")
    if args.heads_only and not args.transcoders:
        ap.error("--heads-only measures through dictionaries: pass --transcoders BASE SPARSE")
    wanted = 3 if args.control else 2
    if args.transcoders and len(args.transcoders) != wanted:
        ap.error(
            f"--transcoders {' '.join(map(str, args.transcoders))}: pass {wanted} dictionaries, one per model "
            + ("(base, control, sparse)" if args.control else "(base, sparse)")
        )
    kinds = {dictionary_kind(p) for p in args.transcoders or ()}
    if len(kinds) > 1:
        ap.error(
            f"--transcoders {' '.join(map(str, args.transcoders))}: "
            + ("one per-layer set and one CLT; pass two of a kind" if wanted == 2 else "sets and CLTs mixed; one kind")
        )
    args.kind = kinds.pop() if kinds else None  # the heads store this run measures into
    bad = [f for f in args.families.split(",") if f not in FAMILIES]
    if bad:
        ap.error(f"--families: unknown {bad}; choose from {list(FAMILIES)}")
    try:
        args.targets = tuple(float(t) for t in args.targets.split(","))
    except ValueError:
        ap.error(f"--targets {args.targets!r} must be comma-separated numbers in (0, 1], e.g. 0.8,0.9")
    if args.quick:
        args.n, args.samples, args.families = 2, 1, "ioi,greater_than"
    args.results = args.results or (harness.WORK / "circuit_claims" if args.quick else RESULTS)
    args.out = args.out or default_out(args)
    return args


def main() -> None:
    args = parse_args()
    harness.set_threads(args.threads)
    folder = run_folder(args)
    families = args.families.split(",")
    stores = {t: store_path(folder, args, t) for t in families}
    # every kind's stored heads rows are rendered; this run measures its dictionaries' kind
    heads = {k: {t: store_path(folder, args, t, f"heads-{k}-") for t in families} for k in HEAD_FLOW_KINDS}
    if not args.render:
        from workbench.models import load

        models = {"base": load(args.base)[0]}
        if args.control:
            models["control"] = load(args.control)[0]
        if args.sparse:
            models["sparse"] = load(args.sparse)[0]
        folder.mkdir(parents=True, exist_ok=True)
        for task in families:
            if args.from_end:
                measure_from_end(args, models, task, stores[task])
            elif not args.heads_only:
                measure_family(args, models, task, stores[task])
            if args.transcoders:
                measure_heads(args, models, task, heads[args.kind][task])
            harness.write_text(args.out, render(args, stores, heads))
    harness.write_text(args.out, render(args, stores, heads))
    print(args.out.read_text())


if __name__ == "__main__":
    main()
