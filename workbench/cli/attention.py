"""`workbench attention train|add|report|judge|compare`: sparse-attention post-training under a loss constraint.

workbench attention train --model tiny [--workspace W] [--name N | --out DIR] [--tolerance 0.01] [--resume]
workbench attention add small-sparse [--workspace W]   # an embedded sparse model into the workspace, for the app
workbench attention report W/models/tiny-sparse
workbench attention judge W/models/tiny-sparse [--accuracy-drop 0.02] [--untouched-sequences 512] [--write]
workbench attention compare --base tiny --sparse sparse-tiny --task ioi --n 20 [--split heldout|train]
    [--out compare.json]
workbench attention compare --base tiny --task ioi        # no --sparse: the base model's circuit sizes alone
workbench attention compare --sparse sparse-tiny --transcoders BASE_SET SPARSE_SET --task ioi [--share 0.8]
    [--split heldout|train]
workbench attention compare --sparse RUN --control [DIR] --task ioi [--transcoders BASE_SET CONTROL_SET SPARSE_SET]
    # base / control / sparse: base - sparse split into training (base - control) and gates (control - sparse)

`attention sparsify` is the old name of `attention train` (it still works, with a note): "sparsify" also
names EleutherAI's library, which the benchmark tables compare against.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from workbench.attention.config import GateConfig, JudgeConfig, SparsifyConfig
from workbench.circuits.feature.graph_config import HeadFlowConfig
from workbench.cli.options import (
    CORPUS,
    EMBEDDED_HELP,
    EMBEDDED_SPARSE,
    add_device_flag,
    add_text_field_flag,
    chosen_device,
    quiet_flag,
    workspace_flag,
)
from workbench.configflags import add_config_flags, config_values, count, set_fields
from workbench.errors import BadValueError
from workbench.guard import FILE, INPUT, artifact, declare
from workbench.workspace import Workspace

TRAIN, GATE, HEADS, JUDGE = "attention.", "gate.", "heads.", "judge."  # namespace prefixes of the config flags
OLD_NAME = "sparsify"
SAVED_CONTROL = "SPARSE/control"  # `compare --control` alone: the control the sparse run saved


def add_parser(sub) -> None:
    p = sub.add_parser("attention", help="sparse-attention post-training under a loss constraint")
    attention = p.add_subparsers(dest="attention_command", required=True, metavar="ACTION")
    _add_train(attention)
    _add_add(attention)
    r = attention.add_parser("report", help="print a sparse model's attention_report.json as tables")
    declare(r.add_argument("model", help="a folder written by `workbench attention train`"), INPUT)
    r.add_argument("--json", action="store_true", help="print the JSON instead (without the example patterns)")
    r.set_defaults(func=_report)
    _add_judge(attention)
    c = attention.add_parser("compare", help="query circuits of the base and the sparse model on the same queries")
    declare(c.add_argument("--base", default="tiny", help="base model spec (default: %(default)s)"), INPUT)
    sparse = c.add_argument("--sparse", help="the sparse model folder (without it: the base model's circuits alone)")
    declare(sparse, INPUT)
    c.add_argument("--task", required=True, help="synthetic task family: ioi, induction, greater_than, addition, facts")
    c.add_argument("--n", type=count(1), default=20, help="queries (default: %(default)s)")
    c.add_argument("--targets", default="0.8,0.9", help="NDF targets, comma separated (default: %(default)s)")
    c.add_argument("--samples", type=count(0), default=3, help="paraphrases and resampled counterfactuals per query")
    c.add_argument("--seed", type=count(0), default=0, help="query seed (default: %(default)s)")
    declare(c.add_argument("--out", help="per-query JSON for the app"), FILE)
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    control = c.add_argument(
        "--control",
        nargs="?",
        const=SAVED_CONTROL,
        metavar="DIR",
        help="the base fine-tuned like the sparse model without gates, measured beside both so base - sparse splits "
        f"into training and gates; alone: {SAVED_CONTROL}, the one `attention train --control finetune` saved",
    )
    declare(control, INPUT)
    transcoders = c.add_argument(
        "--transcoders",
        nargs="+",
        metavar="SET",
        help="instead: the heads carrying the attention-mediated attribution of feature graphs, one set per model: "
        "BASE_SET SPARSE_SET, or with --control BASE_SET CONTROL_SET SPARSE_SET",
    )
    declare(transcoders, INPUT)
    add_config_flags(c, HeadFlowConfig, HEADS)
    add_device_flag(c)
    c.set_defaults(func=_compare)


def _add_add(attention) -> None:
    a = attention.add_parser(
        "add",
        parents=[workspace_flag()],
        help="copy an embedded sparse-attention model, its card and the circuit claims measured on it into the "
        "workspace (the app's Attention and Compare pages list the workspace's sparse models)",
    )
    a.add_argument("name", choices=EMBEDDED_SPARSE, help="the embedded sparse-attention model")
    a.set_defaults(func=_add)


def _add(args) -> None:
    from workbench.attention.card import COMPARE
    from workbench.steps.attention import embedded_sparse_model

    report, folder = embedded_sparse_model(Workspace(args.workspace), args.name)
    compared = sorted(p.stem for p in (folder / COMPARE).glob("*.json"))
    print(
        f"{folder}: sparse attention on {report['base_model']}, {report['mean_open_keys_per_query']:.2f} open keys "
        f"per query per head (T = {report['ctx_len']}), constraint {'met' if report['constraint_met'] else 'NOT met'} "
        f"on the fresh split; circuit claims shipped for: {', '.join(compared) or 'no task family'}"
    )


def _add_judge(attention) -> None:
    j = attention.add_parser(
        "judge",
        help="a sparse model against the whole goal: CE verdict, accuracy guard per family, CE on an untouched split",
    )
    declare(j.add_argument("model", help="a folder written by `workbench attention train`"), INPUT)
    declare(j.add_argument("--base", help="base model spec (default: the one the report names)"), INPUT)
    j.add_argument("--queries", type=count(1), help="held-out queries per family (default: the report's)")
    add_config_flags(j, JudgeConfig, JUDGE)
    j.add_argument(
        "--write",
        action="store_true",
        help="record the untouched split and the accuracy guard in MODEL's attention_report.json and card",
    )
    declare(j.add_argument("--out", help="the judgement as JSON"), FILE)
    j.set_defaults(func=_judge)


def _add_train(attention) -> None:
    t = attention.add_parser(
        "train",
        aliases=[OLD_NAME],
        parents=[workspace_flag(), quiet_flag()],
        help=f"train attention gates (and weights) keeping held-out CE within a tolerance ({OLD_NAME}: old name)",
    )
    model = t.add_argument(
        "--model", default="tiny", help=f"base model: {EMBEDDED_HELP}, a saved model folder, or a TransformerLens name"
    )
    declare(model, INPUT)
    t.add_argument("--name", help="model folder in <workspace>/models (default: MODEL-sparse)")
    declare(t.add_argument("--out", help="model folder instead of <workspace>/models/NAME"), artifact("models"))
    corpus = t.add_argument(
        "--corpus", default="synthetic", help="'synthetic', 'synthetic:seed=N', files, or hf:<dataset>"
    )
    declare(corpus, CORPUS)
    add_text_field_flag(t)
    add_config_flags(t, SparsifyConfig, TRAIN)
    add_config_flags(t, GateConfig, GATE)
    add_config_flags(t, JudgeConfig, JUDGE)
    t.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="FIELD=JSON",
        help="GateConfig fields without a flag, e.g. hard_concrete_limits=[-0.1,1.1]",
    )
    t.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    adopt = t.add_argument(
        "--adopt",
        help="save the state of this kept copy of the run's checkpoint.pt (an evaluated step) instead of the "
        "selection rule's: a state chosen after the run against the whole goal (bench/attention/sparse_choice.py)",
    )
    declare(adopt, INPUT)
    t.set_defaults(func=_train)


def _train(args) -> None:
    from workbench.attention.report import format_report
    from workbench.attention.train import ConstraintNotMet
    from workbench.checkpoint import dist_info
    from workbench.steps.attention import train_attention

    if args.attention_command == OLD_NAME:
        print("workbench attention sparsify is deprecated: use `workbench attention train`", file=sys.stderr)
    gate = GateConfig(
        **config_values(args, GateConfig, GATE), **set_fields(GateConfig, args.set, others=(SparsifyConfig,))
    )
    judge = JudgeConfig(**config_values(args, JudgeConfig, JUDGE))
    cfg = SparsifyConfig(gates=gate, judge=judge, progress=not args.quiet, **config_values(args, SparsifyConfig, TRAIN))
    report, out = train_attention(
        Workspace(args.workspace),
        args.model,
        cfg,
        corpus_spec=args.corpus,
        text_field=args.text_field,
        out=args.out,
        name=args.name,
        resume=args.resume,
        adopt=args.adopt,
    )
    if dist_info()[0] != 0:  # under torchrun rank 0 prints, records and exits non-zero on an unmet constraint
        return
    print(format_report(report))
    if not report["constraint_met"]:
        v = report["verdict"]
        raise ConstraintNotMet(
            f"the constraint is not met on the fresh verdict split ({v['why']}; CE difference "
            f"{v['difference']:+.4f}, n = {v['n']}); the model is saved in {out} marked constraint_met=false; "
            "raise --steps, lr or multiplier_lr, or the tolerance"
        )


def _report(args) -> None:
    from workbench.attention.report import format_report, read_report

    r = read_report(args.model)
    if args.json:
        print(json.dumps({k: v for k, v in r.items() if k != "examples"}, indent=1))
    else:
        print(format_report(r))


def _judge(args) -> None:
    from workbench.atomic import atomic_write_text
    from workbench.attention.card import rewrite
    from workbench.attention.judge import format_judgement, judge_folder, record

    j = judge_folder(args.model, JudgeConfig(**config_values(args, JudgeConfig, JUDGE)), args.base, args.queries)
    print(format_judgement(j))
    if args.out:
        atomic_write_text(args.out, json.dumps(j, indent=1))
    if args.write:
        record(args.model, j)
        if (Path(args.model) / "README.md").is_file():  # an embedded model's card
            rewrite(args.model)


def _compare(args) -> None:
    from workbench.atomic import atomic_write_text
    from workbench.attention.compare import compare, format_compare
    from workbench.models import load

    try:
        targets = tuple(float(t) for t in args.targets.split(",") if t.strip())
    except ValueError:
        raise BadValueError(
            f"--targets {args.targets!r} must be comma-separated numbers in (0, 1], e.g. 0.8,0.9"
        ) from None
    _check_compare_models(args)
    split = config_values(args, HeadFlowConfig, HEADS)["split"]
    device = chosen_device(args)
    base, _ = load(args.base, device=device)
    sparse = load(args.sparse, device=device)[0] if args.sparse else None
    control = _compare_control(args, device)
    if args.transcoders:
        return _compare_heads(args, base, sparse, control)
    res = compare(
        base,
        sparse,
        args.task,
        args.n,
        targets,
        seed=args.seed,
        n_samples=args.samples,
        progress=not args.quiet,
        split=split,
        control=control,
    )
    print(format_compare(res))
    if args.out:
        atomic_write_text(args.out, json.dumps(res, indent=1))


def _check_compare_models(args) -> None:
    """The flags that need --sparse, and one transcoder set per model measured."""
    if args.transcoders and not args.sparse:
        raise BadValueError("--transcoders compares two models: pass --sparse too")
    if args.control is not None and not args.sparse:
        raise BadValueError("--control splits base - sparse into training and gates: pass --sparse too")
    if args.transcoders:
        wanted = "BASE_SET CONTROL_SET SPARSE_SET" if args.control is not None else "BASE_SET SPARSE_SET"
        if len(args.transcoders) != len(wanted.split()):
            raise BadValueError(
                f"--transcoders {' '.join(args.transcoders)}: pass {len(wanted.split())} sets, {wanted}, one per "
                "model measured"
            )


def _compare_control(args, device: str):
    """The control model --control names (alone: the one the sparse run saved), or None without the flag."""
    from workbench.attention.card import CONTROL_DIR
    from workbench.attention.compare import saved_control
    from workbench.models import load

    if args.control is None:
        return None
    if args.control != SAVED_CONTROL:
        return load(args.control, device=device)[0]
    control = saved_control(args.sparse, device=device)
    if control is None:
        raise BadValueError(
            f"--control: {args.sparse} saved no control (no {CONTROL_DIR}/config.json in it; `attention train "
            "--control finetune` saves one); pass the control model's folder: --control DIR"
        )
    return control


def _compare_heads(args, base, sparse, control) -> None:
    from workbench.atomic import atomic_write_text
    from workbench.attention.head_flow import compare_heads, format_head_compare

    cfg = HeadFlowConfig(**config_values(args, HeadFlowConfig, HEADS))
    sets = args.transcoders
    with_control = {"control": control, "control_set": sets[1]} if control is not None else {}
    res = compare_heads(base, sparse, sets[0], sets[-1], args.task, args.n, seed=args.seed, cfg=cfg, **with_control)
    print(format_head_compare(res))
    if args.out:
        atomic_write_text(args.out, json.dumps(res, indent=1))
