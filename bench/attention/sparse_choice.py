"""Which sparse-attention state ships as data/models/<base>-sparse: every kept state of a run (and the shipped
model, when there is one), judged against the whole goal (docs/methods.md §7) by workbench.attention.judge.

The rule. A state is a candidate when the run's own selection rule admits it on the selection split (held-out
sequences 0-255: CE difference + select_z SE <= tolerance) and no task family is more than accuracy_drop below
the base on the selection queries (query seed 1). The sparsest candidate is then judged once: CE verdict on the
fresh split (upper 95% bound <= tolerance) and the accuracy guard on the verdict queries (seed 0). Every row
also gives the CE cost on the untouched split, which no run, selection or verdict reads (reported, never used
to choose). The issue's sparsity target (at most --keys open keys per query per head) is a column of its own.
The run's logged selection-split evaluations are checked against a published table when --published is given.

    .venv/bin/python bench/attention/sparse_choice.py --run RUN --checkpoints SNAPS --current data/models/tiny-sparse \
        --published bench/results/attention_dual_stream.md --command "..." --threads 1
    .venv/bin/python bench/attention/sparse_choice.py --base small --run RUN --checkpoints SNAPS --steps 800,1000 ...
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import attention_frontier as frontier  # noqa: E402
import harness  # noqa: E402

RESULTS = harness.BENCH / "results"  # <base>_sparse_choice.md
LABEL = {True: "rerun step", False: "step"}  # a rerun of a published run (--published) or the run itself


def _iv(d: dict) -> str:
    """A paired difference with its interval; under reference "both", the frozen base's after a semicolon."""
    from workbench.attention.report import interval

    return interval(d) + (f"; frozen base {_iv(d['against_base'])}" if d.get("against_base") else "")


def _selection(e: dict) -> str:
    """A logged evaluation's selection-split difference (and, under reference "both", the frozen base's)."""
    return _iv({**e["difference"], **({"against_base": e["difference_base"]} if "difference_base" in e else {})})


def _guard(g: dict) -> str:
    """The worst task family (sparse - base, points), and any sub-row more than the points below (not gated)."""
    from workbench.corpus.tasks import QUERY_TASKS

    low = [f"{t} {100 * d:+.1f}" for t, d in g["difference"].items() if t not in QUERY_TASKS and d < -g["max_drop"]]
    cell = f"{g['worst']} {100 * g['difference'][g['worst']]:+.1f}" + ("" if g["met"] else " (fails)")
    return cell + (f"; sub-row {', '.join(low)}" if low else "")


def _rows_off(j: dict) -> str:
    """Rows (query, head) with no open key and with exactly one: how much of the sparsity is rows switched off."""
    if "empty_row_fraction" not in j:  # a judgement kept in --cache before the fractions were recorded
        return "-"
    return f"{j['empty_row_fraction']:.1%} / {j['single_key_row_fraction']:.1%}"


def judge_run(
    base_spec: str, run: Path, checkpoints: Path, steps: list[int] | None, n_queries: int, cache: Path | None = None
) -> tuple[dict, list, dict]:
    """The run's record, its logged evaluations, and judge_state of every kept state (or of `steps`); cache: a
    JSON file of earlier judgements of this run's states at these settings (a state is fixed by its step)."""
    from workbench.attention.config import SparsifyConfig
    from workbench.attention.judge import judge_state
    from workbench.corpus import load_corpus
    from workbench.models import load

    states, controls, evals, newest = frontier.read_kept(run, checkpoints)
    record = newest["record"]
    saved = run / "sparsify.json"  # a finished run's whole config (the checkpoint's leaves out the verdict's size)
    cfg = SparsifyConfig.from_dict(json.loads(saved.read_text())["config"] if saved.is_file() else record["config"])
    base, tok = load(base_spec, device="cpu")
    corpus = load_corpus(record["corpus"], tok, seed=cfg.seed)
    key = f"{run.resolve()} queries={n_queries} judge={json.dumps(cfg.judge.to_dict(), sort_keys=True)}"
    kept = json.loads(cache.read_text()) if cache and cache.is_file() else {}
    kept = kept.get(key, {})
    judged, memo = {}, {}
    controls = controls if cfg.control == "finetune" else {}
    for step in sorted(steps or states):
        if str(step) not in kept:
            sparse = frontier.sparse_model(states[step], base_spec, record["config"]["gates"])
            ref, frozen, name = base.eval(), None, "base"
            if controls:  # a fair run: against its control at this step (and the frozen base, reference "both")
                ref, name = frontier.sparse_model(controls[step], base_spec, None), "control"
                frozen = base.eval() if cfg.reference == "both" else None
            kept[str(step)] = judge_state(ref, sparse, corpus, cfg, record["ctx_len"], n_queries, memo, frozen, name)
            if cache:
                harness.write_text(cache, json.dumps({key: kept}))
        judged[step] = kept[str(step)]
        print(f"step {step}: keys {judged[step]['mean_open_keys_per_query']:.2f}", flush=True)
    return {**record, "cfg": cfg, "corpus_obj": corpus}, evals, judged


