"""The fine-tuned-base control of a sparse-attention run: the sparsity trainer also fine-tunes the model's weights, so
a sparse model can score a lower CE than its base for reasons that have nothing to do with its gates. The control is
the base fine-tuned on the run's own training batches, for as many steps as the shipped state had, with the run's
optimiser settings (AdamW lr, weight decay, warm-up, gradient clip) and no gates. Then, on the run's verdict and
untouched splits, three paired CE differences with their 95% intervals: control - base (what fine-tuning alone
buys), sparse - base (the figure the card reports) and sparse - control (what the gates cost against a base trained
as long).

    python bench/attention/finetune_control.py --sparse data/models/small-sparse [--steps N] [--control-average D]
        [--threads 1] [--write]

--control-average D compares with the running average of the control's weights (decay D a step), as the fair
runs' `attention train --control finetune --control-average D` do: one fine-tuned control's last state is a
reference only to about 0.005 nats (docs/methods.md §7).

--write records the differences in the model's attention_report.json (`fine_tuned_control`), rewrites its card and
saves the control beside the model as control/, so a shipped model whose run had no control states what its gates cost
against one, and `attention compare --control` (and the Compare page) split its circuits' base - sparse with it.

Resumable: the control's checkpoint is written (atomically) every --checkpoint-every steps in --work, and a rerun of
the same command continues from it; a checkpoint from other settings is refused.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness  # noqa: E402

OUT = harness.BENCH / "results"


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sparse", default="data/models/small-sparse", help="a sparse model folder (default: %(default)s)")
    ap.add_argument("--steps", type=int, help="fine-tuning steps (default: the shipped state's step)")
    ap.add_argument(
        "--control-average",
        type=float,
        default=0.0,
        help="decay of a running average of the control's weights that the differences use (0: its last state)",
    )
    ap.add_argument("--checkpoint-every", type=int, default=50)
    ap.add_argument("--sequences", type=int, help="first N sequences of each split only (default: all of them)")
    ap.add_argument("--work", type=Path, help="the control's checkpoint folder (default: bench/work/control-NAME)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 3 steps, 16 sequences per split")
    ap.add_argument(
        "--write", action="store_true", help="record the differences in the model's report and rewrite its card"
    )
    harness.add_common_args(ap, None, threads=1)
    args = ap.parse_args()
    if not 0 <= args.control_average < 1:
        ap.error(f"--control-average {args.control_average} must be in [0, 1) (0: the control's last state)")
    if args.quick:
        args.steps, args.sequences, args.checkpoint_every = 3 if args.steps is None else args.steps, 16, 2
    name = Path(args.sparse).name
    args.work = args.work or harness.WORK / f"control-{name}"
    args.out = args.out or OUT / f"finetune_control_{name}.md"
    return args


def fine_tune(model, corpus, cfg, ctx: int, steps: int, every: int, ckpt: Path, record: dict):
    """The control: `steps` AdamW steps on CE alone over the run's own batches (the trainer's own control under
    `--control finetune`, cfg.control_average its decay); resumes from ckpt. What the differences compare with (the
    running average of its weights, else its last state) and its curve."""
    from workbench import checkpoint
    from workbench.attention.control import FineTunedControl
    from workbench.attention.train import training_batches  # the run's own stream, in the same order

    control = FineTunedControl(model, cfg)
    state = checkpoint.read_matching(ckpt, record) if ckpt.is_file() else {"step": 0, "curve": [], "cpu_s": 0.0}
    if state["step"]:
        control.load_state_dict(state)
        print(f"resumed at step {state['step']}", flush=True)
    step, curve, cpu0 = state["step"], state["curve"], time.process_time() - state["cpu_s"]
    batches = training_batches(corpus, ctx, cfg, step, 0, 1)
    while step < steps:
        curve.append(control.step(next(batches)))
        step += 1
        if step % every == 0 or step == steps:
            state = {"step": step, "curve": curve, "cpu_s": time.process_time() - cpu0, "record": record}
            checkpoint.write(ckpt, {**state, **control.state_dict()})
            print(f"step {step}/{steps}: CE {sum(curve[-every:]) / len(curve[-every:]):.4f}", flush=True)
    return control.reference.eval(), {"step": step, "curve": curve, "cpu_s": time.process_time() - cpu0}


def differences(models: dict, splits: dict) -> dict:
    """Per split: the paired CE differences control - base, sparse - base and sparse - control."""
    from workbench.attention.report import measure
    from workbench.attention.verdict import paired_difference

    out = {}
    for split, (tokens, first) in splits.items():
        ce = {side: measure(m, tokens)["seq_ce"] for side, m in models.items()}
        out[split] = {
            "sequences": [first, first + len(tokens)],
            **{f"{a} - {b}": paired_difference(ce[a], ce[b]) for a, b in PAIRS},
        }
    return out


PAIRS = (("control", "base"), ("sparse", "base"), ("sparse", "control"))
COMMAND = "python bench/attention/finetune_control.py --sparse DIR"  # as the card's made-by block names it


def render(args, report: dict, trained: dict, diffs: dict, record: dict) -> str:
    from workbench.attention.card import averaged
    from workbench.attention.report import interval

    cfg = record["config"]
    lines = [
        f"# Fine-tuned-base control: {Path(args.sparse).name}",
        "",
        *harness.machine_lines(harness.machine_info(), {}, args.threads_line, "CE differences, not times"),
        f"- Command: `python bench/attention/finetune_control.py {' '.join(sys.argv[1:])}`",
        f"- Sparse model {report['model_id']} (state: step {report['selected_step']}), base {report['base_model']} "
        f"(`{report['base_spec']}`), corpus {report['corpus']}",
        f"- Control: the base fine-tuned {trained['step']} steps on the run's own training batches (batch "
        f"{cfg['batch_size']}, ctx {record['ctx_len']}), AdamW lr {cfg['lr']}, weight decay {cfg['weight_decay']}, "
        f"warm-up {cfg['warmup_steps']} steps then constant, gradient clip {cfg['grad_clip']}, CE alone, no gates"
        f"{averaged(cfg['control_average'])}; "
        f"{trained['cpu_s'] / 3600:.2f} CPU hours; mean training CE over its last 50 steps "
        f"{sum(trained['curve'][-50:]) / max(1, len(trained['curve'][-50:])):.4f}",
        "- Differences: paired per-sequence mean CE, second model subtracted, with the 95% interval "
        "(`verdict.paired_difference`); negative: the first model is better",
        "",
        "| split | held-out sequences | control - base | sparse - base | sparse - control |",
        "|---|---|---|---|---|",
    ]
    for split, d in diffs.items():
        cells = [interval(d[k]) for k in map(" - ".join, PAIRS)]
        lines.append(
            f"| {split} | {d['sequences'][0]}-{d['sequences'][1] - 1} (n = {d[PAIRS[0][0] + ' - base']['n']}) | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    args = parse_args()
    args.threads_line = harness.set_threads(args.threads)
    from workbench.attention.config import SparsifyConfig
    from workbench.attention.report import read_report, stack
    from workbench.attention.verdict import untouched_sequences, verdict_sequences
    from workbench.corpus import load_corpus
    from workbench.models import load

    report = read_report(args.sparse)
    # the run's settings, with the control a fair run (--control finetune) would have kept beside it
    cfg = SparsifyConfig.from_dict(report["config"])
    cfg = dataclasses.replace(cfg, control="finetune", control_average=args.control_average)
    base, tok = load(report["base_spec"], device="cpu")
    sparse = load(args.sparse, device="cpu")[0].eval()
    corpus = load_corpus(report["corpus"], tok, seed=cfg.seed)
    ctx = report["heldout"]["ctx_len"]
    steps = args.steps if args.steps is not None else report["selected_step"]
    record = {"sparse_model": report["model_id"], "config": cfg.to_dict(), "ctx_len": ctx, "steps": steps}
    args.work.mkdir(parents=True, exist_ok=True)
    control, trained = fine_tune(
        base, corpus, cfg, ctx, steps, args.checkpoint_every, args.work / "checkpoint.pt", record
    )
    verdict, v0 = verdict_sequences(corpus, cfg.eval_sequences, cfg.verdict_sequences, ctx, cfg.verdict_start)
    untouched, u0 = untouched_sequences(corpus, cfg, ctx)
    n = args.sequences
    splits = {"verdict": (stack(verdict[:n])[0], v0), "untouched": (stack(untouched[:n])[0], u0)}
    diffs = differences({"base": base.eval(), "control": control, "sparse": sparse}, splits)
    harness.write_text(args.out, render(args, report, trained, diffs, record))
    print(args.out.read_text())
    if args.write:
        write_control(args, report, trained, diffs, control)


def write_control(args, report: dict, trained: dict, diffs: dict, control) -> None:
    """The control beside the sparse model (control/), the differences into its report (`card.AFTER_THE_FACT`) and,
    for an embedded model, its card. The report is written last, so it never names a control that is not there."""
    from workbench.attention.card import AFTER_THE_FACT, CONTROL_DIR, rewrite
    from workbench.attention.report import write_report
    from workbench.models import model_id, save

    save(control, Path(args.sparse) / CONTROL_DIR)
    report[AFTER_THE_FACT] = {
        "steps": trained["step"],
        "cpu_s": trained["cpu_s"],
        "splits": diffs,
        "model": model_id(control),
        "folder": CONTROL_DIR,
        "control_average": args.control_average,
    }
    write_report(report, args.sparse)
    if (Path(args.sparse) / "README.md").is_file():
        average = f" --control-average {args.control_average:g}" if args.control_average else ""
        command = f"{COMMAND} --steps {trained['step']}{average} --write"
        # an earlier control's figures are overwritten, so its command leaves the card
        rewrite(args.sparse, command, "for the CE against a control fine-tuned after the run", replaces=COMMAND)


if __name__ == "__main__":
    main()
