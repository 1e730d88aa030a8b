"""`workbench circuit find|graph|export|import|report`: query circuits found, converted, imported and reported.

workbench circuit find --model tiny --prompt "..." --answer "..." [--counterfactual "..."]
                       [--budget 2% | --target-ndf 0.8] --out circuit.json
workbench circuit find --task ioi --n 20 [--budgets 1%,2%,5%] [--out summary.json]
workbench circuit find --transcoders SET --prompt "..." --answer "..." --counterfactual "..." [--target-ndf 0.8]
workbench circuit graph --transcoders SET --prompt "..." [--answer "..." [--wrong "..."]] [--out graph.json]
workbench circuit export circuit.json|mib.json --format mib|neuronpedia|workbench --out FILE
workbench circuit import circuit.json|mib.json|graph.json [--model tiny] [--name NAME]
workbench circuit report --n 20 --out circuit_results.md
workbench circuit check GRAPH.json|FOLDER [--transcoders SET|CLT] [--fraction 0.5] [--under 2] [--absent 0.05] [--top-edges 20] [--top-qk 20]
workbench circuit group GRAPH.json|FOLDER [--transcoders SET|CLT] [--threshold 0.5] [--scope position] [--accept confirmed]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from workbench.circuits.config import QueryConfig, SearchConfig, TaskConfig
from workbench.circuits.feature.graph_config import GraphConfig, GroupConfig
from workbench.cli.options import EMBEDDED_HELP, add_device_flag, add_model_flag, chosen_device, workspace_flag
from workbench.configflags import add_config_flags, config_values, count, given
from workbench.errors import BadValueError
from workbench.guard import FILE, INPUT, declare, in_place

PREFIX = "search."  # namespace prefix of the SearchConfig flags
GRAPH = "graph."  # namespace prefix of the GraphConfig flags
GROUP = "group."  # namespace prefix of the GroupConfig flags
PROMPT_ONLY = ("prompt", "answer", "counterfactual", "wrong", "paraphrase", "target_ndf", "mib", "neuronpedia", "name")
TASK_ONLY = ("n", "budgets", "all_queries")
MODEL_HELP = f"{EMBEDDED_HELP}, a saved model folder, or a TransformerLens name (default: %(default)s)"


def parse_budget(text: str) -> float:
    """'2%' or '0.02' -> 0.02; anything outside (0, 100%] is an error naming the value."""
    s = str(text).strip()
    try:
        value = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"budget {text!r} is not a number; use e.g. 2% or 0.02") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(
            f"budget {text!r} is outside (0%, 100%]: a circuit needs at least one "
            "edge and cannot have more edges than the model"
        )
    return value


def parse_budgets(text: str) -> list[float]:
    """'1%,2%,5%' -> [0.01, 0.02, 0.05] (each checked by parse_budget)."""
    budgets = [parse_budget(b) for b in str(text).split(",") if b.strip()]
    if not budgets:
        raise argparse.ArgumentTypeError(f"no budget in {text!r}; use e.g. 1%,2%,5%")
    return budgets


def check_tasks(tasks: list[str]) -> list[str]:
    """Task family names, each one the synthetic corpus generates (checked when the command runs, so
    building the parser does not import the corpus)."""
    from workbench.corpus.tasks import QUERY_TASKS

    bad = [t for t in tasks if t not in QUERY_TASKS]
    if bad or not tasks:
        raise BadValueError(f"unknown task families {bad or tasks}; valid: {', '.join(QUERY_TASKS)}")
    return tasks


def add_parser(sub) -> None:
    p = sub.add_parser("circuit", help="query circuits: find, evaluate, export and report")
    circuit = p.add_subparsers(dest="circuit_command", required=True)
    _add_find(circuit)
    _add_graph(circuit)
    e = circuit.add_parser(
        "export", help="convert a workbench or EAP-IG/MIB circuit JSON to the MIB, Neuronpedia or workbench format"
    )
    declare(e.add_argument("circuit", help="workbench or EAP-IG/MIB circuit JSON"), INPUT)
    e.add_argument("--format", required=True, choices=("mib", "neuronpedia", "workbench"), help="target format")
    declare(e.add_argument("--out", required=True, help="output file"), FILE)
    e.set_defaults(func=_export)
    i = circuit.add_parser(
        "import",
        parents=[workspace_flag()],
        help="record a workbench or EAP-IG/MIB circuit file, or a circuit-tracer / Neuronpedia graph JSON (as a "
        "graph), in the workspace, checked against its model",
    )
    declare(i.add_argument("circuit", help="workbench or EAP-IG/MIB circuit JSON, or circuit-tracer graph JSON"), INPUT)
    add_model_flag(i, help="the model the circuit was found on (MIB files name none) (default: %(default)s)")
    i.add_argument("--name", help="folder in <workspace>/circuits (default: the file's name)")
    i.set_defaults(func=_import)
    _add_report(circuit)
    _add_check(circuit)
    _add_group(circuit)


def _add_check(circuit) -> None:
    """`circuit check`: its own command, not a flag of graph and find, because it works on any workbench graph file
    (made before, or by another run), is re-run with other settings, and rewrites the file in place."""
    from workbench.interventions.config import CheckConfig

    c = circuit.add_parser(
        "check",
        parents=[workspace_flag("whose manifest records the graph")],
        help="check an attribution graph's nodes and top edges by interventions in the real model (stored in it)",
    )
    graph = c.add_argument(
        "graph", help="a graph JSON (circuit-tracer schema, made by the workbench) or its circuit folder"
    )
    declare(graph, in_place("circuits"))  # the check record is added to the graph in place, as features build to an SAE
    declare(c.add_argument("--model", help="default: the model the graph's manifest records"), INPUT)
    declare(
        c.add_argument(
            "--transcoders", help="the graph's transcoder set or CLT (default: the one its manifest records)"
        ),
        INPUT,
    )
    c.add_argument("--member", help="which config of each layer's set (default: the manifest's, else 0)")
    add_config_flags(c, CheckConfig, "check.")
    add_device_flag(c)
    c.set_defaults(func=_check)


def _add_group(circuit) -> None:
    """`circuit group`: supernodes proposed from a graph and checked by joint ablation, stored in it in place."""
    from workbench.interventions.config import CheckConfig

    c = circuit.add_parser(
        "group",
        parents=[workspace_flag("whose manifest records the graph")],
        help="propose supernodes of a graph's features (decoder cosine, co-activation, shared links, shared "
        "explanation), each checked by ablating it in the real model; stored in the graph JSON",
    )
    declare(
        c.add_argument("graph", help="a graph JSON made by the workbench, or its circuit folder"), in_place("circuits")
    )
    declare(c.add_argument("--model", help="default: the model the graph's manifest records"), INPUT)
    declare(c.add_argument("--transcoders", help="the graph's transcoder set or CLT (default: its manifest's)"), INPUT)
    c.add_argument("--member", help="which config of each layer's set (default: the manifest's, else 0)")
    c.add_argument(
        "--accept",
        choices=("confirmed", "all", "none"),
        default="confirmed",
        help="proposals written to qParams.supernodes (every one is kept, with its verdict, in workbench_groups): "
        "those whose joint ablation confirms the summed prediction, all, or none (default: %(default)s)",
    )
    add_config_flags(c, GroupConfig, GROUP)
    add_config_flags(c, CheckConfig, "check.", skip=("edge_target", "top_edges"))
    add_device_flag(c)
    c.set_defaults(func=_group)


def _group(args) -> None:
    from workbench.interventions.config import CheckConfig
    from workbench.models import load
    from workbench.steps.groups import group_graph
    from workbench.workspace import Workspace

    cfg = GroupConfig(**config_values(args, GroupConfig, GROUP))
    check = CheckConfig(**config_values(args, CheckConfig, "check."))
    path, spec, transcoders, member = _check_inputs(args)
    model, _ = load(spec, device=chosen_device(args))
    r = group_graph(Workspace(args.workspace), model, path, transcoders, cfg, check, member=member, accept=args.accept)
    print(
        f"signals: {', '.join(r['signals_used'])}; {r['summary']['features']} features, {r['summary']['proposed']} groups"
    )
    for x in r["groups"]:
        print(
            f"{'accepted' if x['accepted'] else 'proposed'} {x['name']}: {', '.join(x['members'])}; similarity "
            f"{x['similarity']:.2f}; predicted {x['predicted']:+.4g}, joint ablation {x['measured']:+.4g} "
            f"{x['verdict']} (members alone {x['members_measured']:+.4g})"
        )
    print(f"stored in {path} (workbench_groups; accepted ones in qParams.supernodes)")


def _check_inputs(args) -> tuple[Path, str, str, int | str]:
    """(graph file, model spec, transcoder set, member), from the flags, else the graph folder's manifest."""
    import json

    from workbench.steps.graphs import check_graph_target
    from workbench.workspace import MANIFEST, Workspace

    path = Path(args.graph)
    if path.is_dir():
        path = path / ("neuronpedia.json" if (path / "feature_circuit.json").is_file() else "graph.json")
    if not path.is_file():
        raise BadValueError(f"no graph JSON at {path}; give a graph file or the folder `circuit graph` recorded")
    ws = Workspace(args.workspace)
    check_graph_target(ws, path)  # before the model loads
    manifest = path.parent / MANIFEST
    m = json.loads(manifest.read_text()) if manifest.is_file() else {}
    inputs = m.get("inputs", {})
    transcoders = args.transcoders or (inputs.get("transcoders") and str(ws.resolve(inputs["transcoders"])))
    if not transcoders:
        raise BadValueError(f"{path} has no manifest naming its transcoder set; pass --transcoders SET")
    model = args.model or ws.model_spec(inputs.get("model_spec") or "tiny")
    member = args.member if args.member is not None else str(m.get("config", {}).get("member", 0))
    return path, model, transcoders, _member(member)


