"""Attribution graphs validated the way the field reports it (issue 45): per held-out query, the graph through a
dictionary (a per-layer transcoder set or a CLT) checked by `check_graph`, and the Spearman correlation of
|predicted| against |measured| effect for nodes (the metric) and for feature -> feature pairs (the target's
pre-activation), in the frozen and the live semantics, with zero ablation and steering x-1 (mean with a 95%
t-interval over the queries); the edges' verdicts, direct (frozen) and total (live), under each edge reading asked
for; how often the graph's top node is the measured top node.

    OMP_NUM_THREADS=1 .venv/bin/python bench/circuits/graph_validation.py --transcoders SET --label NAME --rows RUN.jsonl \
        [--model tiny] [--n 20] [--edge-targets mlp mlp_active]
    .venv/bin/python bench/circuits/graph_validation.py --render RUN.jsonl [RUN.jsonl ...] [--setup TEXT]

A run appends one JSON line per query to --rows as soon as it is checked and skips the queries already there, so a
run stopped at any point resumes where it stopped (queries go round the families, so a partial run keeps the
families even). --render writes bench/results/graph_validation.md from the rows (and them all beside it as JSON).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

READINGS = [(s, op) for s in ("frozen", "live") for op in ("ablate", "steer")]
SEMANTICS = {"frozen": "edges direct (frozen)", "live": "edges total (live)"}


def _done(rows_file: Path) -> set:
    """The (model, dictionary, task, index) of every query already in the rows file."""
    if not rows_file.exists():
        return set()
    rows = [json.loads(line) for line in rows_file.read_text().splitlines() if line.strip()]
    return {(r["model"], r["dictionary"], r["task"], r["index"]) for r in rows}


def _row(model, sites, graph: dict, edge_targets: list[str]) -> dict:
    """One query's check: its Spearman values, verdict counts under each edge reading (the first by the full
    check, the others by their edges alone), top node agreement and the full check's CPU seconds."""
    from workbench.interventions.check import check_edges, check_graph
    from workbench.interventions.config import CheckConfig

    r = check_graph(model, sites, graph, CheckConfig(edge_target=edge_targets[0]))
    s = r["summary"]
    verdicts = {edge_targets[0]: s.get("edges_verdicts", {})}
    for target in edge_targets[1:]:
        verdicts[target] = check_edges(model, sites, graph, CheckConfig(edge_target=target))["summary"].get(
            "edges_verdicts", {}
        )
    return {
        "spearman": r["spearman"],
        "edges_verdicts": verdicts,
        "nodes_checked": s["nodes_checked"],
        "nodes_confirmed_share": s["nodes_confirmed_share"],
        "top_node_agrees": s["top_node_agrees"],
        "cpu_seconds": s["cpu_seconds"],
    }


def run(args, info: dict) -> None:
    """Check every held-out query not yet in args.rows, appending each row as it is done."""
    import torch

    from workbench.circuits.feature.attribution_graph import build_graph
    from workbench.circuits.feature.graph_config import GraphConfig
    from workbench.circuits.feature.graph_json import to_neuronpedia
    from workbench.circuits.feature.transcoders import open_set
    from workbench.corpus import tasks
    from workbench.interventions import load_dictionary
    from workbench.models import load

    model, _ = load(args.model, device="cpu")
    tcs, sites = open_set(args.transcoders).load(0, "cpu", model), load_dictionary(args.transcoders, model)
    qs = {task: tasks.queries(task, args.n, tokenizer=model.tokenizer) for task in tasks.QUERY_TASKS}
    done = _done(args.rows)
    for i in range(args.n):  # round the families, so that a partial run keeps them even
        for task in tasks.QUERY_TASKS:
            if (args.model, args.label, task, i) in done:
                continue
            q = qs[task][i]
            with torch.no_grad():
                g = to_neuronpedia(build_graph(model, tcs, q.prompt, q.answer, None, GraphConfig(heads=False)))
                row = _row(model, sites, g, args.edge_targets)
            row = {"model": args.model, "dictionary": args.label, "task": task, "index": i, "prompt": q.prompt, **row}
            with args.rows.open("a") as f:
                f.write(json.dumps({**row, "commit": info["commit"], "date": info["date"]}) + "\n")
            sp = row["spearman"]["pairs"]["frozen"]["steer"]
            print(args.label, task, i, "pairs frozen steer", "n/a" if sp is None else f"{sp:.3f}", flush=True)


