"""`workbench circuit find ...`: argparse wiring for the top-level CLI (add_commands) and a standalone main.

    workbench circuit find --model tiny --prompt "..." --answer "..." [--counterfactual "..."]
                           [--budget 2% | --target-ndf 0.8] --out circuit.json
    workbench circuit find --task ioi --n 20 [--budgets 1%,2%,5%] [--out summary.json]
"""

from __future__ import annotations

import argparse
import sys

from workbench.circuits.metrics import METRICS
from workbench.circuits.patching import ABLATIONS
from workbench.circuits.attribute import METHODS


def parse_budget(text: str) -> float:
    """'2%' or '0.02' -> 0.02; anything outside (0, 100%] is an error naming the value."""
    s = str(text).strip()
    try:
        value = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"budget {text!r} is not a number; use e.g. 2% or 0.02") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"budget {text!r} is outside (0%, 100%]: a circuit needs at least one "
                                         "edge and cannot have more edges than the model")
    return value


def add_commands(subparsers) -> None:
    p = subparsers.add_parser("circuit", help="query circuits: find, evaluate and export")
    sub = p.add_subparsers(dest="circuit_command", required=True)
    f = sub.add_parser("find", help="find the circuit for one query, or evaluate a task family (--task)")
    f.add_argument("--model", default="tiny", help="tiny, a saved model folder, or a TransformerLens name (default: %(default)s)")
    f.add_argument("--prompt", help="the query text (BOS is prepended)")
    f.add_argument("--answer", help="the answer token the circuit should explain (a single token)")
    f.add_argument("--counterfactual", help="a contrasting prompt, any length (aligned on the answer position)")
    f.add_argument("--wrong", help="the contrasting answer for logit_diff (default: the counterfactual's top token "
                   "other than the answer; without --counterfactual, the prompt's runner-up)")
    f.add_argument("--paraphrase", action="append", default=[], metavar="PROMPT[|||COUNTERFACTUAL]",
                   help="extra prompts (with optional counterfactual after |||) for best-of-N candidates")
    g = f.add_mutually_exclusive_group()
    g.add_argument("--budget", type=parse_budget, help="edge budget, e.g. 2%% or 0.02")
    g.add_argument("--target-ndf", type=float, help="find the sparsest circuit with at least this NDF")
    f.add_argument("--strategy", choices=("search", "topk"), default="search",
                   help="best-of-N search + exact refinement, or plain top-k of EAP-IG scores (default: %(default)s)")
    f.add_argument("--ablation", choices=ABLATIONS, default="counterfactual",
                   help="what replaces the edges outside the circuit (default: %(default)s)")
    f.add_argument("--cache", help="activation cache whose token sequences give the means for --ablation mean")
    f.add_argument("--metric", choices=METRICS, default="logit_diff", help="faithfulness metric L (default: %(default)s)")
    f.add_argument("--method", choices=METHODS, default="eap-ig", help="edge attribution (default: %(default)s)")
    f.add_argument("--steps", type=int, default=5, help="EAP-IG interpolation steps m (default: %(default)s)")
    f.add_argument("--samples", type=int, help="with --task: paraphrases and resampled counterfactuals generated per "
                   "query (default: 3); with --prompt use --paraphrase")
    f.add_argument("--seed", type=int, default=0, help="seed for resampling (default: %(default)s)")
    f.add_argument("--task", help="evaluate n generated queries of a synthetic task family instead of one prompt")
    f.add_argument("--n", type=int, help="queries for --task (default: 20)")
    f.add_argument("--budgets", help="budgets for --task, comma separated (default: 1%%,2%%,5%%; --budget gives one)")
    f.add_argument("--all-queries", action="store_true",
                   help="with --task, keep queries whose answer is not the model's top-1 (skipped by default)")
    f.add_argument("--out", help="circuit JSON (workbench schema) or, with --task, the summary JSON")
    f.add_argument("--mib", help="also write the EAP-IG/MIB circuit JSON here")
    f.add_argument("--neuronpedia", help="also write the Neuronpedia graph JSON here")
    f.set_defaults(func=run_find)
    e = sub.add_parser("export", help="convert a workbench circuit JSON to the MIB or Neuronpedia format")
    e.add_argument("circuit", help="workbench circuit JSON")
    e.add_argument("--format", required=True, choices=("mib", "neuronpedia"), help="target format")
    e.add_argument("--out", required=True, help="output file")
    e.set_defaults(func=run_export)