def _check(args) -> None:
    from workbench.interventions.check import report_lines
    from workbench.interventions.config import CheckConfig
    from workbench.models import load
    from workbench.steps.graphs import check_graph
    from workbench.workspace import Workspace

    cfg = CheckConfig(**config_values(args, CheckConfig, "check."))
    path, spec, transcoders, member = _check_inputs(args)
    model, _ = load(spec, device=chosen_device(args))
    r = check_graph(Workspace(args.workspace), model, path, transcoders, cfg, member=member)
    s = r["summary"]
    for what in ("nodes", "edges", "qk")[: 2 + bool(r["qk"])]:
        share = s[f"{what}_confirmed_share"]
        failed = s[f"{what}_failed"]
        print(
            f"{what}: {s[f'{what}_checked']} checked, {'n/a' if share is None else f'{share:.1%}'} of the predicted "
            f"influence confirmed; failed ({len(failed)}): {', '.join(failed[:10])}{' ...' if len(failed) > 10 else ''}"
        )
    print(f"top node by graph influence is the top by measured effect: {s['top_node_agrees']}")
    print("\n".join(report_lines(r)))
    print(f"checked {path} in {s['cpu_seconds']:.2f} CPU seconds")


def _add_find(circuit) -> None:
    f = circuit.add_parser(
        "find",
        parents=[workspace_flag()],
        help="find the circuit for one query (recorded in the workspace), or evaluate a task family",
    )
    add_model_flag(f, help=MODEL_HELP)
    f.add_argument("--prompt", help="the query text (BOS is prepended)")
    f.add_argument("--answer", help="the answer token the circuit should explain (a single token)")
    f.add_argument("--counterfactual", help="a contrasting prompt, any length (aligned on the answer position)")
    f.add_argument(
        "--wrong",
        help="the contrasting answer for logit_diff (default: the counterfactual's top token "
        "other than the answer; without --counterfactual, the prompt's runner-up)",
    )
    f.add_argument(
        "--paraphrase",
        action="append",
        default=[],
        metavar="PROMPT[|||COUNTERFACTUAL]",
        help="extra prompts (with optional counterfactual after |||) for best-of-N candidates",
    )
    g = f.add_mutually_exclusive_group()
    g.add_argument("--budget", type=parse_budget, help="edge budget, e.g. 2%% or 0.02 (default: 2%%)")
    g.add_argument("--target-ndf", type=float, help="find the sparsest circuit with at least this NDF")
    f.add_argument(
        "--strategy",
        choices=("search", "topk"),
        default="search",
        help="best-of-N search + exact refinement, or plain top-k of EAP-IG scores (default: %(default)s)",
    )
    add_config_flags(f, SearchConfig, PREFIX)
    _add_transcoder_flags(f)
    declare(
        f.add_argument("--cache", help="activation cache whose token sequences give the means for --ablation mean"),
        INPUT,
    )
    _add_task_flags(f)
    f.add_argument("--name", help="the circuit's folder in <workspace>/circuits (default: from the prompt)")
    out = f.add_argument(
        "--out", help="also write the circuit JSON (workbench schema) here; with --task, the summary JSON"
    )
    declare(out, FILE)
    declare(f.add_argument("--mib", help="also write the EAP-IG/MIB circuit JSON here"), FILE)
    declare(f.add_argument("--neuronpedia", help="also write the Neuronpedia graph JSON here"), FILE)
    add_device_flag(f)
    f.set_defaults(func=_find)


