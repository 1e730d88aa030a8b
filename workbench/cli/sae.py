"""`workbench sae train|eval|import|export`: train sparse autoencoders on one hook of a cache, evaluate saved ones,
import dictionaries made by other libraries and export the workbench's in their files."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys

from workbench.cli.options import add_model_flag, quiet_flag, workspace_flag
from workbench.configflags import add_config_flags, config_values, given, set_fields
from workbench.dictionaries.kinds import TRANSCODERS, WORKSPACE_KINDS
from workbench.errors import BadValueError
from workbench.guard import INPUT, SCRATCH, artifact, declare, in_place
from workbench.sae.config import CLTConfig, EvalConfig, SAEConfig, TrainConfig, at_k
from workbench.sae.foreign import FORMATS
from workbench.workspace import Workspace

SWEEP = ("architecture", "k", "scaffold_rank", "seed")  # one SAE per combination of these flags' values
SAE, TRAIN, EVAL = "sae.", "train.", "eval."  # namespace prefixes of the config flags


def add_parser(sub) -> None:
    sae = sub.add_parser("sae", help="train and evaluate sparse autoencoders").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    _add_train(sae)
    e = sae.add_parser(
        "eval",
        parents=[workspace_flag()],
        help="evaluate saved SAEs on the cache's held-out split (writes metrics.json)",
    )
    declare(e.add_argument("sae", nargs="+", help="SAE folders"), in_place(*WORKSPACE_KINDS))
    declare(e.add_argument("--cache", required=True, help="activation cache folder holding the SAE's hook"), INPUT)
    add_model_flag(e, help="model for the spliced CE/KL metrics (default: %(default)s)")
    e.add_argument("--no-model", action="store_true", help="skip the metrics that run the model")
    add_config_flags(e, EvalConfig, EVAL)
    e.set_defaults(func=_eval)
    i = sae.add_parser(
        "import",
        parents=[workspace_flag()],
        help="copy a SAELens, sparsify, circuit-tracer or dictionary_learning dictionary into the workspace, checked "
        "against and bound to a model",
    )
    declare(
        i.add_argument(
            "source",
            metavar="SRC",
            help="the dictionary's folder: SAELens (cfg.json + sae_weights.safetensors), a sparsify run or hookpoint, "
            "a circuit-tracer set (config.yaml), or dictionary_learning (ae.pt + config.json); or a Hub id, fetched "
            "once by its own library: a sae_lens release or repo with --sae-id, or circuit-tracer's "
            "'gemma', 'llama', owner/name[/subfolder][@revision] or hf://... config",
        ),
        INPUT,
    )
    i.add_argument(
        "--format",
        default="auto",
        choices=FORMATS,
        help="the source's layout (default: %(default)s: recognise the folder)",
    )
    i.add_argument(
        "--hook",
        help="HOOK[,TARGET]: the model hooks a sparsify hookpoint or dictionary_learning dictionary reads (and a "
        "transcoder writes), when its config does not name them as a TransformerLens hook",
    )
    i.add_argument(
        "--sae-id",
        help="the SAE within sae_lens release (or Hub repo) SRC, as sae_lens's SAE.from_pretrained(release, sae_id) "
        "names it, e.g. gpt2-small-res-jb --sae-id blocks.8.hook_resid_pre",
    )
    add_model_flag(i, help="the model it reads from, as every command names it (default: %(default)s)")
    i.add_argument(
        "--name",
        help="folder in <workspace>/saes/imported (a set: <workspace>/transcoders) (default: the source's name)",
    )
    i.set_defaults(func=_import)
    x = sae.add_parser(
        "export",
        parents=[workspace_flag()],
        help="write a transcoder set or SAE as circuit-tracer's or sparsify's files, which their own loaders read",
    )
    declare(x.add_argument("source", metavar="SRC", help="a transcoder set folder or an SAE folder"), INPUT)
    x.add_argument("--format", required=True, choices=("circuit-tracer", "sparsify"), help="the files to write")
    declare(x.add_argument("--out", required=True, help="a new folder for the files"), SCRATCH)
    add_model_flag(x, help="the model the dictionary reads from (default: %(default)s)")
    x.set_defaults(func=_export)


def _add_train(sae) -> None:
    t = sae.add_parser(
        "train",
        parents=[quiet_flag(), workspace_flag()],
        help="train one or more SAEs on one hook of a cache (one shared batch stream)",
    )
    declare(t.add_argument("--cache", required=True, help="activation cache folder (from `workbench cache`)"), INPUT)
    t.add_argument("--hook", help="cached hook to train on, e.g. blocks.2.hook_resid_post")
    t.add_argument(
        "--target",
        help="transcoder: the cached hook to reconstruct from --hook, e.g. --hook blocks.1.ln2.hook_normalized "
        "--target blocks.1.hook_mlp_out",
    )
    target_cache = t.add_argument(
        "--target-cache",
        help="read --target from this cache instead of --cache (it must hold the same tokens, checked row by row)",
    )
    declare(target_cache, INPUT)
    t.add_argument(
        "--transcoders",
        metavar="LAYERS",
        help="a transcoder set: one transcoder per layer ('all' or e.g. '0,2'), each from the MLP's input to its "
        "output, side by side on one pass (into <workspace>/transcoders/NAME)",
    )
    t.add_argument(
        "--clt",
        action="store_true",
        help="a cross-layer transcoder over --layers: one encoder per layer, each feature writing every later "
        "layer's MLP output (into <workspace>/clts/NAME)",
    )
    t.add_argument("--layers", help="--clt: the layers ('all' or e.g. '0,2'; default: all)")
    for f in ("clt_loss", "clt_sparsity"):
        meta = next(x for x in dataclasses.fields(CLTConfig) if x.name == f).metadata
        t.add_argument("--" + f.replace("_", "-"), choices=meta["choices"], default=None, help=meta["help"])
    t.add_argument("--name", help="run folder in <workspace>/saes (default: HOOK-TIME)")
    out = t.add_argument(
        "--out",
        help="run folder instead of <workspace>/saes/NAME: one SAELens-format subfolder per SAE "
        "and the shared checkpoint",
    )
    declare(out, artifact(TRANSCODERS.workspace))  # a set's folder is its artifact; a plain run's folder holds none
    add_config_flags(t, SAEConfig, SAE, sweep=SWEEP)
    t.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="FIELD=VALUE",
        help="SAEConfig fields without a flag, as JSON, for every SAE, e.g. prefixes=[64,256,1024]",
    )
    add_config_flags(t, TrainConfig, TRAIN)
    t.add_argument("--resume", action="store_true", help="continue from the checkpoint in the run folder")
    t.set_defaults(func=_train)


CLT_ONLY = ("layers", "clt_loss", "clt_sparsity")  # flags that only a CLT (--clt) reads


def _train(a: argparse.Namespace) -> None:
    from workbench.checkpoint import dist_info
    from workbench.steps.dictionaries import train_clt, train_saes, train_transcoder_set

    shared = {**config_values(a, SAEConfig, SAE), **set_fields(SAEConfig, a.set, others=(TrainConfig,))}
    sweeps = [shared.pop(name) for name in SWEEP]
    cfgs = [SAEConfig(**dict(zip(SWEEP, values)), **shared) for values in itertools.product(*sweeps)]
    if SAE + "k" in given(a):
        cfgs, notes = at_k(cfgs)
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
    train_cfg = TrainConfig(**config_values(a, TrainConfig, TRAIN), progress=not a.quiet)
    ws, kw = Workspace(a.workspace), {"out": a.out, "name": a.name, "resume": a.resume}
    if a.clt:
        if a.hook or a.target or a.transcoders is not None or len(cfgs) != 1:
            raise BadValueError("--clt trains one CLT over --layers: drop --hook/--target/--transcoders and sweeps")
        extra = {f: getattr(a, f) for f in ("clt_loss", "clt_sparsity") if getattr(a, f) is not None}
        clt_cfg = CLTConfig(**{**cfgs[0].to_dict(), **extra})
        folders = [train_clt(ws, a.cache, a.layers or "all", clt_cfg, train_cfg, **kw)]
        saved = []
    elif unused := [f"--{f.replace('_', '-')} {getattr(a, f)!r}" for f in CLT_ONLY if getattr(a, f) is not None]:
        raise BadValueError(f"{', '.join(unused)} has no effect without --clt (it sets up a CLT): add --clt or drop it")
    elif a.transcoders is not None:
        if a.hook or a.target:
            raise BadValueError(f"--transcoders {a.transcoders!r} chooses each layer's hooks; drop --hook/--target")
        if a.target_cache:
            raise BadValueError(
                f"--target-cache {a.target_cache!r} applies to one transcoder (--hook with --target); a transcoder "
                f"set (--transcoders {a.transcoders!r}) reads every layer's MLP input and output from --cache: "
                "drop --target-cache"
            )
        folder, folders = train_transcoder_set(ws, a.cache, a.transcoders, cfgs, train_cfg, **kw)
        saved = [f"saved transcoder set {folder}"]
    elif not a.hook:
        raise BadValueError("sae train needs --hook HOOK (and --target HOOK for a transcoder) or --transcoders LAYERS")
    else:
        folders = train_saes(ws, a.cache, a.hook, cfgs, train_cfg, target=a.target, target_cache=a.target_cache, **kw)
        saved = []
    if dist_info()[0] == 0:  # under torchrun, rank 0 reports
        print("\n".join([*saved, *(f"saved {f}" for f in folders)]))


def _import(a: argparse.Namespace) -> None:
    from workbench.steps.exchange import import_sae

    s, folder = import_sae(
        Workspace(a.workspace), a.source, a.model, fmt=a.format, name=a.name, hook=a.hook, sae_id=a.sae_id
    )
    gap = s["max_abs_diff_vs_source"]
    checked = "" if gap is None else f"; codes and outputs within {gap:.2g} of the source library's own loader"
    if "features_per_layer" in s:  # a CLT
        what = f"a CLT over layers {s['layers']}, {s['features_per_layer']} features per layer, reading {s['input']}"
    elif "transcoders" in s:  # a transcoder set
        what = f"{s['transcoders']} layers, {s['input']} -> their outputs"
    else:
        reads = s["hook"] + (f" -> {s['target']}" if "target" in s else "")
        what = f"{s['architecture']}, {s['d_in']} -> {s['d_sae']} latents, {reads}"
        what += f"; {s['dictionaries']} dictionaries, one per hookpoint" if "dictionaries" in s else ""
    print(f"imported {a.source} ({what}) into {folder}, bound to {a.model}{checked}")


def _export(a: argparse.Namespace) -> None:
    from workbench.steps.exchange import export_dictionary

    out = export_dictionary(a.source, a.format, a.out, a.model)
    print(f"wrote {a.source} as {a.format} files in {out}")


def _eval(a: argparse.Namespace) -> None:
    from workbench.sae.scores import shown
    from workbench.steps.dictionaries import SAE_HEADLINE, evaluate_sae

    cfg = EvalConfig(**config_values(a, EvalConfig, EVAL))
    ws = Workspace(a.workspace)
    for folder in a.sae:
        m = evaluate_sae(ws, folder, a.cache, None if a.no_model else a.model, cfg)
        if "fvu_per_layer" in m:  # a CLT
            r = m.get("all_replaced", {})
            every = (
                f"CE recovered {shown(r, 'ce_loss_recovered', '.4g')}, KL score {shown(r, 'kl_score', '.4g')}"
                if "kl_score" in r
                else r.get("why_not", "not run (--no-model)")
            )
            fvus = ", ".join(f"{v:.3g}" for v in m["fvu_per_layer"])
            print(f"{folder}: CLT FVU per layer {fvus}; L0 {m['l0']:.4g}; every MLP replaced: {every}")
            continue
        if "all_replaced" in m:  # a transcoder set
            for name, r in m["all_replaced"].items():
                print(
                    f"{folder}: every MLP replaced by {name}: CE recovered {shown(r, 'ce_loss_recovered', '.4g')}, "
                    f"KL score {shown(r, 'kl_score', '.4g')}"
                )
            continue
        flat = {**m["reconstruction"], **m.get("splice", {})}
        headline = ", ".join(f"{k} {shown(flat, k, '.4g')}" for k in SAE_HEADLINE if k in flat)
        print(f"{folder}: {headline}  (all metrics in metrics.json)")
