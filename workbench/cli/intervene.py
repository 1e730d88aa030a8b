"""`workbench intervene`: set, scale, steer or ablate dictionary features on one prompt and see what the model does.

workbench intervene --model tiny --dictionary SAE_DIR|SET_DIR|CLT_DIR --prompt "..."|--prompts FILE --feature [layer:]index
                    --op set|scale|steer|ablate [--value V[,V...]] [--ablate-to zero|mean|counterfactual]
                    [--strengths S,S,... [--target TOKEN]] [--counterfactual "..."] [--positions all|0,3|generated] [--semantics live|frozen]
                    [--live-norm] [--constrained-layers 0,1] [--continue N] [--sample --seed S] [--out result.json]
                    [--resume]  (--prompts: one JSON line per prompt in results.jsonl as it goes; --resume continues)
"""

from __future__ import annotations

import shutil

from workbench.cli.options import add_device_flag, add_model_flag, chosen_device, workspace_flag
from workbench.configflags import count, numbers
from workbench.guard import FILE, INPUT, declare


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
    """The flags of the intervention itself (InterventionConfig's fields): what is done, where, and how it runs."""
    from workbench.interventions.config import ABLATE_TO, OPS, SEMANTICS, InterventionConfig

    p.add_argument("--op", choices=OPS, default="ablate", help="what is done to the codes (default: %(default)s)")
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
        "--target", help="--strengths: the next token followed (default: the one the largest strength raises most)"
    )
    p.add_argument(
        "--ablate-to", choices=ABLATE_TO, default="zero", help="ablate: the code put in (default: %(default)s)"
    )
    p.add_argument("--counterfactual", help="--ablate-to counterfactual: the prompt whose codes are put in")
    declare(
        p.add_argument("--cache", help="--ablate-to mean: the activation cache whose sequences give the mean codes"),
        INPUT,
    )
    p.add_argument("--positions", default="all", help="all, generated, or prompt positions e.g. 0,3,-1 (default: all)")
    p.add_argument(
        "--semantics",
        choices=SEMANTICS,
        default="live",
        help="live (the real model) or frozen "
        "(attention patterns and normalisation held at the clean run's, as circuit-tracer)",
    )
    p.add_argument(
        "--live-norm",
        dest="frozen_norm",
        action="store_false",
        help="frozen: leave the normalisation scales live (circuit-tracer 0.5's feature_intervention does, unless "
        "every layer is constrained)",
    )
    p.add_argument(
        "--constrained-layers",
        type=numbers(InterventionConfig, "constrained_layers"),
        default=[],
        help="layers whose MLP outputs are held at the clean run's",
    )
    p.add_argument(
        "--continue",
        dest="continue_tokens",
        type=count(0),
        default=20,
        help="tokens generated, clean and intervened (default: %(default)s)",
    )
    p.add_argument("--sample", action="store_true", help="sample the continuations (default: greedy)")
    p.add_argument("--seed", type=count(0), default=0, help="sampling seed, the same for both (default: %(default)s)")
    p.add_argument("--top-k", type=count(1), default=10, help="next tokens reported (default: %(default)s)")


def _config(args, prompts=None):
    """The flags as an InterventionConfig; a batch whose every line names its counterfactual needs no
    --counterfactual (the first line's stands in the config; each result records its own)."""
    from workbench.interventions.config import InterventionConfig

    own = prompts and all(cf for _, cf in prompts)

    return InterventionConfig(
        features=list(args.feature),
        op=args.op,
        value=args.value,
        strengths=args.strengths,
        target=args.target,
        ablate_to=args.ablate_to,
        counterfactual=args.counterfactual or (prompts[0][1] if own and args.ablate_to == "counterfactual" else None),
        positions=args.positions,
        semantics=args.semantics,
        frozen_norm=args.frozen_norm,
        constrained_layers=args.constrained_layers,
        continue_tokens=args.continue_tokens,
        sample=args.sample,
        seed=args.seed,
        top_k=args.top_k,
    )


def _intervene(args) -> None:
    from workbench import steps
    from workbench.atomic import atomic_path
    from workbench.errors import BadValueError
    from workbench.interventions.config import read_prompts
    from workbench.models import load
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
    r, folder = steps.intervene(
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