def _add_transcoder_flags(f: argparse.ArgumentParser) -> None:
    transcoders = f.add_argument(
        "--transcoders",
        help="a transcoder set folder (one per MLP layer): find a circuit of its features, error nodes and "
        "embeddings instead of heads and MLPs (--budget is then a fraction of the nodes; default --target-ndf 0.8)",
    )
    declare(transcoders, INPUT)
    f.add_argument("--member", default="0", help="which config of each layer's set: an index or a config name")
    add_config_flags(f, GraphConfig, GRAPH)


def _add_graph(circuit) -> None:
    g = circuit.add_parser(
        "graph",
        parents=[workspace_flag()],
        help="the attribution graph of a prompt through a transcoder set (recorded in the workspace)",
    )
    add_model_flag(g, help=MODEL_HELP)
    g.add_argument("--prompt", required=True, help="the prompt (BOS is prepended)")
    g.add_argument("--answer", help="the target logit (default: the top logits covering --desired-logit-prob)")
    g.add_argument("--wrong", help="a second target logit beside --answer")
    g.add_argument("--name", help="the graph's folder in <workspace>/circuits (default: from the prompt)")
    declare(g.add_argument("--out", help="also write the graph JSON (circuit-tracer / Neuronpedia schema) here"), FILE)
    _add_transcoder_flags(g)
    add_device_flag(g)
    g.set_defaults(func=_graph)


