"""Base vs sparse attention: the heads carrying 80% of the attention-mediated attribution reaching the answer
logit and the attention entries per feature -> feature edge (docs/methods.md §11), per task family, each family
one `workbench attention compare --transcoders` run whose JSON is kept, so a run resumes per family:

    python bench/circuits/head_flow_bench.py --base-set BASE_SET --sparse-set SPARSE_SET [--n 20] [--split heldout]
    python bench/circuits/head_flow_bench.py --render [--split heldout]   # the section from the stored JSONs, measure nothing

The report's section `heads-SPLIT` of bench/results/feature_circuits.md names the commit and the load average at
the start of each family's run, and reads base - sparse from the per-query differences (paired t intervals).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness  # noqa: E402
from feature_circuit_bench import OUT, write_section  # noqa: E402

from workbench.attention.claims import format_gap  # noqa: E402

FAMILIES = ("ioi", "induction", "greater_than", "facts", "addition")


def run_family(args, task: str, store: Path) -> None:
    """One family's compare, its JSON written atomically by the CLI; its commit and load beside it."""
    meta = {
        "commit": harness.commit(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "load_avg_at_start": " ".join(f"{x:.1f}" for x in os.getloadavg()),
    }
    argv = [sys.executable, "-m", "workbench.cli", "attention", "compare", "--sparse", args.sparse, "--quiet"]
    argv += ["--transcoders", str(args.base_set), str(args.sparse_set), "--task", task, "--n", str(args.n)]
    argv += ["--split", args.split, "--out", str(store)]
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, cwd=harness.ROOT)
    meta["wall_seconds"] = time.perf_counter() - t0
    harness.write_text(store.with_suffix(".run.json"), json.dumps(meta, indent=1))


def top_heads(res: dict, side: str, k: int = 2) -> str:
    """The k heads with the largest mean share over the queries (a head absent from a query counts 0 there)."""
    total: dict[str, float] = {}
    for q in res["queries"]:
        for head, share in q[side]["head_share"].items():
            total[head] = total.get(head, 0.0) + share / len(res["queries"])
    return ", ".join(f"{h} {s:.2f}" for h, s in sorted(total.items(), key=lambda x: -x[1])[:k])


def family_row(res: dict) -> list:
    s, gap, seen = res["summary"], res["base_minus_sparse"], res["in_training_cache"]
    f = lambda side, key, d=1: f"{s[side][key]['mean']:.{d}f} / {s[side][key]['median']:.{d}f}"  # noqa: E731
    return [
        res["task"],
        len(res["queries"]),
        f"{seen['base']} / {seen['sparse']}",
        f("base", "heads_needed"),
        f("sparse", "heads_needed"),
        format_gap(gap["heads_needed"]),
        f("base", "entries_covering", 2),
        f("sparse", "entries_covering", 2),
        format_gap(gap["entries_covering"]),
        f"{s['base']['entries_nonzero']['mean']:.2f} / {s['sparse']['entries_nonzero']['mean']:.2f}",
        f"{s['base']['feature_edges']['mean']:.0f} / {s['sparse']['feature_edges']['mean']:.0f}",
        f"{s['base']['attention_share']['mean']:.3f} / {s['sparse']['attention_share']['mean']:.3f}",
        f"{top_heads(res, 'base')}; {top_heads(res, 'sparse')}",
    ]


def render(args, stores: dict[str, Path]) -> list[str]:
    done = {t: p for t, p in stores.items() if p.is_file()}
    results = {t: json.loads(p.read_text()) for t, p in done.items()}
    metas = {t: json.loads(p.with_suffix(".run.json").read_text()) for t, p in done.items()}
    first = next(iter(results.values()), None)
    missing = [t for t in stores if t not in done]
    title = f"Base vs sparse attention: heads carrying the attribution, entries per feature edge ({args.split} queries)"
    lines = ["", f"## {title}" + (f" (PARTIAL: {', '.join(missing)} not run yet)" if missing else ""), ""]
    commits = sorted({m["commit"] for m in metas.values()})
    runs = [f"{t} {m['load_avg_at_start']} ({m['wall_seconds'] / 60:.0f} min)" for t, m in metas.items()]
    lines.append(f"- Commit: {', '.join(commits) or '-'}")
    lines.append(f"- Load average at the start of each family's run (one thread each): {'; '.join(runs)}")
    if first:
        lines += [
            f"- Command per family: `workbench attention compare --sparse {args.sparse} --transcoders BASE_SET "
            f"SPARSE_SET --task T --n {args.n} --split {args.split}`; models base {first['base_model']}, sparse "
            f"{first['sparse_model']}; sets base {first['transcoders']['base']}, sparse {first['transcoders']['sparse']}",
            f"- Queries: `tasks.queries(task, {args.n}, seed=0, split='{args.split}')`; both models asked for the base "
            'model\'s answer; "in training cache": prompts (token ids, BOS dropped) occurring anywhere in the train '
            "split of the cache each set was trained on (workbench/cache/overlap.py), base set / sparse set",
            "- base - sparse: the mean per-query difference with its paired Student-t 95% interval (docs/methods.md "
            "§11) over the queries both models have a value for; a / b cells are base / sparse",
        ]
    lines.append(
        f"- Per-family JSON: {args.work}/{args.split}-TASK-n{args.n}.json (resume: run the same command again)"
    )
    lines.append("")
    return lines + harness.table(header(first), [family_row(r) for r in results.values()])


def header(first: dict | None) -> list[str]:
    """The columns of family_row (first: one family's result, for the model's head count)."""
    heads = first["queries"][0]["base"]["heads"] if first else "?"
    cols = ["family", "queries", "in training cache", f"heads for 80%, base (mean / median, of {heads})", "sparse"]
    cols += ["base - sparse heads [95% CI]", "entries per edge covering 80%, base (mean / median)", "sparse"]
    cols += ["base - sparse entries [95% CI]", "nonzero entries per edge", "feature edges crossing attention"]
    return cols + ["attention share", "top heads by mean share, base; sparse"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-set", type=Path, help="the base model's transcoder set")
    ap.add_argument("--sparse-set", type=Path, help="the sparse model's transcoder set")
    ap.add_argument("--sparse", default="tiny-sparse", help="the sparse model (default: %(default)s)")
    ap.add_argument("--families", default=",".join(FAMILIES), help="task families (default: %(default)s)")
    ap.add_argument("--n", type=int, default=20, help="queries per family (default: %(default)s)")
    ap.add_argument(
        "--split", default="heldout", choices=("heldout", "train"), help="query split (default: %(default)s)"
    )
    ap.add_argument(
        "--work", type=Path, default=harness.WORK / "head_flow", help="per-family JSONs (default: %(default)s)"
    )
    ap.add_argument("--render", action="store_true", help="re-render the section from the stored JSONs")
    harness.add_common_args(ap, OUT, threads=1)
    args = ap.parse_args()
    if not args.render and not (args.base_set and args.sparse_set):
        raise SystemExit("pass --base-set and --sparse-set (or --render)")
    harness.set_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    stores = {t: args.work / f"{args.split}-{t}-n{args.n}.json" for t in args.families.split(",")}
    for task, store in stores.items():
        if not args.render and not store.is_file():
            run_family(args, task, store)
        write_section(args.out, f"heads-{args.split}", render(args, stores))
    print(args.out.read_text())


if __name__ == "__main__":
    main()
