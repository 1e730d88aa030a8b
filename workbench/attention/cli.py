"""`workbench attention sparsify|report|compare` (argparse wiring; torch is imported inside the commands).

workbench attention sparsify --model tiny [--workspace W] [--name N | --out DIR] [--tolerance 0.01] [--resume]
workbench attention report W/models/tiny-sparse
workbench attention compare --base tiny --sparse sparse-tiny --task ioi --n 20 [--out compare.json]
"""

from __future__ import annotations

import json

SPARSIFY, GATE = "sparsify.", "gate."  # namespace prefixes of the config flags


def add_commands(sub, parents=()) -> None:
    """The `attention` command group; parents carry the shared options (--workspace)."""
    p = sub.add_parser("attention", help="sparse-attention post-training under a loss constraint")
    a = p.add_subparsers(dest="attention_command", required=True, metavar="ACTION")

    s = a.add_parser(
        "sparsify",
        parents=list(parents),
        help="train attention gates (and weights) keeping held-out CE within a tolerance",
    )
    s.add_argument("--model", default="tiny", help="base model: tiny, a saved model folder, or a TransformerLens name")
    s.add_argument("--name", help="model folder in <workspace>/models (default: MODEL-sparse)")
    s.add_argument("--out", help="model folder instead of <workspace>/models/NAME")
    s.add_argument("--corpus", default="synthetic", help="'synthetic', 'synthetic:seed=N', files, or hf:<dataset>")
    from workbench.attention.config import GateConfig, SparsifyConfig
    from workbench.configflags import add_config_flags

    add_config_flags(s, SparsifyConfig, SPARSIFY)
    add_config_flags(s, GateConfig, GATE)
    s.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="FIELD=JSON",
        help="GateConfig fields without a flag, e.g. hard_concrete_limits=[-0.1,1.1]",
    )
    s.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=run_sparsify)

    r = a.add_parser("report", help="print a sparse model's attention_report.json as tables")
    r.add_argument("model", help="a folder written by `workbench attention sparsify`")
    r.add_argument("--json", action="store_true", help="print the JSON instead (without the example patterns)")
    r.set_defaults(func=run_report)

    c = a.add_parser("compare", help="query circuits of the base and the sparse model on the same queries")
    c.add_argument("--base", default="tiny", help="base model spec (default: %(default)s)")
    c.add_argument("--sparse", required=True, help="the sparse model folder")
    c.add_argument("--task", required=True, help="synthetic task family: ioi, induction, greater_than, addition, facts")
    c.add_argument("--n", type=int, default=20, help="queries (default: %(default)s)")
    c.add_argument("--targets", default="0.8,0.9", help="NDF targets, comma separated (default: %(default)s)")
    c.add_argument("--samples", type=int, default=3, help="paraphrases and resampled counterfactuals per query")
    c.add_argument("--seed", type=int, default=0, help="query seed (default: %(default)s)")
    c.add_argument("--out", help="per-query JSON for the app")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    c.set_defaults(func=run_compare)


def run_sparsify(args) -> int:
    from workbench.attention.config import GateConfig, SparsifyConfig
    from workbench.attention.report import format_report
    from workbench.attention.train import ConstraintNotMet
    from workbench.checkpoint import dist_info
    from workbench.configflags import config_values, set_fields
    from workbench.steps import sparsify_attention
    from workbench.workspace import Workspace

    gate = GateConfig(**config_values(args, GateConfig, GATE), **set_fields(GateConfig, args.set))
    cfg = SparsifyConfig(gates=gate, progress=not args.quiet, **config_values(args, SparsifyConfig, SPARSIFY))
    cfg.validate()  # a bad value fails here, before the model loads
    report, out = sparsify_attention(
        Workspace(args.workspace),
        args.model,
        cfg,
        corpus_spec=args.corpus,
        out=args.out,
        name=args.name,
        resume=args.resume,
    )
    if dist_info()[0] != 0:  # under torchrun rank 0 prints, records and exits non-zero on an unmet constraint
        return 0
    print(format_report(report))
    if not report["constraint_met"]:
        v = report["verdict"]
        raise ConstraintNotMet(
            f"the constraint is not met on the fresh verdict split ({v['why']}; CE difference "
            f"{v['difference']:+.4f}, n = {v['n']}); the model is saved in {out} marked constraint_met=false; "
            "raise --steps, lr or multiplier_lr, or the tolerance"
        )
    return 0


def run_report(args) -> int:
    from workbench.attention.report import format_report, read_report

    r = read_report(args.model)
    if args.json:
        print(json.dumps({k: v for k, v in r.items() if k != "examples"}, indent=1))
    else:
        print(format_report(r))
    return 0


def run_compare(args) -> int:
    from workbench.atomic import atomic_write_text
    from workbench.attention.compare import compare, format_compare
    from workbench.errors import BadValueError
    from workbench.models import load

    try:
        targets = tuple(float(t) for t in args.targets.split(",") if t.strip())
    except ValueError:
        raise BadValueError(
            f"--targets {args.targets!r} must be comma-separated numbers in (0, 1], e.g. 0.8,0.9"
        ) from None
    base, _ = load(args.base)
    sparse, _ = load(args.sparse)
    res = compare(
        base, sparse, args.task, args.n, targets, seed=args.seed, n_samples=args.samples, progress=not args.quiet
    )
    print(format_compare(res))
    if args.out:
        atomic_write_text(args.out, json.dumps(res, indent=1))
    return 0
