"""`workbench ...`: one sub-command per job, each a thin layer over the steps in workbench.steps.

Every command that makes an artifact records it in a workspace (--workspace, default ./workspace):
outputs land inside it unless --out says otherwise, and each gets an artifact.json manifest either
way. Flags for config fields are generated from the config dataclasses (workbench.configflags), so
each default is written once. Errors a user can cause (UserError) print one clear line and exit with
status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

from workbench.cache.config import HarvestConfig
from workbench.configflags import add_config_flags, config_values, set_fields
from workbench.errors import UserError
from workbench.sae.config import EvalConfig, SAEConfig, TrainConfig
from workbench.workspace import KINDS, Workspace

SAE_SWEEP = ("architecture", "k", "scaffold_rank", "seed")  # one SAE per combination of these flags' values
HARVEST, SAE, TRAIN, EVAL, MODEL = (
    "harvest.",
    "sae.",
    "train.",
    "eval.",
    "model.",
)  # namespace prefixes of the config flags
DEMO = "demo."


def _model_train(a: argparse.Namespace) -> None:
    from workbench import steps
    from workbench.models.toy import TinyConfig

    cfg = TinyConfig(**config_values(a, TinyConfig, MODEL))
    card, folder = steps.train_model(
        Workspace(a.workspace),
        cfg,
        out=a.out,
        name=a.name,
        overwrite=a.overwrite,
        resume=a.resume,
        progress=not a.quiet,
    )
    print(f"saved {folder}: train loss {card['final_train_loss']:.3f}, {card['train_seconds']} s")
    for task, acc in card["heldout_task_accuracy"].items():
        print(f"  {task:<20} held-out top-1 {acc:6.1%}   (chance {card['chance_accuracy'][task]:.1%})")


def _tiny_flags(parser: argparse.ArgumentParser) -> None:
    """TinyConfig's flags: its module imports TransformerLens, so only `model train` pays for it."""
    from workbench.models.toy import TinyConfig

    add_config_flags(parser, TinyConfig, MODEL)