def row(label: str, j: dict, e: dict | None, cfg, keys: float) -> tuple[list, bool]:
    """One table row and whether the state is a candidate (admitted on the selection split and the
    selection queries)."""
    from workbench.attention.verdict import admitted as admits

    sel, ver = j["accuracy_guard"]["selection"], j["accuracy_guard"]["verdict"]
    admitted = e is not None and admits(e, cfg.tolerance, cfg.select_z)
    candidate = admitted and sel["met"]
    k = j["mean_open_keys_per_query"]
    return [
        label,
        f"{k:.2f}",
        _rows_off(j),
        "yes" if k <= keys else "no",
        _selection(e) if e else "-",
        "yes" if admitted else "no",
        _guard(sel),
        "**yes**" if candidate else "no",
        _iv(j["verdict"]) + ("" if j["verdict"]["se_below_fifth_of_tolerance"] else " (inconclusive: SE >= tol/5)"),
        _guard(ver),
        "**yes**" if j["meets"] else "no",
        _iv(j["untouched"]),
    ], candidate


TOLERANCES = (0.005, 0.01, 0.015, 0.02, 0.03)  # the frontier over tolerances read from the run's own evaluations


def logged_lines(evals: list[dict], kept: set[int], cfg) -> list[str]:
    """Every evaluation the run logged on the selection split, and per tolerance the sparsest one the selection
    rule admits (what a run at that tolerance would have saved): which states a rerun with kept copies must judge."""
    from workbench.attention.verdict import admitted, sparsest_within

    rows = [
        [
            e["step"],
            f"{e['mean_open_keys_per_query']:.2f}",
            _selection(e),
            "yes" if admitted(e, cfg.tolerance, cfg.select_z) else "no",
            "yes" if e["step"] in kept else "no",
        ]
        for e in evals
    ]
    frontier = []
    for tol in TOLERANCES:
        e = sparsest_within(evals, tol, cfg.select_z)
        frontier.append(
            f"{tol:g}: " + (f"step {e['step']} ({e['mean_open_keys_per_query']:.2f} keys)" if e else "none")
        )
    return [
        f"Every evaluation the run logged (selection split, the run's own figures; admitted at tolerance {cfg.tolerance:g}):",
        "",
        *harness.table(["step", "keys/q/h", "selection CE diff [95%]", "admitted", "judged above"], rows),
        "",
        "The sparsest admitted evaluation per tolerance (selection split only; judged above only where its state was "
        "kept): " + "; ".join(frontier) + ".",
        "",
    ]


def published_evals(path: Path) -> dict[int, tuple[str, str]]:
    """{step: (keys/q/h, selection CE diff)} of the held-out-dual run in a published dual-stream table (its
    'Every evaluation' table: step, keys, selection CE diff first)."""
    out, on = {}, False
    for line in path.read_text().splitlines():
        on = on or line.startswith("Every evaluation")
        cells = [c.strip() for c in line.strip("|").split("|")]
        if on and line.startswith("|") and cells[0].isdigit():
            out[int(cells[0])] = (cells[1], cells[2])
    return out


