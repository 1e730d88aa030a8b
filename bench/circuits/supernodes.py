"""Supernodes proposed and checked (issue #47), measured on the synthetic corpus's planted labels: per held-out query
of each task family, the attribution graph through a transcoder set, its groups proposed (grouping.propose) with
every signal and without the explanation signal (the store labels it falls back on are the planted labels scored
here), and per family: how often a group's members share a planted label (each member's store labels kind=label at
precision >= 0.5; a member without one shares nothing), against random groups of the same sizes at the same
positions; and how often the joint ablation confirms the summed prediction (frozen, the verdict; live beside it).

    OMP_NUM_THREADS=1 .venv/bin/python bench/circuits/supernodes.py --transcoders SET --workspace WS [--n 3]
    .venv/bin/python bench/circuits/supernodes.py --render     (the report again from the JSON beside it)

Writes bench/results/supernodes.md (and the raw rows beside it as JSON).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

VARIANTS = {"all signals": {}, "no explanation": {"explanation": 0.0}}
DRAWS = 50  # random groups drawn per proposed group for the chance rate


def shares(members: list[tuple[int, int]], planted: dict) -> bool:
    """Whether every member carries one planted label in common."""
    sets = [planted.get(m) or frozenset() for m in members]
    return bool(frozenset.intersection(*sets))


def chance(group: dict, features: dict, planted: dict, rng: random.Random) -> float:
    """The share of random groups of the group's size, drawn from the features at its position, that share a label."""
    pool = [(f[0], f[2]) for f in features.values() if f[1] == group["position"]]
    k = len(group["members"])
    return sum(shares(rng.sample(pool, k), planted) for _ in range(DRAWS)) / DRAWS


def query_row(model, sites, graph: dict, cache, planted: dict, task: str, prompt: str, rng) -> dict:
    from workbench.circuits.feature.graph_config import GroupConfig
    from workbench.circuits.feature.grouping import propose
    from workbench.interventions.check import GraphNodes, verdict
    from workbench.interventions.config import CheckConfig

    g = GraphNodes(graph, "target")
    row = {"task": task, "prompt": prompt, "features": len(g.features), "variants": {}}
    for name, weights in VARIANTS.items():
        r = propose(model, sites, graph, GroupConfig(**weights), cache=cache, labels=planted)
        groups = []
        for x in r["groups"]:
            members = [(g.features[n][0], g.features[n][2]) for n in x["members"]]
            groups.append(
                {
                    "size": len(members),
                    "shares": shares(members, planted),
                    "chance": chance(x, g.features, planted, rng),
                    "verdict_frozen": x["verdict_frozen"],
                    "verdict_live": x["verdict_live"],
                    "alone_verdict": verdict(x["predicted"], x["members_measured"], CheckConfig()),
                }
            )
        row["variants"][name] = {"groups": groups, "cpu_seconds": r["summary"]["cpu_seconds"]}
    return row


def rows_of(model, ws, set_dir, n: int, tasks_: list[str]) -> list[dict]:
    from workbench.circuits.feature.attribution_graph import build_graph
    from workbench.circuits.feature.graph_config import GraphConfig, GroupConfig
    from workbench.circuits.feature.graph_json import to_neuronpedia
    from workbench.circuits.feature.grouping import store_labels
    from workbench.circuits.feature.transcoders import open_set
    from workbench.corpus import tasks
    from workbench.interventions import load_dictionary
    from workbench.steps.groups import training_cache

    tcs, sites = open_set(set_dir).load(0, "cpu", model), load_dictionary(set_dir, model)
    cache, rng, rows = training_cache(ws, set_dir), random.Random(0), []
    every = {(layer, u) for layer in range(model.cfg.n_layers) for u in range(tcs.members[0].sae.W_dec.shape[0])}
    planted = store_labels(set_dir, every, GroupConfig())
    for task in tasks_:
        for q in tasks.queries(task, n, tokenizer=model.tokenizer):
            graph = to_neuronpedia(build_graph(model, tcs, q.prompt, q.answer, None, GraphConfig(heads=False)))
            rows.append(query_row(model, sites, graph, cache, planted, task, q.prompt, rng))
            got = rows[-1]["variants"]["all signals"]["groups"]
            print(
                task, len(got), "groups,", sum(x["verdict_frozen"] == "confirmed" for x in got), "confirmed", flush=True
            )
    return rows