class _LazyFlagsParser(argparse.ArgumentParser):
    """A sub-command parser that adds its flags (`populate(parser)`) when it is first used, so building
    the whole CLI stays cheap (no torch) while the flags still come from their config dataclass."""

    def __init__(self, *args, populate=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._populate = populate

    def _ensure(self) -> None:
        if self._populate is not None:
            populate, self._populate = self._populate, None
            populate(self)

    def parse_known_args(self, *args, **kwargs):
        self._ensure()
        return super().parse_known_args(*args, **kwargs)

    def format_help(self) -> str:
        self._ensure()
        return super().format_help()


def _model_info(a: argparse.Namespace) -> None:
    from workbench.cache import hook_summary
    from workbench.models import load, model_id

    model, tok = load(a.model, device="cpu")
    c = model.cfg
    print(
        f"{model_id(model)}: {c.n_layers} layers, d_model {c.d_model}, {c.n_heads} heads x d_head {c.d_head}, "
        f"d_mlp {c.d_mlp}, n_ctx {c.n_ctx}, vocab {c.d_vocab}, {sum(p.numel() for p in model.parameters()):,} params"
    )
    print("hooks:", ", ".join(hook_summary(model.hook_dict)))


def _cache(a: argparse.Namespace) -> None:
    from workbench import steps
    from workbench.errors import BadValueError

    if a.action == "verify":
        from workbench.cache import ActivationCache

        if not a.folder:
            raise BadValueError("cache verify needs the cache folder: workbench cache verify DIR")
        n = ActivationCache.open(a.folder).verify()
        print(f"cache {a.folder}: all {n} files match their checksums and the manifest")
        return
    cfg = HarvestConfig(**config_values(a, HarvestConfig, HARVEST))
    cache = steps.make_cache(
        Workspace(a.workspace),
        a.model,
        a.corpus,
        a.hooks,
        cfg,
        out=a.out,
        name=a.name,
        corpus_seed=a.seed,
        resume=a.resume,
        overwrite=a.overwrite,
        progress=not a.quiet,
    )
    m = cache.manifest
    print(
        f"cache {cache.path}: {cache.n_tokens('train'):,} train + {cache.n_tokens('heldout'):,} held-out tokens, "
        f"dtype {m['config']['dtype']}, {m.get('unknown_fraction', 0):.1%} of the corpus's tokens unknown to the "
        "tokenizer"
    )
    for h in cache.hooks:
        print(f"  {h:<28} d={cache.d(h):<5} mean norm {cache.stats(h)['mean_norm']:.2f}")


def _sae_train(a: argparse.Namespace) -> None:
    from workbench import steps

    shared = {**config_values(a, SAEConfig, SAE), **set_fields(SAEConfig, a.set)}
    sweeps = [shared.pop(name) for name in SAE_SWEEP]
    cfgs = [SAEConfig(**dict(zip(SAE_SWEEP, values)), **shared) for values in itertools.product(*sweeps)]
    train_cfg = TrainConfig(**config_values(a, TrainConfig, TRAIN), progress=not a.quiet)
    ws, kw = Workspace(a.workspace), {"out": a.out, "name": a.name, "resume": a.resume}
    if a.transcoders is not None:
        from workbench.errors import BadValueError

        if a.hook or a.target:
            raise BadValueError(f"--transcoders {a.transcoders!r} chooses each layer's hooks; drop --hook/--target")
        folder, folders = steps.train_transcoder_set(ws, a.cache, a.transcoders, cfgs, train_cfg, **kw)
        print(f"saved transcoder set {folder}")
    elif not a.hook:
        from workbench.errors import BadValueError

        raise BadValueError("sae train needs --hook HOOK (and --target HOOK for a transcoder) or --transcoders LAYERS")
    else:
        folders = steps.train_saes(
            ws, a.cache, a.hook, cfgs, train_cfg, target=a.target, target_cache=a.target_cache, **kw
        )
    for f in folders:
        print(f"saved {f}")


def _sae_eval(a: argparse.Namespace) -> None:
    from workbench import steps

    cfg = EvalConfig(**config_values(a, EvalConfig, EVAL))
    ws = Workspace(a.workspace)
    for folder in a.sae:
        m = steps.evaluate_sae(ws, folder, a.cache, None if a.no_model else a.model, cfg)
        if "all_replaced" in m:  # a transcoder set
            for name, r in m["all_replaced"].items():
                print(
                    f"{folder}: every MLP replaced by {name}: CE recovered {r['ce_loss_recovered']:.4g}, KL score {r['kl_score']:.4g}"
                )
            continue
        flat = {**m["reconstruction"], **m.get("splice", {})}
        shown = ", ".join(f"{k} {flat[k]:.4g}" for k in steps.SAE_HEADLINE if k in flat)
        print(f"{folder}: {shown}  (all metrics in metrics.json)")


def _ls(a: argparse.Namespace) -> None:
    from workbench.browse import artifacts

    found = artifacts(a.workspace, a.kind)
    if not found:
        print(f"no artifacts recorded in {a.workspace}" + (f" of kind {a.kind}" if a.kind else ""))
    for art in found:
        m = art.manifest
        summary = ", ".join(
            f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
            for k, v in m.get("summary", {}).items()
            if isinstance(v, (int, float, str))
        )
        print(f"{art.kind:<9} {art.name:<34} {m.get('made_by', '?'):<22} {m.get('created', '?'):<25} {summary}")


def _demo(a: argparse.Namespace) -> None:
    from workbench.app_cli import serve
    from workbench.demo import DemoConfig, run_demo

    run_demo(Path(a.workspace), DemoConfig(**config_values(a, DemoConfig, DEMO)), a.overwrite, not a.quiet)
    if not a.no_serve:
        serve(Path(a.workspace), a.host, a.port)


def _workspace_flag(default_help: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--workspace", default="workspace", help=f"workspace folder {default_help} (default: %(default)s)")
    return p


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="workbench", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    quiet = argparse.ArgumentParser(add_help=False)
    quiet.add_argument("--quiet", action="store_true", help="no progress bars")
    ws = _workspace_flag("that records the artifact")

    model = sub.add_parser("model", help="train or inspect models").add_subparsers(
        dest="action", required=True, metavar="ACTION", parser_class=_LazyFlagsParser
    )
    t = model.add_parser(
        "train",
        parents=[quiet, ws],
        populate=_tiny_flags,
        help="train the embedded model's architecture on the synthetic corpus (reproducible from --seed)",
    )
    t.add_argument("--name", default="tiny", help="folder in <workspace>/models (default: %(default)s)")
    t.add_argument("--out", help="output folder instead of <workspace>/models/NAME")
    g = t.add_mutually_exclusive_group()
    g.add_argument("--overwrite", action="store_true", help="replace the model files in a non-empty output folder")
    g.add_argument("--resume", action="store_true", help="continue from the checkpoint in the output folder")
    t.set_defaults(func=_model_train)
    i = model.add_parser("info", help="print a model's shape and hook names")
    i.add_argument(
        "--model", default="tiny", help="'tiny', a saved model folder, or a TransformerLens name (default: %(default)s)"
    )
    i.set_defaults(func=_model_info)

    c = sub.add_parser(
        "cache",
        parents=[quiet, ws],
        help="harvest activations of one or more hooks into an on-disk cache "
        "(`cache verify DIR` checks every file of one against its checksums)",
    )
    c.add_argument("action", nargs="?", choices=["verify"], help="verify DIR: recompute every checksum of a cache")
    c.add_argument("folder", nargs="?", help="the cache folder to verify")
    c.add_argument(
        "--model", default="tiny", help="'tiny', a saved model folder, or a TransformerLens name (default: %(default)s)"
    )
    c.add_argument(
        "--corpus",
        default="synthetic",
        help="'synthetic', 'synthetic:seed=N', comma-separated .txt/.jsonl/.parquet files, or hf:<dataset> (default: %(default)s)",
    )
    c.add_argument(
        "--hooks",
        nargs="+",
        help="TransformerLens hook names; '*' expands over layers (default: every layer's hook_resid_post, and "
        "each MLP's input (ln2.hook_normalized, or hook_mlp_in without LayerNorm) and hook_mlp_out, for transcoders)",
    )
    c.add_argument("--name", help="folder in <workspace>/caches (default: MODEL-CORPUS)")
    c.add_argument("--out", help="cache folder instead of <workspace>/caches/NAME")
    add_config_flags(c, HarvestConfig, HARVEST)
    c.add_argument("--seed", type=int, default=0, help="corpus seed (default: %(default)s)")
    g = c.add_mutually_exclusive_group()
    g.add_argument("--resume", action="store_true", help="continue an interrupted harvest in the output folder")
    g.add_argument("--overwrite", action="store_true", help="replace an existing cache in the output folder")
    c.set_defaults(func=_cache)

    sae_p = sub.add_parser("sae", help="train and evaluate sparse autoencoders").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    st = sae_p.add_parser(
        "train", parents=[quiet, ws], help="train one or more SAEs on one hook of a cache (one shared batch stream)"
    )
    st.add_argument("--cache", required=True, help="activation cache folder (from `workbench cache`)")
    st.add_argument("--hook", help="cached hook to train on, e.g. blocks.2.hook_resid_post")
    st.add_argument(
        "--target",
        help="transcoder: the cached hook to reconstruct from --hook, e.g. --hook blocks.1.ln2.hook_normalized "
        "--target blocks.1.hook_mlp_out",
    )
    st.add_argument(
        "--target-cache",
        help="read --target from this cache instead of --cache (it must hold the same tokens, checked row by row)",
    )
    st.add_argument(
        "--transcoders",
        metavar="LAYERS",
        help="a transcoder set: one transcoder per layer ('all' or e.g. '0,2'), each from the MLP's input to its "
        "output, side by side on one pass (into <workspace>/transcoders/NAME)",
    )
    st.add_argument("--name", help="run folder in <workspace>/saes (default: HOOK-TIME)")
    st.add_argument(
        "--out",
        help="run folder instead of <workspace>/saes/NAME: one SAELens-format subfolder per SAE "
        "and the shared checkpoint",
    )
    add_config_flags(st, SAEConfig, SAE, sweep=SAE_SWEEP)
    st.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="FIELD=VALUE",
        help="SAEConfig fields without a flag, as JSON, for every SAE, e.g. prefixes=[64,256,1024]",
    )
    add_config_flags(st, TrainConfig, TRAIN)
    st.add_argument("--resume", action="store_true", help="continue from the checkpoint in the run folder")
    st.set_defaults(func=_sae_train)
    se = sae_p.add_parser(
        "eval", parents=[ws], help="evaluate saved SAEs on the cache's held-out split (writes metrics.json)"
    )
    se.add_argument("sae", nargs="+", help="SAE folders")
    se.add_argument("--cache", required=True, help="activation cache folder holding the SAE's hook")
    se.add_argument("--model", default="tiny", help="model for the spliced CE/KL metrics (default: %(default)s)")
    se.add_argument("--no-model", action="store_true", help="skip the metrics that run the model")
    add_config_flags(se, EvalConfig, EVAL)
    se.set_defaults(func=_sae_eval)

    from workbench.circuits.cli import add_commands as add_circuit_commands

    add_circuit_commands(sub, parents=[ws])
    from workbench.features.cli import add_commands as add_feature_commands

    add_feature_commands(sub, parents=[ws])
    from workbench.app_cli import add_commands as add_app_commands
    from workbench.app_cli import add_serve_flags

    add_app_commands(sub)
    from workbench.attention.cli import add_commands as add_attention_commands

    add_attention_commands(sub, parents=[ws])

    ls = sub.add_parser("ls", parents=[_workspace_flag("to list")], help="list the artifacts recorded in a workspace")
    ls.add_argument("--kind", choices=KINDS, help="only artifacts of this kind")
    ls.set_defaults(func=_ls)

    d = sub.add_parser(
        "demo",
        parents=[quiet, _workspace_flag("to fill")],
        help="run the whole workbench on the embedded model into a workspace (resumes), then serve the app",
    )
    d.add_argument(
        "--overwrite",
        action="store_true",
        help="first remove what the workbench made in the workspace (refuses folders holding anything else)",
    )
    d.add_argument("--no-serve", action="store_true", help="build the workspace only; do not start the app")
    add_serve_flags(d)
    from workbench.demo import DemoConfig

    add_config_flags(d, DemoConfig, DEMO)
    d.set_defaults(func=_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one command; a UserError, or an OS error on a named file, is one line on stderr and status 2."""
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except UserError as e:
        return _fail(args.command, str(e))
    except OSError as e:
        if e.filename is None:  # nothing to name: not a user's file, so keep the traceback
            raise
        where = f"{e.filename} -> {e.filename2}" if e.filename2 else e.filename
        return _fail(args.command, f"{e.strerror or type(e).__name__}: {where}")
    return 0


def _fail(command: str, message: str) -> int:
    print(f"workbench {command}: error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