def _cell(rows: list[dict], what: str, reading: tuple[str, str]) -> str:
    from workbench.intervals import t_interval

    vals = [r["spearman"][what][reading[0]][reading[1]] for r in rows]
    vals = [v for v in vals if v is not None]
    return t_interval(vals).format("{:.2f}") if vals else "n/a"


def _shares(rows: list[dict], target: str, semantics: str) -> str:
    """Each verdict's share of the edges checked, summed over the queries read with `target`."""
    from workbench.interventions.check import VERDICTS

    rows = [r for r in rows if target in r["edges_verdicts"]]
    total = {w: sum(r["edges_verdicts"][target].get(semantics, {}).get(w, 0) for r in rows) for w in VERDICTS}
    n = sum(total.values())
    shares = ", ".join(f"{v / n:.0%} {w}" for w, v in total.items() if v)
    return f"{shares} (of {n} edges, {len(rows)} graphs)" if n else "n/a"


def _groups(rows: list[dict], keys: tuple[str, ...]) -> list[tuple[tuple, list[dict]]]:
    """Rows grouped by keys, in their first appearance's order."""
    order = dict.fromkeys(tuple(r[k] for k in keys) for r in rows)
    return [(k, [r for r in rows if tuple(r[x] for x in keys) == k]) for k in order]


def _spearman_table(rows: list[dict], keys: tuple[str, ...], what: str) -> list[str]:
    """One row per group of `keys`: the four readings' intervals (and, for nodes, the top node agreement count)."""
    top = what == "nodes"
    header = [*keys, "graphs", *(f"{what} {s} {op}" for s, op in READINGS), *(["top node agrees"] if top else [])]
    body = [
        [*k, len(rs), *(_cell(rs, what, rd) for rd in READINGS)]
        + ([f"{sum(bool(r['top_node_agrees']) for r in rs)}/{len(rs)}"] if top else [])
        for k, rs in _groups(rows, keys)
    ]
    return harness.table(header, body)


def _edge_table(rows: list[dict]) -> list[str]:
    header = ["model", "dictionary", "edge reading", *SEMANTICS.values(), "nodes per graph", "check CPU s"]
    body = []
    for (model, dictionary), rs in _groups(rows, ("model", "dictionary")):
        nodes = statistics.mean(r["nodes_checked"] for r in rs)
        cpu = statistics.mean(r["cpu_seconds"] for r in rs)
        for target in dict.fromkeys(t for r in rs for t in r["edges_verdicts"]):
            shares = [_shares(rs, target, s) for s in SEMANTICS]
            body.append([model, dictionary, target, *shares, f"{nodes:.0f}", f"{cpu:.1f}"])
    return harness.table(header, body)


METHOD = (
    "Each held-out query's graph (tasks.queries, split heldout; answer = target logit; node threshold 0.8, edge "
    "threshold 0.98, no head split) checked with CheckConfig's defaults (metric: target logit minus the mean; every "
    "kept feature node; the 20 largest edges) except the edge reading, which the edge table names (--edge-targets). Spearman of |predicted| vs |measured| per graph (ties averaged; a "
    "graph with fewer than 3 points or a constant side has none), then the mean with a 95% t-interval over the "
    "graphs that have one (n in each cell). Nodes: predicted = the graph's total effect on the metric through its "
    "kept links; measured = the metric's change. Pairs: every ordered feature pair whose target lies in a later "
    "layer at the same or a later position; predicted = the graph's influence through every kept path "
    "(-a_s ((I - M)^-1 - I)[t, s]); measured = the target's pre-activation change. Frozen: attention patterns and "
    "normalisation scales held at the clean run's (the graph's own assumption); live: nothing held. Ablate: the "
    "feature's code set to 0; steer: the code times -1. Top node agrees: the graph's largest |predicted| node is "
    "the largest |measured| one (frozen ablation), counted over the graphs."
)