def reproduction_lines(evals: list[dict], published: dict) -> list[str]:
    rows, same = [], 0
    for e in evals:
        if e["step"] in published:
            now = (f"{e['mean_open_keys_per_query']:.2f}", _iv(e["difference"]))
            same += now == published[e["step"]]
            rows.append([e["step"], *now, *published[e["step"]], "yes" if now == published[e["step"]] else "**no**"])
    return [
        f"Reproduction: {same} of {len(rows)} logged evaluations equal the published ones to the printed digits.",
        "",
        *harness.table(
            ["step", "rerun keys/q/h", "rerun selection CE diff", "published keys/q/h", "published", "same"], rows
        ),
        "",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="the run folder (finished or not)")
    ap.add_argument("--checkpoints", type=Path, required=True, help="folder of kept copies of its checkpoint.pt")
    ap.add_argument("--base", default="tiny", help="the base model spec (default: %(default)s)")
    ap.add_argument("--current", type=Path, help="the shipped sparse model, judged beside the run's states")
    ap.add_argument("--published", type=Path, help="a dual-stream table to check the run's evaluations against")
    ap.add_argument("--steps", default="", help="comma separated steps (default: every kept state)")
    ap.add_argument("--queries", type=int, default=200, help="held-out queries per family and query seed")
    ap.add_argument("--keys", type=float, default=1.5, help="the sparsity target: open keys per query per head")
    ap.add_argument("--command", default="", help="the run's command line, quoted in the report")
    ap.add_argument("--cache", type=Path, help="JSON file keeping each state's judgement between invocations")
    harness.add_common_args(ap, None, threads=1)
    a = ap.parse_args()
    a.out = a.out or RESULTS / f"{Path(a.base).name}_sparse_choice.md"
    threads = harness.set_threads(a.threads)
    machine = harness.machine_info()
    from workbench.attention.judge import judge_folder
    from workbench.attention.report import read_report
    from workbench.attention.verdict import dual_sequences

    steps = [int(s) for s in a.steps.split(",") if s.strip()] or None
    record, evals, judged = judge_run(a.base, a.run, a.checkpoints, steps, a.queries, a.cache)
    cfg = record["cfg"]
    by_step = {e["step"]: e for e in evals}
    rows, cands = [], []
    for step, j in judged.items():
        r, cand = row(f"{LABEL[bool(a.published)]} {step}", j, by_step.get(step), cfg, a.keys)
        rows.append(r)
        cands += [(j["mean_open_keys_per_query"], step)] if cand else []
    cj = None
    if a.current:
        current = read_report(a.current)
        cj = judge_folder(a.current, n_queries=a.queries)
        label = f"current {a.current.name} (step {current['selected_step']})"
        rows.append(row(label, cj, current["selected_eval"], cfg, a.keys)[0])
    dual, dual_first = dual_sequences(record["corpus_obj"], cfg, record["ctx_len"])
    dual_range = (dual_first, dual_first + len(dual))
    lines = _lines(a, machine, threads, cfg, record["ctx_len"], rows, cands, judged, cj, dual_range)
    lines += logged_lines(evals, set(judged), cfg)
    if a.published:
        lines += reproduction_lines(evals, published_evals(a.published))
    harness.write_text(a.out, "\n".join(lines))
    print(f"wrote {a.out}")