def _member(text: str) -> int | str:
    return int(text) if text.isdigit() else text


def _query(args) -> QueryConfig:
    """`circuit find`'s per-query values as one config, checked on construction (before the model loads)."""
    given = dict(budget=args.budget, target_ndf=args.target_ndf, wrong=args.wrong, n_samples=args.samples)
    member = {"member": _member(args.member)} if args.transcoders else {}
    return QueryConfig(seed=args.seed, **member, **{k: v for k, v in given.items() if v is not None})


def _task(args) -> TaskConfig:
    """`circuit find --task`'s batch: --n and --budgets (or the one --budget) where given, else TaskConfig's defaults."""
    budgets = [args.budget] if args.budget is not None else args.budgets
    given = {"n": args.n, "budgets": budgets}
    return TaskConfig(**{k: v for k, v in given.items() if v is not None})


def _percents(budgets: list[float]) -> str:
    return ",".join(f"{b:.0%}" for b in budgets).replace("%", "%%")  # argparse's help escapes %


def _graph_cfg(args) -> GraphConfig:
    return GraphConfig(**config_values(args, GraphConfig, GRAPH))


def _graph(args) -> None:
    from workbench.circuits.feature.transcoders import open_set
    from workbench.models import load
    from workbench.steps.graphs import attribution_graph
    from workbench.workspace import Workspace

    if not args.transcoders:
        raise BadValueError("circuit graph needs --transcoders SET (a transcoder set folder)")
    if args.wrong and not args.answer:
        raise BadValueError("--wrong is a second target beside --answer; give --answer too")
    cfg = _graph_cfg(args)
    tset = open_set(args.transcoders)  # a bad set is refused before the model loads; its manifest is read once
    model, _ = load(args.model, device=chosen_device(args))
    g, folder = attribution_graph(
        Workspace(args.workspace),
        model,
        tset,
        args.prompt,
        args.answer,
        args.wrong,
        cfg=cfg,
        model_spec=args.model,
        name=args.name,
        member=_member(args.member),
    )
    kept = int(g.pruned.edge_mask.sum())
    print(
        f"graph: {g.n_features} of {g.n_active} active features given rows, {kept} edges kept; replacement "
        f"{g.scores['replacement']:.3f}, completeness {g.scores['completeness']:.3f}"
    )
    print(f"recorded {folder}")
    if args.out:
        from workbench.atomic import atomic_write_text

        atomic_write_text(Path(args.out), (folder / "graph.json").read_text())


