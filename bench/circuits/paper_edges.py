"""The paper's "edges connecting components" (arXiv 2512.05865, issue 50 ask 4) beside the workbench's own edge
count, base vs sparse attention, per task family on held-out queries: the sparsest query circuit at each NDF target
(EAP-IG search with exact patching, as in circuit_claims.py), counted four ways by workbench.attention.paper_edges
(endpoints components | all  x  per component | entry), plus its heads and the prompt's open attention entries.

    python bench/circuits/paper_edges.py --base data/models/small --sparse data/models/small-sparse --n 20 --threads 1
    python bench/circuits/paper_edges.py ... --render        # the report from the stored JSON, measure nothing

Queries go round the families (query 0 of each, then query 1, ...) so a stopped run covers every family; the JSON
(--results) is rewritten after each query and a rerun measures only what is missing.
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

from workbench.attention.paper_edges import PaperEdgeConfig, open_entry_counts, paper_edges  # noqa: E402

FAMILIES = ("ioi", "induction", "greater_than", "addition", "facts")
COUNTS = {  # column -> the paper_edges choice
    "pairs": PaperEdgeConfig("components", "component"),
    "pairs+io": PaperEdgeConfig("all", "component"),
    "entry": PaperEdgeConfig("components", "entry"),
    "entry+io": PaperEdgeConfig("all", "entry"),
}


def side(model, cq, targets, samples: int) -> dict:
    """One model on one (retargeted) query: per target the workbench's edges, heads, and each paper count."""
    import torch

    from workbench.circuits.component.api import prepare_all
    from workbench.circuits.component.search import QuerySearch, SearchConfig
    from workbench.circuits.search import ZeroGapError

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
    return out


def measure(args, models: dict, store: Path) -> None:
    from workbench.circuits.component.api import retarget
    from workbench.corpus import tasks
    from workbench.provenance import model_id

    cfg = {"n": args.n, "targets": args.targets, "samples": args.samples, "split": "heldout", "seed": 0}
    cfg["models"] = {k: model_id(m) for k, m in models.items()}
    cfg["counts"] = {k: c.to_dict() for k, c in COUNTS.items()}
    res = json.loads(store.read_text()) if store.is_file() else {**cfg, "families": {}, "runs": []}
    if any(res.get(k) != v for k, v in cfg.items()):
        raise SystemExit(f"{store} was made with other settings; delete it or pass another --results")
    res["runs"].append({"commit": harness.commit(), "start": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    qs = {
        t: tasks.queries(t, args.n, seed=0, tokenizer=models["base"].tokenizer, split="heldout") for t in args.families
    }
    for i in range(args.n):
        for task in args.families:
            rows = res["families"].setdefault(task, [])
            if len(rows) > i:
                continue
            asked = retarget(models["base"], qs[task][i])
            row = {"prompt": asked.prompt, "answer": asked.answer, "wrong": asked.wrong}
            row.update({k: side(m, asked, args.targets, args.samples) for k, m in models.items()})
            rows.append(row)
            harness.write_text(store, json.dumps(res, indent=1))
            print(f"{task} {i + 1}/{args.n}", flush=True)


def _means(rows: list[dict], t: str, key: str) -> tuple[float, float, float, int]:
    """(base mean, sparse mean, geometric mean of per-query base/sparse, n) over queries both sides measured."""
    used = [r for r in rows if "skipped" not in r["base"] and "skipped" not in r["sparse"]]
    b = np.array([r["base"][t][key] for r in used], float)
    s = np.array([r["sparse"][t][key] for r in used], float)
    ok = (b > 0) & (s > 0)
    geo = float(np.exp(np.mean(np.log(b[ok] / s[ok])))) if ok.any() else float("nan")
    return (float(b.mean()), float(s.mean()), geo, len(used)) if used else (np.nan, np.nan, np.nan, 0)


def render(res: dict) -> list[str]:
    """One table per target: per family and count, base / sparse means and the geometric-mean ratio."""
    keys = ["edges", "heads", *COUNTS]
    lines = []
    for t in map(str, res["targets"]):
        lines += ["", f"### NDF {t}: mean base / mean sparse (geometric mean of per-query base/sparse)", ""]
        rows = []
        for task, qrows in res["families"].items():
            cells = []
            for k in keys:
                b, s, g, n = _means(qrows, t, k)
                cells.append(f"{b:.1f} / {s:.1f} ({g:.2f}×)")
            rows.append([f"{task} (n={n})", *cells])
        lines += harness.table(["family", "workbench edges", "heads", *COUNTS], rows)
    return lines + ["", *ceiling(res)]


def ceiling(res: dict) -> list[str]:
    """Per family: the prompt length, the open attention entries base / sparse (what one head's entry-resolved
    edge shrinks by), and the base circuit's component pairs (the most the pairs ratio could be: a sparse circuit
    of one pair)."""
    rows, t = [], str(res["targets"][-1])
    for task, qrows in res["families"].items():
        used = [r for r in qrows if "skipped" not in r["base"] and "skipped" not in r["sparse"]]
        if not used:
            continue
        ratio = np.exp(np.mean([np.log(r["base"]["open_entries"] / r["sparse"]["open_entries"]) for r in used]))
        rows.append(
            [
                task,
                f"{np.mean([r['base']['n_pos'] for r in used]):.1f}",
                f"{ratio:.1f}×",
                f"{np.mean([r['base'][t]['pairs'] for r in used]):.1f} (max {max(r['base'][t]['pairs'] for r in used)})",
            ]
        )
    head = ["family", "tokens", "open entries base/sparse (geo. mean)", f"base pairs at NDF {t}: the pairs ceiling"]
    return harness.table(head, rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="data/models/small")
    ap.add_argument("--sparse", default="data/models/small-sparse")
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
    if not args.render:
        import torch

        from workbench.models import load

        torch.set_num_threads(args.threads or torch.get_num_threads())
        measure(args, {"base": load(args.base)[0], "sparse": load(args.sparse)[0]}, args.results)
    print("\n".join(render(json.loads(args.results.read_text()))))


if __name__ == "__main__":
    main()