def _check_find_args(args) -> None:
    """Every flag combination and output path is checked before the model is loaded."""
    from workbench.atomic import check_output_file

    given = lambda *names: [f"--{n.replace('_', '-')}" for n in names if getattr(args, n) not in (None, [], False)]  # noqa: E731
    if args.task:
        bad = given("prompt", "answer", "counterfactual", "wrong", "paraphrase", "target_ndf", "mib", "neuronpedia")
        if bad:
            raise ValueError(f"{', '.join(bad)} {'does' if len(bad) == 1 else 'do'} not apply to --task (it evaluates {args.n or 20} generated queries at "
                             "--budgets and writes a summary); find one circuit with --prompt to use them")
        if args.budget is not None and args.budgets is not None:
            raise ValueError("give --budget or --budgets with --task, not both")
    else:
        bad = given("n", "budgets", "all_queries")
        if bad:
            raise ValueError(f"{', '.join(bad)} {'applies' if len(bad) == 1 else 'apply'} only to --task")
        if args.samples is not None:
            raise ValueError("--samples generates paraphrases and counterfactuals of --task queries; for --prompt, "
                             "pass each extra prompt with --paraphrase 'PROMPT|||COUNTERFACTUAL'")
        if not args.prompt or not args.answer:
            raise ValueError("circuit find needs --prompt and --answer (or --task NAME for a batch of generated queries)")
    for flag in ("out", "mib", "neuronpedia"):
        if getattr(args, flag):
            check_output_file(getattr(args, flag), f"--{flag}")
    if args.ablation == "mean" and not args.cache:
        raise ValueError("--ablation mean needs --cache DIR (the means come from its token sequences)")
    if args.target_ndf is not None and not 0 < args.target_ndf <= 1:
        raise ValueError(f"--target-ndf {args.target_ndf} is outside (0, 1]")


def run_find(args) -> int:
    from workbench.circuits.api import evaluate_task, find_circuit, format_summary_table
    from workbench.circuits.export import write_json
    from workbench.models import load

    _check_find_args(args)
    budgets = None
    if args.task:
        from workbench.corpus import synthetic

        if args.task not in synthetic.QUERY_TASKS:
            raise ValueError(f"unknown task {args.task!r}; valid tasks: {', '.join(synthetic.QUERY_TASKS)}")
        budgets = [args.budget] if args.budget is not None else \
            [parse_budget(b) for b in (args.budgets or "1%,2%,5%").split(",") if b.strip()]
    model, _ = load(args.model)
    means = None
    if args.ablation == "mean":
        from workbench.cache import ActivationCache
        from workbench.circuits.hooks import writer_means

        means = writer_means(model, ActivationCache.open(args.cache))
    if args.task:
        summary = evaluate_task(model, args.task, args.n or 20, budgets, seed=args.seed,
                                n_samples=3 if args.samples is None else args.samples, method=args.method,
                                steps=args.steps, ablation=args.ablation, metric=args.metric, means=means,
                                require_prediction=not args.all_queries)
        print(format_summary_table(summary))
        for s in summary["skipped"]:
            print(f"skipped: {s['prompt']!r}: {s['reason']}", file=sys.stderr)
        if args.out:
            write_json(summary, args.out)
        return 0
    paraphrases = [tuple(p.split("|||", 1)) if "|||" in p else p for p in args.paraphrase]
    circuit = find_circuit(model, args.prompt, args.answer, args.counterfactual, wrong=args.wrong, budget=args.budget,
                           target_ndf=args.target_ndf, strategy=args.strategy, ablation=args.ablation,
                           metric=args.metric, method=args.method, steps=args.steps, paraphrases=paraphrases,
                           seed=args.seed, means=means)
    print(circuit.summary())
    if args.out:
        circuit.save(args.out)
    if args.mib:
        circuit.to_mib(args.mib)
    if args.neuronpedia:
        circuit.to_neuronpedia(args.neuronpedia)
    return 0


def run_export(args) -> int:
    from workbench.atomic import check_output_file
    from workbench.circuits.export import load_json

    check_output_file(args.out, "--out")
    circuit = load_json(args.circuit)
    (circuit.to_mib if args.format == "mib" else circuit.to_neuronpedia)(args.out)
    print(f"{args.circuit} -> {args.out} ({args.format})")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="workbench")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ValueError as e:  # bad input: one clear line, no traceback
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