def _lines(a, machine, threads, cfg, ctx, rows, cands, judged, cj, dual_range) -> list[str]:
    j0 = next(iter(judged.values()))
    v, u = j0["verdict"]["split"]["sequences"], j0["untouched"]["split"]["sequences"]
    jc, label = cfg.judge, LABEL[bool(a.published)]
    fair = cfg.control == "finetune"  # judged against the run's fine-tuned control at each state's step
    ref = "control" if fair else "base"
    both = (
        "; after the semicolon, sparse - frozen base on the same sequences (reference both: a state is admitted, "
        "and the verdict met, only within the tolerance of each)"
        if fair and cfg.reference == "both"
        else ""
    )
    best = min(cands, default=None)
    chosen = judged[best[1]] if best else None
    if chosen is None:
        verdict = f"**No {label.split()[0]} state is a candidate** (admitted on the selection split and within the points on the selection queries)."
    else:
        verdict = (
            f"Sparsest candidate: {label} {best[1]} ({best[0]:.2f} keys/q/h); verdict: CE "
            f"{'met' if chosen['verdict']['constraint_met'] else 'NOT met'}, accuracy guard on the verdict queries "
            f"{'met' if chosen['accuracy_guard']['verdict']['met'] else 'NOT met'}: "
            + ("**meets the rule**" if chosen["meets"] else "**does not meet the rule**")
        )
    return [
        f"# Which sparse-attention state ships as {Path(a.base).name}-sparse: every kept state against the whole goal",
        "",
        *harness.machine_lines(machine, {}, threads, "no timing here: figures are CE differences and accuracies"),
        "",
        f"Run: `{a.run}` (kept states: {', '.join(str(s) for s in judged)})"
        + (f"; command: `{a.command}`" if a.command else "")
        + ".",
        "",
        f"Splits (held-out sequences, T = {ctx}): selection 0-{cfg.eval_sequences - 1} (the run's own choice), verdict "
        f"{v[0]}-{v[1] - 1} (fresh), dual stream {dual_range[0]}-{dual_range[1] - 1} (the held-out-dual run's dual "
        f"step reads it), untouched {u[0]}-{u[1] - 1} (no run, selection, verdict or dual step reads it; shares no "
        f"document with the others). CE figures: paired per-sequence difference sparse - {ref}, deterministic gates, "
        f"with its 95% interval{both}. Accuracy: {a.queries} held-out queries per family, selection queries seed "
        f"{jc.selection_query_seed}, verdict queries seed {jc.verdict_query_seed}; guard: no family more than "
        f"{100 * jc.accuracy_drop:g} points below {ref} (worst task family shown, sparse - {ref} in points; sub-rows, the "
        "unseen IOI template and both digits of the addition, are shown when below that but not gated). Keys/q/h on the "
        f"verdict split; target <= {a.keys:g}.",
        "",
        *harness.table(
            [
                "state",
                "keys/q/h",
                "rows with 0 / 1 open key",
                f"<= {a.keys:g} keys",
                "selection CE diff [95%]",
                "admitted (selection)",
                "worst family, selection queries",
                "candidate",
                "verdict CE diff [95%]",
                "worst family, verdict queries",
                "meets rule (verdict CE and accuracy)",
                "untouched CE diff [95%]",
            ],
            rows,
        ),
        "",
        verdict,
        "",
        *_decision(best, chosen, judged, cj, label),
    ]


def _decision(best, chosen, judged: dict, cj: dict | None, label: str) -> list[str]:
    """Ship the sparsest candidate if it meets the rule (and is sparser than the current model, when there is
    one), else keep the current model or ship nothing; and the states that pass only where choosing them would
    be in-sample."""
    late = [
        f"step {s} ({j['mean_open_keys_per_query']:.2f} keys/q/h)"
        for s, j in judged.items()
        if j["meets"] and (best is None or s != best[1])
    ]
    meets = chosen is not None and chosen["meets"]
    if cj is None:
        decision = (
            f"Decision: **ship {label} {best[1]}** (it meets the rule)."
            if meets
            else "Decision: **nothing ships**: no candidate chosen on the selection split and selection queries "
            "meets the rule."
        )
    elif meets and best[0] < cj["mean_open_keys_per_query"]:
        decision = f"Decision: **ship {label} {best[1]}** (it meets the rule and is sparser than the current model)."
    else:
        decision = (
            "Decision: **keep the current model**: no candidate chosen on the selection split and selection queries "
            f"meets the rule with fewer than its {cj['mean_open_keys_per_query']:.2f} keys/q/h (the current model's "
            f"own accuracy guard on the verdict queries: {'met' if cj['accuracy_guard']['verdict']['met'] else 'NOT met'}, "
            f"worst family {_guard(cj['accuracy_guard']['verdict'])})."
        )
    notes = (
        [
            "States that pass on the verdict split and verdict queries but are not the sparsest candidate (choosing "
            "among them there would make the verdict in-sample): " + ", ".join(late) + "."
        ]
        if late
        else []
    )
    return [*notes, "", decision, ""]


if __name__ == "__main__":
    main()
