"""A run with the dual step on a held-out stream (`--dual-stream heldout`) beside a run with it on the
training batches (tiny-sparse), at the same steps (issue #21, the drift of bench/results/attention_sparsify.md).

Per step kept in either run: open keys per query per head and the paired CE difference sparse - base with
its 95% interval on the fresh verdict split (deterministic gates), the run's own selection-split
difference (logged at that evaluation), and, for the held-out-dual run, the mean difference its dual
step saw on the dual stream over the eval_every steps up to that step. Works on an unfinished run (its
checkpoints only).

    .venv/bin/python bench/attention/attention_dual_stream.py --run RUN --checkpoints DIR --ref-run data/models/tiny-sparse \
        --ref-checkpoints DIR --threads 1
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import attention_frontier as frontier  # noqa: E402
import harness  # noqa: E402

OUT = harness.BENCH / "results" / "attention_dual_stream.md"


def run_info(run: Path, checkpoints: Path | None) -> dict:
    """A run's kept states, evaluations, config and curves (the newest checkpoint's: a run folder copied as an
    embedded model keeps no curves file, an unfinished one has no sparsify.json)."""
    states, _, evals, newest = frontier.read_kept(run, checkpoints)
    finished = run / "sparsify.json"
    record = json.loads(finished.read_text()) if finished.is_file() else newest["record"]
    return {**record, "states": states, "evals": evals, "curves": newest["curves"]}


def judge(info: dict, steps: list[int], split: tuple, base: str) -> dict[int, dict]:
    """Keys per query and the paired CE difference on the verdict split, per kept step."""
    from workbench.attention.report import measure, summarise
    from workbench.attention.verdict import paired_difference

    tokens, base_ce = split
    out = {}
    for step in steps:
        if step in info["states"]:
            model = frontier.sparse_model(info["states"][step], base, info["config"]["gates"])
            sums = measure(model, tokens)
            out[step] = {"diff": paired_difference(sums.pop("seq_ce"), base_ce), **summarise(sums)}
    return out


def verdict_split(info: dict, base_spec: str) -> tuple:
    """The verdict split's tokens, the base model's per-sequence CE on it, and its range."""
    from workbench.attention.config import SparsifyConfig
    from workbench.attention.report import measure, stack
    from workbench.attention.verdict import verdict_sequences
    from workbench.corpus import load_corpus
    from workbench.models import load

    c = SparsifyConfig.from_dict(info["config"])
    base, tok = load(base_spec, device="cpu")
    seqs, first = verdict_sequences(
        load_corpus(info["corpus"], tok, seed=c.seed),
        c.eval_sequences,
        c.verdict_sequences,
        base.cfg.n_ctx,
        c.verdict_start,
    )
    tokens = stack(seqs)[0]
    return (tokens, measure(base, tokens)["seq_ce"]), [first, first + len(seqs)]


def row(step: int, info: dict, judged: dict, every: int) -> list[str]:
    from workbench.attention.report import interval

    e = next((e for e in info["evals"] if e["step"] == step), None)
    j = judged.get(step)
    dual = [r["dual_difference"] for r in info["curves"] if step - every < r["step"] <= step and "dual_difference" in r]
    lam = next((r["lambda"] for r in info["curves"] if r["step"] == step), None)
    return [
        f"{j['mean_open_keys_per_query']:.2f}" if j else "-",
        interval(j["diff"]) if j else "not kept",
        interval(e["difference"]) if e else "-",
        f"{sum(dual) / len(dual):+.4f}" if dual else "-",
        f"{lam:.3g}" if lam is not None else "-",
    ]


def evaluation_row(e: dict, dual: dict, ref: dict, every: int) -> list:
    """One selection-split evaluation of the held-out-dual run beside the reference's at the same step."""
    from workbench.attention.report import interval

    r = next((r for r in ref["evals"] if r["step"] == e["step"]), None)
    d = row(e["step"], dual, {}, every)
    ref_lam = next((c["lambda"] for c in ref["curves"] if c["step"] == e["step"]), None)
    return [e["step"], f"{e['mean_open_keys_per_query']:.2f}", *d[2:]] + (
        [f"{r['mean_open_keys_per_query']:.2f}", interval(r["difference"]), f"{ref_lam:.3g}"]
        if r and ref_lam is not None
        else ["-", "-", "-"]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="the --dual-stream heldout run folder (finished or not)")
    ap.add_argument("--checkpoints", type=Path, help="folder of kept copies of its checkpoint.pt")
    ap.add_argument("--ref-run", type=Path, default=Path("data/models/tiny-sparse"), help="the training-batch run")
    ap.add_argument("--ref-checkpoints", type=Path, help="folder of kept copies of the reference run's checkpoint.pt")
    ap.add_argument("--base", default="tiny", help="the base model spec both runs started from")
    ap.add_argument("--steps", default="", help="comma separated steps (default: every step kept in the run)")
    ap.add_argument("--command", default="", help="the run's command line, quoted in the report")
    harness.add_common_args(ap, OUT, threads=1)
    a = ap.parse_args()
    threads = harness.set_threads(a.threads)
    machine = harness.machine_info()
    dual, ref = run_info(a.run, a.checkpoints), run_info(a.ref_run, a.ref_checkpoints)
    steps = [int(s) for s in a.steps.split(",")] if a.steps else sorted(dual["states"])
    split, seqs = verdict_split(dual, a.base)
    judged = {n: judge(r, steps, split, a.base) for n, r in (("dual", dual), ("ref", ref))}
    every = dual["config"]["eval_every"]
    table = [[s, *row(s, dual, judged["dual"], every), *row(s, ref, judged["ref"], every)[:3]] for s in steps]
    head = ["keys/q/h", "fresh split CE diff [95%]", "selection split CE diff [95%]"]
    lines = [
        "# Sparse attention: the dual step on a held-out stream vs on the training batches (issue #21)",
        "",
        *harness.machine_lines(machine, {}, threads, "no timing here: figures are CE differences and counts"),
        "",
        f"Held-out-dual run: `{a.run}` ({max(r['step'] for r in dual['curves'])} steps reached, dual stream "
        f"every {dual['config']['dual_every']} steps on {dual['config']['dual_sequences']} held-out sequences); "
        f"reference: `{a.ref_run}` (dual step on the training batches).",
        *([f"Command: `{a.command}`"] if a.command else []),
        "",
        f"Fresh split: the verdict split, held-out sequences {seqs[0]}-{seqs[1] - 1} (n = {seqs[1] - seqs[0]}), "
        "deterministic gates, paired per-sequence CE difference sparse - base with its 95% interval; selection "
        f"split: held-out sequences 0-{dual['config']['eval_sequences'] - 1} as the run logged it; dual stream: the "
        "mean held-out difference the "
        f"dual step saw over the {every} steps up to the row's step; keys/q/h on the fresh split (T = 128).",
        "",
        *harness.table(
            [
                "step",
                *[f"held-out dual: {h}" for h in head],
                "dual-stream diff",
                "lambda",
                *[f"tiny-sparse: {h}" for h in head],
            ],
            table,
        ),
        "",
    ]
    lines += [
        "Every evaluation (the selection split as each run logged it, deterministic gates; keys/q/h on that split):",
        "",
        *harness.table(
            ["step", "held-out dual: keys/q/h", "selection CE diff [95%]", "dual-stream diff", "lambda"]
            + ["tiny-sparse: keys/q/h", "selection CE diff [95%]", "lambda"],
            [evaluation_row(e, dual, ref, every) for e in dual["evals"]],
        ),
        "",
    ]
    harness.write_text(a.out, "\n".join(lines))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