def _rate(rows: list[dict], variant: str, test) -> str:
    """Mean over queries (with a group) of the share of their groups passing `test`, with a 95% t-interval."""
    from workbench.intervals import t_interval

    vals = []
    for r in rows:
        gs = r["variants"][variant]["groups"]
        if gs:
            vals.append(sum(test(x) for x in gs) / len(gs))
    return t_interval(vals).format("{:.2f}") if vals else "n/a"


def report(rows: list[dict], info: dict, setup: str) -> str:
    lines = ["# Supernodes proposed and checked", "", *harness.machine_lines(info, {}, "1"), "", setup, ""]
    lines += [
        "Each held-out query's graph (tasks.queries; answer = target logit; node threshold 0.8, edge threshold 0.98, "
        "no head split); groups by `grouping.propose` with GroupConfig's defaults (threshold 0.5, scope position, at "
        "most 6 features) and CheckConfig's defaults (metric: target logit minus the mean). `shares label`: the share "
        "of a query's groups whose members all carry one planted label (store label kind=label at precision >= 0.5); "
        f"`chance`: the same for {DRAWS} random groups of each group's size drawn from the features at its position; "
        "`confirmed`: joint ablation confirmed against the summed prediction (frozen: the verdict; live: the total "
        "effect); `shares - chance`: per query, paired; `alone confirmed`: the members ablated one at a time, summed, against the same prediction. Each: "
        "mean over the queries that have a group, with a 95% t-interval over those queries (n).",
        "",
    ]
    header = ["task", "variant", "graphs", "groups", "features grouped", "shares label", "chance", "shares - chance"]
    header += ["confirmed (frozen)", "confirmed (live)", "alone confirmed", "CPU s / graph"]
    body = []
    for task in [*dict.fromkeys(r["task"] for r in rows), "all"]:
        rs = [r for r in rows if task in ("all", r["task"])]
        for v in VARIANTS:
            gs = [x for r in rs for x in r["variants"][v]["groups"]]
            cpu = sum(r["variants"][v]["cpu_seconds"] for r in rs) / len(rs)
            body.append(
                [
                    task,
                    v,
                    len(rs),
                    len(gs),
                    f"{sum(x['size'] for x in gs)} of {sum(r['features'] for r in rs)}",
                    _rate(rs, v, lambda x: x["shares"]),
                    _rate(rs, v, lambda x: x["chance"]),
                    _rate(rs, v, lambda x: x["shares"] - x["chance"]),
                    _rate(rs, v, lambda x: x["verdict_frozen"] == "confirmed"),
                    _rate(rs, v, lambda x: x["verdict_live"] == "confirmed"),
                    _rate(rs, v, lambda x: x["alone_verdict"] == "confirmed"),
                    f"{cpu:.1f}",
                ]
            )
    return "\n".join([*lines, *harness.table(header, body)]) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transcoders", help="a per-layer transcoder set of the model, its members' feature stores built")
    ap.add_argument("--workspace", default="workspace", help="the workspace holding the set's training cache")
    ap.add_argument("--model", default="tiny", help="the model (default: %(default)s)")
    ap.add_argument("--n", type=int, default=3, help="held-out queries per task family (default: %(default)s)")
    ap.add_argument("--tasks", default="ioi,induction,greater_than,addition,facts", help="task families")
    ap.add_argument("--setup", default="", help="a sentence on the dictionaries and n, printed above the table")
    ap.add_argument("--render", action="store_true", help="write the report again from the JSON beside it")
    harness.add_common_args(ap, harness.BENCH / "results" / "supernodes.md", threads=1)
    args = ap.parse_args()
    raw = args.out.with_suffix(".json")
    if args.render:
        d = json.loads(raw.read_text())
        harness.write_text(args.out, report(d["rows"], d["info"], d["setup"]))
        return print(args.out.read_text())
    if not args.transcoders:
        ap.error("--transcoders SET is needed (a transcoder set of the model with feature stores)")
    harness.set_threads(args.threads)
    import torch

    from workbench.models import load
    from workbench.workspace import Workspace

    model, _ = load(args.model, device="cpu")
    info = harness.machine_info()  # the commit before the run, as measured
    with torch.no_grad():
        rows = rows_of(model, Workspace(args.workspace), args.transcoders, args.n, args.tasks.split(","))
    setup = args.setup or f"Model {args.model}; transcoders {Path(args.transcoders).name}; n = {args.n} per family."
    raw.write_text(json.dumps({"info": info, "setup": setup, "rows": rows}, indent=1))
    harness.write_text(args.out, report(rows, info, setup))
    print(args.out.read_text())


if __name__ == "__main__":
    main()