def _coverage(rows: list[dict], n: int) -> list[str]:
    """Per model and dictionary: graphs per family, the commits its rows were measured at, and whether every family
    reached the asked n."""
    from workbench.corpus.tasks import QUERY_TASKS

    header = ["model", "dictionary", *QUERY_TASKS, "graphs", f"{n} per family?", "rows measured at"]
    body = []
    for k, rs in _groups(rows, ("model", "dictionary")):
        per = [sum(r["task"] == t for r in rs) for t in QUERY_TASKS]
        reached = "yes" if min(per) >= n else f"no: short by {sum(max(0, n - c) for c in per)} graphs"
        at = "; ".join(f"{sum(r['commit'] == c for r in rs)} at {c}" for c in dict.fromkeys(r["commit"] for r in rs))
        body.append([*k, *per, len(rs), reached, at])
    return harness.table(header, body)


def report(rows: list[dict], info: dict, setup: str, n: int = 20) -> str:
    lines = ["# Attribution graphs validated by interventions", "", *harness.machine_lines(info, {}, "1")]
    lines += [
        "- The commit above is the one the report was rendered at; each row's own commit is in the coverage table "
        "and in the JSON beside this file",
        "",
        setup,
        "",
        METHOD,
        "",
    ]
    lines += [f"## Coverage (asked: {n} held-out queries per family)", "", *_coverage(rows, n), ""]
    lines += ["## Spearman over all five families", ""]
    for what in ("nodes", "pairs"):
        lines += [*_spearman_table(rows, ("model", "dictionary"), what), ""]
    lines += ["## Spearman per family", ""]
    for what in ("nodes", "pairs"):
        lines += [*_spearman_table(rows, ("model", "dictionary", "task"), what), ""]
    lines += ["## Edge verdicts under each edge reading", "", *_edge_table(rows)]
    return "\n".join(lines) + "\n"


def render(args) -> None:
    rows = [json.loads(line) for p in args.render for line in Path(p).read_text().splitlines() if line.strip()]
    if not rows:
        raise SystemExit(f"no rows in {', '.join(map(str, args.render))}")
    info = harness.machine_info()  # its commit: the rendering's (each row keeps its own)
    dates = sorted(r["date"] for r in rows)
    info["date"] = f"{dates[0]} to {dates[-1]} (the rows' measurement dates)"
    info["load_avg_at_start"] = f"{info['load_avg_at_start']} (at rendering; the rows come from runs side by side)"
    raw = args.out.with_suffix(".json")
    raw.write_text(json.dumps({"info": info, "setup": args.setup, "rows": rows}, indent=1))
    harness.write_text(args.out, report(rows, info, args.setup, args.n))
    print(args.out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transcoders", help="a per-layer transcoder set or a CLT of the model")
    ap.add_argument("--label", help="the dictionary's name in the tables (default: its folder's name)")
    ap.add_argument("--rows", type=Path, help="the JSON-lines file the run appends to and resumes from")
    ap.add_argument("--model", default="tiny", help="the model (default: %(default)s)")
    ap.add_argument(
        "--n",
        type=int,
        default=20,
        help="held-out queries per task family (run), or the number asked (--render) (default: %(default)s)",
    )
    ap.add_argument(
        "--edge-targets",
        nargs="+",
        default=["mlp"],
        help="edge readings (CheckConfig.edge_target): the first by the full check, the others on the edges alone "
        "(default: %(default)s)",
    )
    ap.add_argument("--render", nargs="+", type=Path, metavar="ROWS", help="write the report from these rows files")
    ap.add_argument("--setup", default="", help="the paragraph on models and dictionaries, above the tables")
    harness.add_common_args(ap, harness.BENCH / "results" / "graph_validation.md", threads=1)
    args = ap.parse_args()
    if args.render:
        return render(args)
    if not (args.transcoders and args.rows):
        ap.error("--transcoders SET and --rows FILE are needed (or --render ROWS ...)")
    args.label = args.label or Path(args.transcoders).name
    harness.set_threads(args.threads)
    run(args, harness.machine_info())  # the commit before the run, as measured


if __name__ == "__main__":
    main()
