"""The paper's "edges connecting components" (arXiv 2512.05865, issue 50 ask 4) beside the workbench's own edge
count, base vs sparse attention (and, with --control, the base fine-tuned like the sparse model without gates), per
task family on held-out queries: the sparsest query circuit at each NDF target (EAP-IG search with exact patching, as
in circuit_claims.py), counted four ways by workbench.attention.paper_edges (endpoints components | all  x  per
component | entry), plus its heads and the prompt's open attention entries.

    python bench/circuits/paper_edges.py --base data/models/small --sparse data/models/small-sparse --n 20 --threads 1
    python bench/circuits/paper_edges.py --base data/models/small --sparse RUN --control RUN/control ...
    python bench/circuits/paper_edges.py ... --render        # the report from the stored JSON, measure nothing

The JSON (--results) keeps each model's circuits by its model id, so a model measured once serves every comparison
it is in (a control run measures only the control and the new sparse side). Queries are drawn and re-targeted by the
base model and go round the families (query 0 of each, then query 1, ...) so a stopped run covers every family; the
JSON is rewritten after each query and model, and a rerun measures only what is missing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness  # noqa: E402
from circuit_claims import render_paired  # noqa: E402

from workbench.attention.paper_edges import PaperEdgeConfig, open_entry_counts, paper_edges  # noqa: E402

FAMILIES = ("ioi", "induction", "greater_than", "addition", "facts")
COUNTS = {  # column -> the paper_edges choice
    "pairs": PaperEdgeConfig("components", "component"),
    "pairs+io": PaperEdgeConfig("all", "component"),
    "entry": PaperEdgeConfig("components", "entry"),
    "entry+io": PaperEdgeConfig("all", "entry"),
}
# table name -> the count stored per side and target; MEASURES: how render_paired reads it from one side
COLUMNS = {"workbench edges": "edges", "heads": "heads", **{k: k for k in COUNTS}}
MEASURES = {name: (lambda r, t, key=key: r[t][key]) for name, key in COLUMNS.items()}
ROLES = ("base", "control", "sparse")


def side(model, cq, targets, samples: int) -> dict:
    """One model on one (retargeted) query: per target the workbench's edges, heads, and each paper count."""
    import torch

    from workbench.circuits.component.api import prepare_all
    from workbench.circuits.component.search import QuerySearch, SearchConfig
    from workbench.circuits.search import ZeroGapError

    start = time.process_time()
    try:
        q, extra = prepare_all(model, cq, None, None, None, (), (), samples, 0, "logit_diff")
        search = QuerySearch(model, q, extra, SearchConfig(steps=5))
    except ZeroGapError as e:
        return {"skipped": str(e)}
    torch.manual_seed(0)
    opened, n_pos = open_entry_counts(model, q.tokens), int(q.tokens.numel())
    out = {"n_pos": n_pos, "open_entries": int(opened.sum()), "graph_edges": search.graph.n_edges}
    for t in targets:
        f = search.sparsest(t)
        heads = {search.graph.writers[s] for s in search.graph.edge_index[0][f.mask].tolist()}
        row = {"edges": int(f.mask.sum()), "ndf": f.ndf, "heads": len({h for h in heads if h.startswith("a")})}
        row.update({k: paper_edges(search.graph, f.mask, c, opened, n_pos) for k, c in COUNTS.items()})
        out[str(t)] = row
    return out | {"cpu_seconds": time.process_time() - start}


def settings(args, base_id: str) -> dict:
    """What a stored JSON must match to be continued: the queries (drawn and re-targeted by the base) and how
    each circuit is found and counted."""
    cfg = {"n": args.n, "targets": args.targets, "samples": args.samples, "split": "heldout", "seed": 0}
    return cfg | {"base_model": base_id, "counts": {k: c.to_dict() for k, c in COUNTS.items()}}