def _add_task_flags(f: argparse.ArgumentParser) -> None:
    """`circuit find --task`: a batch of generated queries instead of one prompt."""
    f.add_argument(
        "--samples",
        type=count(0),
        help="with --task: paraphrases and resampled counterfactuals generated per "
        "query (default: 3); with --prompt pass --paraphrase instead",
    )
    f.add_argument("--seed", type=count(0), default=0, help="seed for resampling (default: %(default)s)")
    f.add_argument(
        "--task",
        help="evaluate n generated queries of a synthetic task family instead of one prompt "
        "(ioi, induction, greater_than, addition, facts)",
    )
    f.add_argument("--n", type=count(1), help=f"queries for --task (default: {TaskConfig.n})")
    f.add_argument(
        "--budgets",
        type=parse_budgets,
        help=f"budgets for --task, comma separated (default: {_percents(TaskConfig().budgets)}; --budget gives one)",
    )
    f.add_argument(
        "--all-queries",
        action="store_true",
        help="with --task, keep queries whose answer is not the model's top-1 (skipped by default)",
    )


def _add_report(circuit) -> None:
    r = circuit.add_parser(
        "report",
        help="search vs top-k per task family, the induction mechanism and time per query, as one markdown report",
    )
    add_model_flag(r, help=MODEL_HELP)
    r.add_argument("--n", type=count(1), default=20, help="generated queries per task family (default: %(default)s)")
    r.add_argument(
        "--tasks",
        type=lambda t: [x.strip() for x in t.split(",") if x.strip()],
        help="task families, comma separated (default: every family of the synthetic corpus)",
    )
    r.add_argument(
        "--budgets",
        type=parse_budgets,
        default="1%,1.3%,2%,5%",
        help="edge budgets, comma separated (default: %(default)s)",
    )
    r.add_argument("--timing-queries", type=count(0), default=5, help="queries timed end to end (default: %(default)s)")
    r.add_argument(
        "--induction-tries",
        type=count(1),
        default=10,
        help="induction queries tried for one with a previous-token -> induction path (default: %(default)s)",
    )
    declare(r.add_argument("--out", default="circuit_results.md", help="markdown report (default: %(default)s)"), FILE)
    declare(r.add_argument("--json", help="also write the raw summaries and timings here"), FILE)
    r.set_defaults(func=_report)


def _given(args, *names: str) -> list[str]:
    """The flags among `names` that were set on the command line."""
    return [f"--{n.replace('_', '-')}" for n in names if getattr(args, n) not in (None, [], False)]


def _check_task_args(args) -> None:
    check_tasks([args.task])
    bad = _given(args, *[f for f in PROMPT_ONLY if not (args.transcoders and f == "target_ndf")])
    if bad:
        raise BadValueError(
            f"{', '.join(bad)} {'does' if len(bad) == 1 else 'do'} not apply to --task (it "
            f"evaluates {_task(args).n} generated queries at --budgets and writes a summary); find "
            "one circuit with --prompt to use them"
        )
    if args.budget is not None and args.budgets is not None:
        raise BadValueError("give --budget or --budgets with --task, not both")


