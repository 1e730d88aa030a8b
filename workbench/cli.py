"""`workbench ...`: one sub-command per job, each a thin layer over the Python API.

Errors a user can cause (bad spec, bad hook, existing folder, corrupt file) print one clear line
and exit with status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from workbench.cache import CacheError, hook_summary
from workbench.sae import NonFiniteError
from workbench.sae.config import ARCHITECTURES

# errors a user can cause and fix (each message names the bad value and the way out)
USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, FileNotFoundError, FileExistsError, KeyError, CacheError,
                                                NonFiniteError)


def _model_train(a: argparse.Namespace) -> None:
    from workbench.models.toy import TinyConfig, train_tiny

    cfg = TinyConfig(steps=a.steps, batch_size=a.batch_size, lr=a.lr, seed=a.seed, n_layers=a.n_layers, d_model=a.d_model)
    card = train_tiny(a.out, cfg, progress=not a.quiet)
    print(f"saved {a.out}: train loss {card['final_train_loss']:.3f}, {card['train_seconds']} s")
    for task, acc in card["heldout_task_accuracy"].items():
        print(f"  {task:<13} held-out top-1 {acc:6.1%}   (chance {card['chance_accuracy'][task]:.1%})")


def _model_info(a: argparse.Namespace) -> None:
    from workbench.models import load, model_id

    model, tok = load(a.model, device="cpu")
    c = model.cfg
    print(f"{model_id(model)}: {c.n_layers} layers, d_model {c.d_model}, {c.n_heads} heads x d_head {c.d_head}, "
          f"d_mlp {c.d_mlp}, n_ctx {c.n_ctx}, vocab {c.d_vocab}, {sum(p.numel() for p in model.parameters()):,} params")
    print("hooks:", ", ".join(hook_summary(model.hook_dict)))


def _cache(a: argparse.Namespace) -> None:
    from workbench.cache import ActivationCache, harvest

    if a.action == "verify":
        if not a.folder:
            raise ValueError("cache verify needs the cache folder: workbench cache verify DIR")
        n = ActivationCache.open(a.folder).verify()
        print(f"cache {a.folder}: all {n} files match their checksums and the manifest")
        return
    if not a.out:
        raise ValueError("workbench cache needs --out DIR (the cache folder to create), or `cache verify DIR`")
    from workbench.corpus import load_corpus
    from workbench.models import load

    model, tok = load(a.model)
    corpus = load_corpus(a.corpus, tok, seed=a.seed)
    hooks = [h for spec in a.hooks for h in _expand_hooks(spec, model)]
    cache = harvest(model, corpus, hooks, a.out, n_tokens=a.tokens, ctx_len=a.ctx_len, batch_size=a.batch_size,
                    dtype=a.dtype, heldout_fraction=a.heldout_fraction, exclude_special=not a.keep_special,
                    shard_tokens=a.shard_tokens, outlier_factor=a.outlier_factor,
                    max_unknown_fraction=a.max_unknown_fraction,
                    resume=a.resume, overwrite=a.overwrite, progress=not a.quiet)
    _print_cache_summary(cache)


def _expand_hooks(spec: str, model) -> list[str]:
    """'blocks.*.hook_resid_post' expands over layers; plain names pass through (validated by harvest)."""
    if "*" not in spec:
        return [spec]
    import fnmatch

    found = [h for h in model.hook_dict if fnmatch.fnmatchcase(h, spec)]
    if not found:
        raise ValueError(f"hook pattern {spec!r} matches no hook; valid hooks: {', '.join(hook_summary(model.hook_dict))}")
    return found


def _print_cache_summary(cache) -> None:
    m = cache.manifest
    print(f"cache {cache.path}: {cache.n_tokens('train'):,} train + {cache.n_tokens('heldout'):,} held-out tokens, "
          f"dtype {m['config']['dtype']}, {m.get('unknown_fraction', 0):.1%} of the corpus's tokens unknown to the tokenizer")
    for h in cache.hooks:
        s = cache.stats(h)
        print(f"  {h:<28} d={cache.d(h):<5} mean norm {s['mean_norm']:.2f}")


def _set_fields(cls, pairs: list[str], flags: dict[str, str]) -> dict:
    """--set FIELD=VALUE pairs -> keyword arguments for the dataclass `cls` (JSON values accepted; the
    config checks their types). Fields in `flags` have their own flag and are refused here."""
    import dataclasses

    fields = {f.name: f for f in dataclasses.fields(cls)}
    out = {}
    for pair in pairs:
        key, eq, raw = pair.partition("=")
        if key in flags:
            raise ValueError(f"--set {pair!r}: {key} has its own flag, use {flags[key]} instead")
        if not eq or key not in fields:
            raise ValueError(f"bad --set {pair!r}: expected FIELD=VALUE with FIELD one of "
                             f"{', '.join(f for f in fields if f not in flags)}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw  # plain strings need no quotes
    return out


def _sae_train(a: argparse.Namespace) -> None:
    from workbench import sae

    extra = _set_fields(sae.SAEConfig, a.set, {"architecture": "--arch", "k": "--k", "expansion": "--expansion",
                                               "scaffold_rank": "--scaffold-rank", "seed": "--seed"})
    cfgs = [sae.SAEConfig(architecture=arch, k=k, expansion=a.expansion, scaffold_rank=r, seed=seed, **extra)
            for arch in a.arch for k in a.k for r in a.scaffold_rank for seed in a.seed]
    train_cfg = sae.TrainConfig(n_tokens=a.tokens, batch_size=a.batch_size, lr=a.lr, checkpoint_every=a.checkpoint_every,
                                progress=not a.quiet)
    folders = sae.train(a.cache, a.hook, cfgs, train_cfg, a.out, resume=a.resume)
    for f in folders:
        print(f"saved {f}")


def _sae_eval(a: argparse.Namespace) -> None:
    from workbench import sae

    for folder in a.sae:
        m = sae.evaluate(folder, a.cache, None if a.no_model else a.model, max_tokens=a.tokens)
        flat = {**m["reconstruction"], **m.get("splice", {})}
        keys = [k for k in ("fvu", "l0", "block_l0", "dead_frac", "dense_frac", "ce_loss_recovered", "kl_score",
                            "ce_loss_recovered_no_scaffold") if k in flat]
        print(f"{folder}: " + ", ".join(f"{k} {flat[k]:.4g}" for k in keys) + "  (all metrics in metrics.json)")


def _demo(a: argparse.Namespace) -> None:
    from workbench.demo import run_demo

    run_demo(Path(a.workspace), overwrite=a.overwrite, progress=not a.quiet)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="workbench", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    quiet = argparse.ArgumentParser(add_help=False)
    quiet.add_argument("--quiet", action="store_true", help="no progress bars")

    model = sub.add_parser("model", help="train or inspect models").add_subparsers(dest="action", required=True, metavar="ACTION")
    t = model.add_parser("train", parents=[quiet], help="train the embedded model on the synthetic corpus (reproducible from --seed)")
    t.add_argument("--out", default="data/models/tiny", help="output folder (default: %(default)s, the embedded model)")
    t.add_argument("--steps", type=int, default=4000, help="optimizer steps (default: %(default)s)")
    t.add_argument("--batch-size", type=int, default=32, help="sequences of 64 tokens per step (default: %(default)s)")
    t.add_argument("--lr", type=float, default=1e-3, help="peak AdamW learning rate (default: %(default)s)")
    t.add_argument("--seed", type=int, default=0, help="seed for weights and data (default: %(default)s)")
    t.add_argument("--n-layers", type=int, default=4, help="transformer blocks (default: %(default)s)")
    t.add_argument("--d-model", type=int, default=128, help="residual width (default: %(default)s)")
    t.set_defaults(func=_model_train)
    i = model.add_parser("info", help="print a model's shape and hook names")
    i.add_argument("--model", default="tiny", help="'tiny', a saved model folder, or a TransformerLens name (default: %(default)s)")
    i.set_defaults(func=_model_info)

    c = sub.add_parser("cache", parents=[quiet], help="harvest activations of one or more hooks into an on-disk cache "
                       "(`cache verify DIR` checks every file of one against its checksums)")
    c.add_argument("action", nargs="?", choices=["verify"], help="verify DIR: recompute every checksum of a cache")
    c.add_argument("folder", nargs="?", help="the cache folder to verify")
    c.add_argument("--model", default="tiny", help="'tiny', a saved model folder, or a TransformerLens name (default: %(default)s)")
    c.add_argument("--corpus", default="synthetic",
                   help="'synthetic', 'synthetic:seed=N', comma-separated .txt/.jsonl/.parquet files, or hf:<dataset> (default: %(default)s)")
    c.add_argument("--hooks", nargs="+", default=["blocks.*.hook_resid_post"],
                   help="TransformerLens hook names; '*' expands over layers (default: %(default)s)")
    c.add_argument("--tokens", type=int, default=200_000, help="activation rows to store, train + held-out (default: %(default)s)")
    c.add_argument("--out", help="cache folder to create")
    c.add_argument("--dtype", default="float16", choices=["float32", "float16", "bfloat16"], help="storage dtype (default: %(default)s)")
    c.add_argument("--ctx-len", type=int, default=None, help="tokens per sequence (default: the model's n_ctx)")
    c.add_argument("--batch-size", type=int, default=64, help="sequences per forward pass (default: %(default)s)")
    c.add_argument("--heldout-fraction", type=float, default=0.05, help="share of sequences kept for evaluation (default: %(default)s)")
    c.add_argument("--shard-tokens", type=int, default=None, help="rows per shard, the unit of resume (default: ~1 GiB of activations)")
    c.add_argument("--outlier-factor", type=float, default=10.0,
                   help="flag rows whose norm exceeds this many times the median norm (default: %(default)s)")
    c.add_argument("--max-unknown-fraction", type=float, default=0.05,
                   help="stop when more of the corpus's tokens than this are unknown to the tokenizer; 1 = never "
                        "(default: %(default)s)")
    c.add_argument("--keep-special", action="store_true", help="also store BOS/EOS/pad positions (excluded by default)")
    c.add_argument("--seed", type=int, default=0, help="corpus seed (default: %(default)s)")
    g = c.add_mutually_exclusive_group()
    g.add_argument("--resume", action="store_true", help="continue an interrupted harvest in --out")
    g.add_argument("--overwrite", action="store_true", help="replace an existing cache in --out")
    c.set_defaults(func=_cache)

    sae_p = sub.add_parser("sae", help="train and evaluate sparse autoencoders").add_subparsers(dest="action", required=True, metavar="ACTION")
    st = sae_p.add_parser("train", parents=[quiet], help="train one or more SAEs on one hook of a cache (one shared batch stream)")
    st.add_argument("--cache", required=True, help="activation cache folder (from `workbench cache`)")
    st.add_argument("--hook", required=True, help="cached hook to train on, e.g. blocks.2.hook_resid_post")
    st.add_argument("--out", required=True, help="folder for the SAEs (one SAELens-format subfolder each) and checkpoints")
    st.add_argument("--arch", nargs="+", default=["topk"],
                    help=f"architectures: {' '.join(ARCHITECTURES)} (default: %(default)s)")
    st.add_argument("--k", nargs="+", type=int, default=[32], help="latents per token (one SAE per value; default: %(default)s)")
    st.add_argument("--expansion", type=int, default=8, help="n_latents = expansion x d_in (default: %(default)s)")
    st.add_argument("--scaffold-rank", nargs="+", type=int, default=[0], help="rank-r dense bottleneck beside the dictionary, 0 = none (default: %(default)s)")
    st.add_argument("--seed", nargs="+", type=int, default=[0], help="SAE init seeds (default: %(default)s)")
    st.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE",
                    help="any other SAEConfig field for every SAE, e.g. block_size=4 reg_l1_l2=0.01 prefixes=[64,256,1024]")
    st.add_argument("--tokens", type=int, default=2_000_000, help="training tokens (default: %(default)s)")
    st.add_argument("--batch-size", type=int, default=4096, help="tokens per step (default: %(default)s)")
    st.add_argument("--lr", type=float, default=3e-4, help="peak Adam learning rate (default: %(default)s)")
    st.add_argument("--checkpoint-every", type=int, default=500, help="steps between checkpoints (default: %(default)s)")
    st.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    st.set_defaults(func=_sae_train)
    se = sae_p.add_parser("eval", help="evaluate saved SAEs on the cache's held-out split (writes metrics.json)")
    se.add_argument("sae", nargs="+", help="SAE folders")
    se.add_argument("--cache", required=True, help="activation cache folder holding the SAE's hook")
    se.add_argument("--model", default="tiny", help="model for the spliced CE/KL metrics (default: %(default)s)")
    se.add_argument("--no-model", action="store_true", help="skip the metrics that run the model")
    se.add_argument("--tokens", type=int, default=20_000, help="held-out tokens to evaluate on (default: %(default)s)")
    se.set_defaults(func=_sae_eval)

    from workbench.circuits.cli import add_commands as add_circuit_commands

    add_circuit_commands(sub)

    d = sub.add_parser("demo", parents=[quiet], help="run the whole workbench on the embedded model into a workspace")
    d.add_argument("--workspace", default="workspace", help="output folder (default: %(default)s)")
    d.add_argument("--overwrite", action="store_true", help="replace an existing workspace")
    d.set_defaults(func=_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except USER_ERRORS as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"workbench {args.command}: error: {msg}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