def measure(args, models: dict, store: Path) -> None:
    """Every family's first n queries on every model, each (query, model) measured once across runs."""
    from workbench.circuits.component.api import retarget
    from workbench.corpus import tasks
    from workbench.provenance import model_id

    ids = {role: model_id(m) for role, m in models.items()}
    cfg = settings(args, ids["base"])
    res = json.loads(store.read_text()) if store.is_file() else {**cfg, "queries": {}, "sides": {}, "runs": []}
    if any(res.get(k) != v for k, v in cfg.items()):
        raise SystemExit(f"{store} was made with other settings; delete it or pass another --results")
    res["runs"].append({"commit": harness.commit(), "start": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    res["runs"][-1]["models"] = ids
    base = models["base"]
    qs = {t: tasks.queries(t, args.n, seed=0, tokenizer=base.tokenizer, split="heldout") for t in args.families}
    for i in range(args.n):
        for task in args.families:
            todo = [r for r in models if len(res["sides"].setdefault(ids[r], {}).setdefault(task, [])) <= i]
            if not todo:
                continue
            asked = retarget(base, qs[task][i])
            row = {"prompt": asked.prompt, "answer": asked.answer, "wrong": asked.wrong}
            stored = res["queries"].setdefault(task, [])
            if len(stored) <= i:
                stored.append(row)
            elif stored[i] != row:
                raise SystemExit(f"{store}: {task} query {i} was stored as {stored[i]}, drawn now as {row}")
            for role in todo:
                res["sides"][ids[role]][task].append(side(models[role], asked, args.targets, args.samples))
                harness.write_text(store, json.dumps(res, indent=1))
            print(f"{task} {i + 1}/{args.n}: {', '.join(todo)}", flush=True)


def comparisons(res: dict, ids: dict) -> dict[str, dict]:
    """family -> the stored circuits of the given models shaped as a comparison (circuit_claims' rows: one dict
    per query with a side per model), over the queries every model has been measured on."""
    out = {}
    for task, asked in res["queries"].items():
        sides = {role: res["sides"].get(mid, {}).get(task, []) for role, mid in ids.items()}
        n = min(len(asked), *map(len, sides.values()))
        if n:
            out[task] = {"targets": res["targets"], **{f"{role}_model": mid for role, mid in ids.items()}}
            out[task]["queries"] = [{role: sides[role][q] for role in ids} | asked[q] for q in range(n)]
    return out


def ceiling(found: dict[str, dict], t: str) -> list[str]:
    """Per family: the prompt length, the open attention entries base / sparse (what one head's entry-resolved
    edge shrinks by), and the base circuit's component pairs (the most the pairs ratio could be: a sparse circuit
    of one pair)."""
    rows = []
    for task, cmp in found.items():
        used = [q for q in cmp["queries"] if not any("skipped" in q[r] for r in ROLES if r in q)]
        if not used:
            continue
        ratio = np.exp(np.mean([np.log(q["base"]["open_entries"] / q["sparse"]["open_entries"]) for q in used]))
        pairs = [q["base"][t]["pairs"] for q in used]
        tokens = np.mean([q["base"]["n_pos"] for q in used])
        rows.append([task, f"{tokens:.1f}", f"{ratio:.1f}×", f"{np.mean(pairs):.1f} (max {max(pairs)})"])
    head = ["family", "tokens", "open entries base/sparse (geo. mean)", f"base pairs at NDF {t}: the pairs ceiling"]
    return harness.table(head, rows)


def render(res: dict, ids: dict) -> list[str]:
    """One table per count: per family and target, each model's mean, and per pair (base / sparse; with a control
    from training and from the gates) the geometric mean of the per-query ratios and the difference, paired 95%
    intervals; then the ceiling table."""
    found = comparisons(res, ids)
    return render_paired(found, MEASURES) + ["", *ceiling(found, str(res["targets"][-1]))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="data/models/small")
    ap.add_argument("--sparse", default="data/models/small-sparse")
    ap.add_argument("--control", help="the base fine-tuned like the sparse model without gates (a run's control/)")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--targets", type=float, nargs="+", default=[0.8, 0.9])
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument(
        "--families", nargs="+", choices=FAMILIES, default=list(FAMILIES), help="in the order queries go round them"
    )
    ap.add_argument("--results", type=Path, default=harness.BENCH / "results" / "paper_edges" / "small.json")
    ap.add_argument("--render", action="store_true", help="print the tables from the stored JSON, measure nothing")
    harness.add_common_args(ap, harness.BENCH / "results" / "paper_edges.md", threads=1)
    args = ap.parse_args()
    harness.set_threads(args.threads)
    import torch

    from workbench.models import load
    from workbench.provenance import model_id

    torch.set_num_threads(args.threads or torch.get_num_threads())
    specs = {"base": args.base, "control": args.control, "sparse": args.sparse}
    models = {role: load(spec)[0] for role, spec in specs.items() if spec}
    if not args.render:
        measure(args, models, args.results)
    print("\n".join(render(json.loads(args.results.read_text()), {r: model_id(m) for r, m in models.items()})))


if __name__ == "__main__":
    main()
