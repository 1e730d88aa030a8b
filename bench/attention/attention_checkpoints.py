"""A sparse-attention run's kept states against the whole goal, chosen on the selection split only, and where
its held-out CE drifts from its training CE (issue #21).

1. Goal check. Per kept state: the run's own selection-split CE difference (held-out sequences
   0..eval_sequences-1) and top-1 accuracy per task family on *selection queries* (query seed 1; the
   run's report and verdict use seed 0), base vs sparse. A state is a candidate when the run's
   selection rule admits it at its tolerance and no family is more than --points below the base on the
   selection queries (a gain does not disqualify); the sparsest candidate, if any, is then judged once on the fresh verdict split
   and the seed-0 queries (the run's report). Nothing is tuned on the verdict split.
2. Drift. For a few steps: the paired CE difference sparse - base per sequence on held-out text
   (the selection split) and on the training text the run had just trained on (the batch_size x 16
   sequences of the 16 steps before that step), each with deterministic gates (evaluation: open iff
   logit > 0) and with sampled gates (training: hard logistic-noise samples, as the dual step sees them).

    .venv/bin/python bench/attention/attention_checkpoints.py --run RUN --checkpoints DIR --threads 1
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import attention_frontier as frontier  # noqa: E402
import harness  # noqa: E402

OUT = harness.BENCH / "results" / "attention_checkpoints.md"
SELECTION_QUERY_SEED = 1  # the report's queries use seed 0


def query_overlap(n: int) -> dict[str, float]:
    """Share of the selection queries whose prompt is also among the verdict (seed 0) queries, per family."""
    from workbench.corpus.tasks import QUERY_TASKS, queries

    out = {}
    for t in QUERY_TASKS:
        verdict = {q.prompt for q in queries(t, n, seed=0)}
        out[t] = sum(q.prompt in verdict for q in queries(t, n, seed=SELECTION_QUERY_SEED)) / n
    return out


def goal_rows(states, evals, base, record, n: int, points: float) -> tuple[list[list], list[dict]]:
    """One row per kept state (selection split and selection queries only) and the candidates."""
    from workbench.attention.report import interval
    from workbench.attention.verdict import feasible
    from workbench.models.card import task_accuracy

    tol, z = record["tolerance"], record["config"]["select_z"]
    acc_base = task_accuracy(base, n, SELECTION_QUERY_SEED)
    rows, cands = [], []
    for e in sorted((e for e in evals if e["step"] in states), key=lambda e: e["step"]):
        sparse = frontier.sparse_model(states[e["step"]], record["base_spec"], record["config"]["gates"])
        acc = task_accuracy(sparse, n, SELECTION_QUERY_SEED)
        diff = {t: round(100 * (a - acc_base[t]), 6) for t, a in acc.items()}  # -2.0 is not below -2
        admitted, close = feasible(e["difference"], tol, z), all(d >= -points for d in diff.values())
        worst = min(diff, key=diff.get)
        if admitted and close:
            cands.append(e)
        rows.append(
            [
                e["step"],
                f"{e['mean_open_keys_per_query']:.2f}",
                interval(e["difference"]),
                "yes" if admitted else "no",
                f"{worst} {diff[worst]:+.1f}",
                ", ".join(f"{t} {d:+.1f}" for t, d in diff.items() if d < -points) or "none",
                "**yes**" if admitted and close else "no",
            ]
        )
        print(f"step {e['step']}: admitted {admitted}, worst {worst} {diff[worst]:+.1f}", flush=True)
    return rows, cands


def seq_ce(model, tokens, sampled: bool, seed: int = 0):
    """Each sequence's mean next-token CE, gates deterministic (eval) or sampled (train mode, no grad)."""
    import torch

    was = model.training
    model.train(sampled)
    torch.manual_seed(seed)
    out = []
    try:
        with torch.no_grad():
            for s in range(0, len(tokens), 16):
                t = tokens[s : s + 16]
                logits = model(t)
                ce = torch.nn.functional.cross_entropy(
                    logits[:, :-1].flatten(0, 1), t[:, 1:].flatten(), reduction="none"
                )
                out.append(ce.view(len(t), -1).mean(1).double())
    finally:
        model.train(was)
    return torch.cat(out)