def _check_prompt_args(args) -> None:
    bad = _given(args, *TASK_ONLY)
    if bad:
        raise BadValueError(f"{', '.join(bad)} {'applies' if len(bad) == 1 else 'apply'} only to --task")
    if args.samples is not None:
        raise BadValueError(
            "--samples generates paraphrases and counterfactuals of --task queries; for --prompt, "
            "pass each extra prompt with --paraphrase 'PROMPT|||COUNTERFACTUAL'"
        )
    if not args.prompt or not args.answer:
        raise BadValueError(
            "circuit find needs --prompt and --answer (or --task NAME for a batch of generated queries)"
        )


def _check_find_args(args, cfg: SearchConfig) -> QueryConfig:
    """Every flag combination is checked before the model is loaded (the output paths by the output guard); returns
    the query's values."""
    (_check_task_args if args.task else _check_prompt_args)(args)
    if args.transcoders:
        _check_feature_args(args, cfg)
    elif any(k.startswith(GRAPH) for k in given(args)):
        raise BadValueError("the attribution-graph flags (--node-threshold ...) apply only with --transcoders SET")
    if cfg.ablation == "mean" and not args.cache:
        raise BadValueError("--ablation mean needs --cache DIR (the means come from its token sequences)")
    return _query(args)


def _check_feature_args(args, cfg: SearchConfig) -> None:
    from workbench.circuits.feature.feature_patching import FEATURE_ABLATIONS
    from workbench.circuits.feature.transcoders import open_set

    bad = _given(args, "mib", "paraphrase", "cache", *(("budget", "budgets") if args.task else ()))
    bad += ["--strategy topk"] if args.strategy == "topk" else []
    if bad:
        raise BadValueError(
            f"{', '.join(bad)} {'does' if len(bad) == 1 else 'do'} not apply to feature circuits (--transcoders): "
            "they are found for one --prompt by the search, scored by NDF"
        )
    if cfg.ablation not in FEATURE_ABLATIONS:
        raise BadValueError(
            f"--ablation {cfg.ablation} is not available with --transcoders; valid: {FEATURE_ABLATIONS}"
        )
    _graph_cfg(args)
    args.transcoders = open_set(args.transcoders)  # refused before the model loads; the manifest read once


def _feature_task(args, model, cfg: SearchConfig, query: QueryConfig) -> None:
    """`circuit find --transcoders SET --task T`: feature circuits of n generated queries, one row each."""
    from workbench.atomic import write_json
    from workbench.circuits.feature.feature_circuit import evaluate_feature_task

    summary = evaluate_feature_task(
        model,
        args.transcoders,
        args.task,
        _task(args).n,
        query=dataclasses.replace(query, n_samples=1),  # one resample per query: a batch's cost
        cfg=cfg,
        graph_cfg=_graph_cfg(args),
    )
    print(
        f"| query | nodes (top-k) | edges | NDF | replacement | completeness | heads Jaccard vs component |\n|{'---|' * 7}"
    )
    for r in summary["rows"]:
        print(
            f"| {r['prompt'][-40:]} | {r['nodes']} ({r['topk_nodes']}) | {r['edges']} | {r['ndf']:.3f} | "
            f"{r['replacement']:.3f} | {r['completeness']:.3f} | {r['heads_jaccard']:.2f} |"
        )
    for sk in summary["skipped"]:
        print(f"skipped: {sk['prompt']!r}: {sk['reason']}", file=sys.stderr)
    if args.out:
        write_json(args.out, summary)


def _find_features(args, model, cfg: SearchConfig, query: QueryConfig) -> None:
    from workbench.steps.circuits import find_feature_circuit
    from workbench.workspace import Workspace

    if args.task:
        return _feature_task(args, model, cfg, query)

    circuit, g, folder = find_feature_circuit(
        Workspace(args.workspace),
        model,
        args.transcoders,
        args.prompt,
        args.answer,
        args.counterfactual,
        model_spec=args.model,
        name=args.name,
        query=query,
        cfg=cfg,
        graph_cfg=_graph_cfg(args),
    )
    print(circuit.summary())
    print(f"recorded {folder}")
    for flag, name in (("out", "feature_circuit.json"), ("neuronpedia", "neuronpedia.json")):
        if getattr(args, flag):
            from workbench.atomic import atomic_write_text

            atomic_write_text(Path(getattr(args, flag)), (folder / name).read_text())


