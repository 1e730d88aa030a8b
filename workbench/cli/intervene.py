"""`workbench intervene`: set, scale, steer or ablate dictionary features on one prompt and see what the model does.

workbench intervene --model tiny --dictionary SAE_DIR|SET_DIR|CLT_DIR --prompt "..."|--prompts FILE --feature [layer:]index
                    --op set|scale|steer|ablate [--value V[,V...]] [--ablate-to zero|mean|counterfactual]
                    [--strengths S,S,... [--target TOKEN]] [--counterfactual "..."] [--positions all|0,3|generated]
                    [--semantics live|frozen]
                    [--live-norm] [--constrained-layers 0,1] [--continue N] [--sample --seed S --temperature T]
                    [--mean-sequences N] [--top-k K] [--out result.json]
                    [--resume]  (--prompts: one JSON line per prompt in results.jsonl as it goes; --resume continues)
"""

from __future__ import annotations

import shutil

from workbench.cli.options import add_device_flag, add_model_flag, chosen_device, workspace_flag
from workbench.configflags import add_config_flags, config_values, numbers
from workbench.guard import FILE, INPUT, declare
from workbench.interventions.config import InterventionConfig

PREFIX = ""  # the intervention's flags keep their plain dests (args.op), as before they were generated


def add_parser(sub) -> None:
    p = sub.add_parser(
        "intervene",
        parents=[workspace_flag()],
        help="set, scale, steer or ablate dictionary features on a prompt: next-token change, KL, continuations",
    )
    add_model_flag(p)
    declare(
        p.add_argument(
            "--dictionary",
            required=True,
            help="an SAE folder, a transcoder set folder or a cross-layer transcoder folder",
        ),
        INPUT,
    )
    p.add_argument("--prompt", help="the prompt (BOS is prepended); or --prompts")
    declare(
        p.add_argument(
            "--prompts",
            help='a batch: a file of prompts, one a line, or JSON lines {"prompt": ..., "counterfactual": ...}; '
            "one result per prompt",
        ),
        INPUT,
    )
    p.add_argument(
        "--feature",
        action="append",
        default=[],
        metavar="[LAYER:]INDEX",
        help="a unit to intervene on (repeat for several): a latent, a block of a block-sparse SAE, or 'scaffold'; "
        "LAYER is required for a transcoder set; none: the clean run",
    )
    _add_config_flags(p)
    p.add_argument("--name", help="the result's folder in <workspace>/interventions (default: from the prompt)")
    declare(p.add_argument("--out", help="also write the result JSON here (--prompts: the JSON lines)"), FILE)
    p.add_argument(
        "--resume",
        action="store_true",
        help="--prompts: continue the stopped batch in the --name folder after its last complete line",
    )
    add_device_flag(p)
    p.set_defaults(func=_intervene)


def _add_config_flags(p) -> None:
    """The flags of the intervention itself: one per scalar field of InterventionConfig (configflags), and the list
    fields' own (a comma-separated list each)."""
    p.add_argument(
        "--value",
        type=numbers(InterventionConfig, "value"),
        help="set: the code; scale: the factor; steer: the strength (a block: "
        "one number or one per coordinate, comma separated)",
    )
    p.add_argument(
        "--strengths",
        type=numbers(InterventionConfig, "strengths"),
        help="a sweep in the same run (comma separated, e.g. 0,4,8,16): each put in as --value is; per strength "
        "the --target token's logit and probability change, the KL and the continuation",
    )
    p.add_argument(
        "--constrained-layers",
        type=numbers(InterventionConfig, "constrained_layers"),
        default=[],
        help="layers whose MLP outputs are held at the clean run's",
    )
    add_config_flags(p, InterventionConfig, PREFIX)
    declare(
        p.add_argument("--cache", help="--ablate-to mean: the activation cache whose sequences give the mean codes"),
        INPUT,
    )


def _config(args, prompts=None) -> InterventionConfig:
    """The flags as an InterventionConfig; a batch whose every line names its counterfactual needs no
    --counterfactual (the first line's stands in the config; each result records its own)."""
    values = config_values(args, InterventionConfig, PREFIX)
    own = prompts and all(cf for _, cf in prompts) and values["ablate_to"] == "counterfactual"
    values["counterfactual"] = values["counterfactual"] or (prompts[0][1] if own else None)
    return InterventionConfig(
        features=list(args.feature),
        value=args.value,
        strengths=args.strengths,
        constrained_layers=args.constrained_layers,
        **values,
    )


def _intervene(args) -> None:
    from workbench.atomic import atomic_path
    from workbench.errors import BadValueError
    from workbench.interventions.config import read_prompts
    from workbench.models import load
    from workbench.steps.interventions import intervene
    from workbench.workspace import Workspace

    if (args.prompt is None) == (args.prompts is None):
        raise BadValueError("give one of --prompt TEXT (one prompt) or --prompts FILE (a batch)")
    prompts = read_prompts(args.prompts) if args.prompts else None
    cfg = _config(args, prompts)  # every value checked before the model loads
    if args.cache and not (cfg.op == "ablate" and cfg.ablate_to == "mean"):
        raise BadValueError("--cache gives the means of --op ablate --ablate-to mean only")
    if cfg.op == "ablate" and cfg.ablate_to == "mean" and not args.cache:
        raise BadValueError("--ablate-to mean needs --cache DIR (the mean codes come from its sequences)")
    if args.resume and not prompts:
        raise BadValueError("--resume continues a stopped --prompts batch; a single --prompt has nothing to resume")
    model, _ = load(args.model, device=chosen_device(args))
    r, folder = intervene(
        Workspace(args.workspace),
        model,
        args.dictionary,
        prompts or args.prompt,
        cfg,
        model_spec=args.model,
        name=args.name,
        mean_cache=args.cache,
        resume=args.resume,
        on_result=lambda one: print(_summary(one), flush=True),
    )
    if not prompts:
        print(_summary(r))
    print(f"recorded {folder}" + (f": {r['prompts']} results in {folder / r['results']}" if prompts else ""))
    if args.out:
        with atomic_path(args.out) as tmp:  # streamed: a batch's lines are never held whole
            shutil.copyfile(folder / (r["results"] if prompts else "result.json"), tmp)


def _summary(r: dict) -> str:
    """The next-token change at the last position and the two continuations, as a few lines."""
    last = r["positions"][-1]
    lines = [
        f"{r['semantics']} intervention on {r['prompt']!r}; next token after position {last['position']}: KL {last['kl']:.4g}"
    ]
    for row in last["top"][:5]:
        lines.append(
            f"  {row['str']!r:>14} p {row['prob']:.3f} (clean {row['clean_prob']:.3f}, logit {row['logit_change']:+.3f})"
        )
    c = r["continuation"]
    lines.append(f"clean:      {''.join(' ' + s for s in c['clean']['str_tokens'])}")
    lines.append(f"intervened: {''.join(' ' + s for s in c['intervened']['str_tokens'])}")
    if "sweep" in r:
        sw = r["sweep"]
        lines.append(f"sweep, target {sw['target_str']!r} (clean p {sw['clean_prob']:.3f}):")
        for row in sw["rows"]:
            lines.append(
                f"  {row['strength']:>8g}: KL {row['kl']:.4g}, target logit {row['target_logit_change']:+.3f}, "
                f"p {row['target_prob']:.3f}, top {row['top']!r}"
            )
    return "\n".join(lines)
