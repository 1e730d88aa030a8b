"""The frontier over tolerances from the checkpoints of one sparse-attention run (issue #21).

Four runs, one per tolerance, do not fit the shared CPU, so this derives what one run can honestly say:
for each tolerance, the sparsest evaluated state of the run that the run's own selection rule admits
(selection-split CE difference + select_z standard errors within that tolerance), among the states that
were kept (copies of the run's checkpoint.pt, and the run's saved model), judged on the fresh verdict
split and on the task families exactly as the run's own report judges its saved model. It is a
selection among checkpoints of one run trained at the run's tolerance, not separate runs: at a looser
tolerance a run trained for it would go sparser; at a tighter one it would have trained differently.

    .venv/bin/python bench/attention/attention_frontier.py --run RUN_FOLDER --checkpoints DIR --threads 1
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

OUT = harness.BENCH / "results" / "attention_frontier.md"
TOLERANCES = (0.005, 0.01, 0.02, 0.05)


class KeptRun(NamedTuple):
    """What a run's kept checkpoints and saved model hold, each file read once (a fair run's are 178 MB on small)."""

    states: dict[int, object]  # step: the model state, or the run folder (its saved model)
    controls: dict[int, object]  # step: a `--control finetune` run's reference weights, or its saved control/ folder
    evals: list[dict]  # the evaluation rows of the longest history
    newest: dict  # the checkpoint of the highest step (its record and curves)


def read_kept(run: Path, checkpoints: Path | None) -> KeptRun:
    """The kept states and controls of a run: copies of its checkpoint.pt in `checkpoints`, its checkpoint.pt and, once
    finished, its saved model; each checkpoint also keeps the sparsest admitted state so far ("best")."""
    from workbench import checkpoint
    from workbench.attention.card import CONTROL_DIR

    states, controls, evals, newest = {}, {}, [], {}
    for p in (sorted(checkpoints.glob("*.pt")) if checkpoints else []) + [run / "checkpoint.pt"]:
        if not p.is_file():
            continue
        c = checkpoint.read(p)
        states[c["step"]] = c["model"]
        if c.get("control"):  # what the run judged this state against
            controls[c["step"]] = c["control"].get("average", c["control"]["model"])
        if c.get("best"):
            states[c["best"]["step"]] = c["best"]["state"]
            if "control_state" in c["best"]:
                controls[c["best"]["step"]] = c["best"]["control_state"]
        evals = c["evals"] if len(c["evals"]) > len(evals) else evals
        newest = c if c["step"] > newest.get("step", -1) else newest
    if (run / "sparsify.json").is_file():  # a finished run: its saved model too (an unfinished one has none)
        record = json.loads((run / "sparsify.json").read_text())
        states[record["selected_step"]] = run
        if (run / CONTROL_DIR).is_dir():
            controls[record["selected_step"]] = run / CONTROL_DIR
        evals = record["evals"] if len(record["evals"]) >= len(evals) else evals
    return KeptRun(states, controls, evals, newest)


def sparse_model(state, base_spec: str, gates: dict | None):
    """The gated model at one kept state (gates None: the ungated base with those weights, e.g. a run's fine-tuned
    control at a kept step)."""
    from workbench.attention import gates as G
    from workbench.attention.config import GateConfig
    from workbench.models import load

    if isinstance(state, Path):
        return load(str(state), device="cpu")[0].eval()
    model = load(base_spec, device="cpu")[0]
    if gates is not None:
        model = G.install(model, GateConfig.from_dict(gates))
    model.load_state_dict(state)
    return model.eval()


def judge_states(run: Path, steps: set[int], states: dict, queries: int) -> dict[int, dict]:
    """Each chosen state's report on the fresh verdict split (the run's split, n and per-family queries)."""
    from workbench.attention.config import SparsifyConfig
    from workbench.attention.report import build_report
    from workbench.corpus import load_corpus
    from workbench.models import load

    record = json.loads((run / "sparsify.json").read_text())
    cfg = SparsifyConfig.from_dict(record["config"])
    base, tok = load(record["base_spec"], device="cpu")
    corpus = load_corpus(record["corpus"], tok, seed=cfg.seed)
    out = {}
    for step in sorted(steps):
        sparse = sparse_model(states[step], record["base_spec"], record["config"]["gates"])
        out[step] = build_report(base, sparse, corpus, {}, cfg, None, queries, examples_per_task=1)
        print(f"step {step}: fresh-split difference {out[step]['verdict']['difference']:+.4f}", flush=True)
    return out


def rows(tolerances, evals, states, reports, z: float) -> tuple[list[list], list[str]]:
    """One table row per tolerance, and notes on sparser admitted states that were not kept."""
    from workbench.attention.report import interval
    from workbench.attention.verdict import judge, sparsest_within

    table, notes = [], []
    kept = [e for e in evals if e["step"] in states]
    for tol in tolerances:
        best, any_ = sparsest_within(kept, tol, z), sparsest_within(evals, tol, z)
        if any_ is not None and (best is None or any_["open_fraction"] < best["open_fraction"]):
            notes.append(
                f"tolerance {tol}: step {any_['step']} ({any_['mean_open_keys_per_query']:.2f} keys/query/head, "
                f"selection split {interval(any_['difference'])}) is sparser but its state was not kept"
            )
        if best is None:
            table.append([tol, "no kept state admitted", "", "", "", "", "", "", ""])
            continue
        r = reports[best["step"]]
        v = judge({k: r["verdict"][k] for k in ("n", "difference", "se", "ci95")}, tol)
        acc = r["task_accuracy_detail"]["difference"]
        worst = min(acc, key=acc.get)
        table.append(
            [
                tol,
                best["step"],
                f"{r['mean_open_keys_per_query']:.2f}",
                f"{100 * r['open_fraction']:.2f}%",
                f"{r['empty_row_fraction']:.1%} / {r['single_key_row_fraction']:.1%}",
                interval(best["difference"]),
                interval(v),
                "met" if v["constraint_met"] else "NOT met",
                f"{worst} {100 * acc[worst]:+.1f}",
            ]
        )
    return table, notes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="a finished `workbench attention train` folder")
    ap.add_argument("--checkpoints", type=Path, help="folder of kept copies of the run's checkpoint.pt")
    ap.add_argument("--tolerances", default=",".join(map(str, TOLERANCES)), help="comma separated (nats)")
    ap.add_argument("--queries", type=int, default=200, help="held-out queries per task family")
    harness.add_common_args(ap, OUT, threads=1)
    a = ap.parse_args()
    threads = harness.set_threads(a.threads)
    info = harness.machine_info()
    tolerances = [float(t) for t in a.tolerances.split(",")]
    record = json.loads((a.run / "sparsify.json").read_text())
    z = record["config"]["select_z"]
    states, _, evals, _ = read_kept(a.run, a.checkpoints)
    from workbench.attention.verdict import sparsest_within

    chosen = {e["step"] for t in tolerances if (e := sparsest_within([e for e in evals if e["step"] in states], t, z))}
    reports = judge_states(a.run, chosen, states, a.queries)
    table, notes = rows(tolerances, evals, states, reports, z)
    r0 = next(iter(reports.values()), None)
    v = r0["verdict"] if r0 else None
    split = (
        f"held-out sequences {v['split']['sequences'][0]}-{v['split']['sequences'][1] - 1}, n = {v['n']}" if v else ""
    )
    lines = [
        "# Sparse attention: keys per query against the CE difference, per tolerance (one run's checkpoints)",
        "",
        *harness.machine_lines(info, {}, threads, "no timing here: figures are CE differences and counts"),
        "",
        f"Run: `{a.run.name}` (trained at tolerance {record['tolerance']}, {record['config']['steps']} steps, "
        f"gate {record['config']['gates']['gate']}); {len(evals)} evaluations every "
        f"{record['config']['eval_every']} steps, states kept for steps {sorted(states)}.",
        "",
        "**A selection among checkpoints of one run trained at tolerance "
        f"{record['tolerance']}, not separate runs per tolerance.** Per tolerance: the sparsest evaluated state "
        f"whose selection-split (held-out sequences 0-{record['config']['eval_sequences'] - 1}) CE difference "
        f"+ {z} SE is within it, judged on the fresh verdict split ({split}) like the run's own report "
        "(constraint met: upper 95% bound within the tolerance).",
        "",
        *harness.table(
            [
                "tolerance",
                "step",
                "open keys / query / head",
                f"open % of causal pairs (T = {r0['ctx_len'] if r0 else '-'})",
                "rows with 0 / 1 open key",
                "selection split: CE diff [95%]",
                "fresh split: CE diff [95%]",
                "constraint",
                f"worst family, accuracy points vs base ({a.queries} queries)",
            ],
            table,
        ),
        "",
        *[f"- {n}" for n in notes],
        "",
    ]
    harness.write_text(a.out, "\n".join(lines))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