def _find(args) -> None:
    from workbench.models import load

    cfg = SearchConfig(**config_values(args, SearchConfig, PREFIX))
    query = _check_find_args(args, cfg)
    model, _ = load(args.model, device=chosen_device(args))
    means = None
    if cfg.ablation == "mean":
        from workbench.cache.reader import ActivationCache
        from workbench.circuits.component.hooks import writer_means

        means = writer_means(model, ActivationCache.open(args.cache))
    if args.transcoders:
        return _find_features(args, model, cfg, query)
    (_evaluate_task if args.task else _find_one)(args, model, cfg, query, means)


def _evaluate_task(args, model, cfg: SearchConfig, query: QueryConfig, means) -> None:
    from workbench.atomic import write_json
    from workbench.circuits.component.api import evaluate_task, format_summary_table

    task = _task(args)
    summary = evaluate_task(
        model,
        args.task,
        task.n,
        task.budgets,
        query=query,
        cfg=cfg,
        means=means,
        require_prediction=not args.all_queries,
    )
    print(format_summary_table(summary))
    for s in summary["skipped"]:
        print(f"skipped: {s['prompt']!r}: {s['reason']}", file=sys.stderr)
    if args.out:
        write_json(args.out, summary)


def _find_one(args, model, cfg: SearchConfig, query: QueryConfig, means) -> None:
    from workbench.circuits.component.export import to_mib, to_neuronpedia
    from workbench.steps.circuits import find_circuit
    from workbench.workspace import Workspace

    paraphrases = [tuple(p.split("|||", 1)) if "|||" in p else p for p in args.paraphrase]
    circuit, folder = find_circuit(
        Workspace(args.workspace),
        model,
        args.prompt,
        args.answer,
        args.counterfactual,
        model_spec=args.model,
        cfg=cfg,
        name=args.name,
        query=query,
        strategy=args.strategy,
        paraphrases=paraphrases,
        means=means,
    )
    print(circuit.summary())
    print(f"recorded {folder}")
    if args.out:
        circuit.save(args.out)
    if args.mib:
        to_mib(circuit, args.mib)
    if args.neuronpedia:
        to_neuronpedia(circuit, args.neuronpedia)


def _export(args) -> None:
    from workbench.circuits.component.export import read_circuit, to_mib, to_neuronpedia
    from workbench.circuits.component.types import Circuit

    circuit = read_circuit(args.circuit)
    {"mib": to_mib, "neuronpedia": to_neuronpedia, "workbench": Circuit.save}[args.format](circuit, args.out)
    print(f"{args.circuit} -> {args.out} ({args.format})")


def _import(args) -> None:
    from workbench.circuits.neuronpedia import FeatureGraph
    from workbench.models import load
    from workbench.steps.circuits import import_circuit
    from workbench.workspace import Workspace

    model, _ = load(args.model, device="cpu")
    c, folder = import_circuit(Workspace(args.workspace), args.circuit, model, args.model, name=args.name)
    if isinstance(c, FeatureGraph):
        print(f"imported {args.circuit} (a graph: {len(c.nodes)} nodes, {len(c.links)} links) into {folder}")
        return
    print(f"imported {args.circuit} ({c.n_edges} of {c.graph.n_edges} edges in the circuit) into {folder}")


def _report(args) -> None:
    from workbench.atomic import atomic_write_text, write_json
    from workbench.circuits.component.report import report
    from workbench.corpus.tasks import QUERY_TASKS
    from workbench.models import load

    tasks = check_tasks(args.tasks or list(QUERY_TASKS))
    model, _ = load(args.model, device="cpu")
    text, raw = report(model, tasks, args.n, args.budgets, args.timing_queries, args.induction_tries)
    atomic_write_text(Path(args.out), text)
    if args.json:
        write_json(args.json, raw)
    print(text)