def drift_rows(states, record, base, corpus, steps: list[int]) -> list[list]:
    """CE difference sparse - base on held-out vs just-trained-on text, deterministic vs sampled gates."""
    import numpy as np
    import torch

    from workbench.attention.report import heldout, interval
    from workbench.attention.verdict import paired_difference

    cfg = record["config"]
    ctx = base.cfg.n_ctx
    held, _ = heldout(corpus, cfg["eval_sequences"], ctx)
    curves = [json.loads(ln) for ln in (Path(record["_run"]) / "curves.jsonl").read_text().splitlines() if ln]
    rows = []
    for step in steps:
        it = corpus.sequences(ctx, (step - 16) * cfg["batch_size"], split="train")
        train = torch.as_tensor(np.stack([next(it).tokens for _ in range(16 * cfg["batch_size"])]))
        sparse = frontier.sparse_model(states[step], record["base_spec"], cfg["gates"])
        cells = []
        for tokens in (held, train):
            b = seq_ce(base, tokens, False)
            cells += [interval(paired_difference(seq_ce(sparse, tokens, s), b)) for s in (False, True)]
        logged = [c["ce"] - c["ce_base"] for c in curves if step - 16 < c["step"] <= step]
        rows.append([step, *cells, f"{sum(logged) / len(logged):+.4f}"])
        print(f"drift at step {step}: {cells}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="a finished `workbench attention train` folder")
    ap.add_argument("--checkpoints", type=Path, help="folder of kept copies of the run's checkpoint.pt")
    ap.add_argument("--queries", type=int, default=200, help="selection queries per task family")
    ap.add_argument(
        "--points", type=float, default=2.0, help="no family more than this many accuracy points below base"
    )
    ap.add_argument("--drift-steps", default="", help="comma separated kept steps for the drift table")
    harness.add_common_args(ap, OUT, threads=1)
    a = ap.parse_args()
    threads = harness.set_threads(a.threads)
    info = harness.machine_info()
    from workbench.corpus import load_corpus
    from workbench.models import load

    record = {**json.loads((a.run / "sparsify.json").read_text()), "_run": str(a.run)}
    states, _, evals, _ = frontier.read_kept(a.run, a.checkpoints)
    base, tok = load(record["base_spec"], device="cpu")
    base.eval()
    rows, cands = goal_rows(states, evals, base, record, a.queries, a.points)
    best = min(cands, key=lambda e: e["open_fraction"], default=None)
    verdict = frontier.judge_states(a.run, {best["step"]}, states, a.queries)[best["step"]] if best else None
    drift_steps = [int(s) for s in a.drift_steps.split(",") if s.strip()]
    corpus = load_corpus(record["corpus"], tok, seed=record["config"]["seed"])
    drift = drift_rows(states, record, base, corpus, drift_steps) if drift_steps else []
    overlap = query_overlap(a.queries)
    lines = [
        "# Sparse attention: kept states against the whole goal, and the held-out CE drift",
        "",
        *harness.machine_lines(info, {}, threads, "no timing here: figures are CE differences and accuracies"),
        "",
        f"Run `{a.run.name}` (gate {record['config']['gates']['gate']}, tolerance {record['tolerance']}, "
        f"{record['config']['steps']} steps); kept states: steps {sorted(states)}.",
        "",
        "## Goal check on the selection split only",
        "",
        f"Admitted: the run's rule on held-out sequences 0-{record['config']['eval_sequences'] - 1} (CE difference "
        f"+ {record['config']['select_z']} SE <= {record['tolerance']}). Accuracy: {a.queries} selection queries per "
        f"family (query seed {SELECTION_QUERY_SEED}), sparse - base in points. Share of selection prompts also among "
        "the verdict (seed 0) prompts: " + ", ".join(f"{t} {100 * v:.0f}%" for t, v in overlap.items()) + ".",
        "",
        *harness.table(
            [
                "step",
                "keys / query / head",
                "selection CE diff [95%]",
                "admitted",
                "worst family",
                f"families more than {a.points:g} points below base",
                "candidate",
            ],
            rows,
        ),
        "",
        _verdict_line(best, verdict),
        "",
    ]
    if drift:
        lines += _drift_lines(drift, record)
    harness.write_text(a.out, "\n".join(lines))
    print(f"wrote {a.out}")


def _verdict_line(best, report) -> str:
    from workbench.attention.report import interval

    if best is None:
        return (
            "**No kept state is a candidate**: none is both admitted and within the points of the base on every family."
        )
    acc = report["task_accuracy_detail"]["difference"]
    return (
        f"Sparsest candidate: step {best['step']} ({report['mean_open_keys_per_query']:.2f} keys/query/head); on the "
        f"fresh verdict split {interval(report['verdict'])} (n = {report['verdict']['n']}), constraint "
        f"{'met' if report['verdict']['constraint_met'] else 'NOT met'}; verdict queries (seed 0): "
        + ", ".join(f"{t} {100 * d:+.1f}" for t, d in acc.items())
    )


def _drift_lines(drift: list[list], record: dict) -> list[str]:
    return [
        "## Where the held-out CE drifts",
        "",
        "Paired CE difference sparse - base per sequence [95%]: held-out = the selection split; trained-on = "
        f"the {16 * record['config']['batch_size']} training sequences of the 16 steps before the step. "
        "Deterministic gates: open iff logit > 0 (how the model is evaluated and saved); sampled: the training "
        "forward's hard logistic-noise samples (one draw). Last column: the run's own log (curves.jsonl, "
        "sampled gates, mean over those 16 steps).",
        "",
        *harness.table(
            [
                "step",
                "held-out, deterministic",
                "held-out, sampled",
                "trained-on, deterministic",
                "trained-on, sampled",
                "logged training diff",
            ],
            drift,
        ),
        "",
    ]


if __name__ == "__main__":
    main()
