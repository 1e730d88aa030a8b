"""`workbench attention sparsify|report|compare` (argparse wiring; torch is imported inside the commands).

    workbench attention sparsify --model tiny --out sparse-tiny [--tolerance 0.01] [--steps 1000] [--resume]
    workbench attention report sparse-tiny
    workbench attention compare --base tiny --sparse sparse-tiny --task ioi --n 20 [--out compare.json]
"""

from __future__ import annotations

import json
from pathlib import Path


def add_commands(sub) -> None:
    p = sub.add_parser("attention", help="sparse-attention post-training under a loss constraint")
    a = p.add_subparsers(dest="attention_command", required=True, metavar="ACTION")

    s = a.add_parser("sparsify", help="train attention gates (and weights) keeping held-out CE within a tolerance")
    s.add_argument("--model", default="tiny", help="base model: tiny, a saved model folder, or a TransformerLens name")
    s.add_argument("--out", help="folder for the gated model (default with --workspace: WS/models/<model>-sparse)")
    s.add_argument("--workspace", help="record the model in this workspace (artifact kind 'models')")
    s.add_argument("--corpus", default="synthetic", help="'synthetic', 'synthetic:seed=N', files, or hf:<dataset>")
    s.add_argument("--tolerance", type=float, default=0.01, help="allowed held-out CE increase in nats (default: %(default)s)")
    s.add_argument("--steps", type=int, default=1000, help="optimizer steps (default: %(default)s)")
    s.add_argument("--batch-size", type=int, default=16, help="sequences per step over all processes (default: %(default)s)")
    s.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE",
                   help="any other SparsifyConfig field, e.g. lr=3e-5 ce_ema=0.9 tau_end=0.2")
    s.add_argument("--gate", nargs="*", default=[], metavar="FIELD=VALUE",
                   help="GateConfig fields, e.g. estimator=hard_concrete empty_row=first gate_input=score")
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


def _fields(cls, pairs: list[str]) -> dict:
    from workbench.cli import _set_fields

    return _set_fields(cls, pairs)


def run_sparsify(args) -> int:
    from workbench.attention.config import GateConfig, SparsifyConfig
    from workbench.attention.report import format_report
    from workbench.attention.train import ConstraintNotMet, sparsify
    from workbench.checkpoint import dist_info

    gate = GateConfig(**_fields(GateConfig, args.gate))
    cfg = SparsifyConfig(**{"gates": gate, "tolerance": args.tolerance, "steps": args.steps,
                            "batch_size": args.batch_size, "progress": not args.quiet,
                            **_fields(SparsifyConfig, args.set)})
    cfg.validate()  # a bad value fails here, before the model loads
    ws = None
    out = args.out
    if args.workspace:
        from workbench.workspace import Workspace

        ws = Workspace(args.workspace)
        name = Path(out).name if out else f"{Path(args.model).name}-sparse"
        out = str(ws.path("models", name))
    if not out:
        raise ValueError("sparsify needs --out FOLDER (or --workspace WS)")
    report = sparsify(args.model, out, cfg, args.corpus, resume=args.resume)
    if dist_info()[0] != 0:  # under torchrun rank 0 prints, records and exits non-zero on an unmet constraint
        return 0
    print(format_report(report))
    if ws is not None:
        ws.record("models", Path(out).name, made_by="workbench attention sparsify", config=cfg.to_dict(),
                  inputs={"model": report["base_model"], "corpus": report["corpus"]},
                  summary={k: report[k] for k in ("constraint_met", "ce_target", "open_fraction",
                                                  "mean_open_keys_per_query")} | {"ce": report["ce"]})
    if not report["constraint_met"]:
        raise ConstraintNotMet(
            f"no evaluated state met held-out CE <= {report['ce_target']:.4f} (base {report['ce_base']:.4f} + "
            f"tolerance {report['tolerance']}); saved the lowest-CE state (CE {report['ce']['sparse']:.4f}) in {out} "
            "marked constraint_met=false; raise --steps, lr or multiplier_lr, or the tolerance")
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
    from workbench.attention.compare import compare, format_compare
    from workbench.atomic import atomic_write_text
    from workbench.models import load

    try:
        targets = tuple(float(t) for t in args.targets.split(",") if t.strip())
    except ValueError:
        raise ValueError(f"--targets {args.targets!r} must be comma-separated numbers in (0, 1], e.g. 0.8,0.9") from None
    base, _ = load(args.base)
    sparse, _ = load(args.sparse)
    res = compare(base, sparse, args.task, args.n, targets, seed=args.seed, n_samples=args.samples,
                  progress=not args.quiet)
    print(format_compare(res))
    if args.out:
        atomic_write_text(args.out, json.dumps(res, indent=1))
    return 0
