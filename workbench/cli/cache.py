"""`workbench cache [verify DIR]`: harvest activations of one or more hooks into an on-disk cache, or check one."""

from __future__ import annotations

import argparse

from workbench.cache.config import HarvestConfig
from workbench.cli.options import (
    CORPUS,
    add_device_flag,
    add_model_flag,
    add_resume_or_overwrite,
    add_text_field_flag,
    chosen_device,
    quiet_flag,
    workspace_flag,
)
from workbench.configflags import add_config_flags, config_values, count
from workbench.errors import BadValueError
from workbench.guard import INPUT, artifact, declare
from workbench.workspace import Workspace

PREFIX = "harvest."  # namespace prefix of the HarvestConfig flags


def add_parser(sub) -> None:
    c = sub.add_parser(
        "cache",
        parents=[quiet_flag(), workspace_flag(writes=lambda a: a.action != "verify")],
        help="harvest activations of one or more hooks into an on-disk cache "
        "(`cache verify DIR` checks every file of one against its checksums)",
    )
    c.add_argument("action", nargs="?", choices=["verify"], help="verify DIR: recompute every checksum of a cache")
    declare(c.add_argument("folder", nargs="?", help="the cache folder to verify"), INPUT)
    add_model_flag(c)
    corpus = c.add_argument(
        "--corpus",
        default="synthetic",
        help="'synthetic', 'synthetic:seed=N', comma-separated .txt/.jsonl/.parquet files or `datasets` save_to_disk folders, hf:<dataset>, or pydoc (the standard library's documentation: real English offline) (default: %(default)s)",
    )
    declare(corpus, CORPUS)
    add_text_field_flag(c)
    c.add_argument(
        "--hooks",
        nargs="+",
        help="TransformerLens hook names; '*' expands over layers (default: every layer's hook_resid_post, and "
        "each MLP's input (ln2.hook_normalized, or hook_mlp_in without LayerNorm) and hook_mlp_out, for transcoders)",
    )
    c.add_argument("--name", help="folder in <workspace>/caches (default: MODEL-CORPUS)")
    declare(c.add_argument("--out", help="cache folder instead of <workspace>/caches/NAME"), artifact("caches"))
    add_config_flags(c, HarvestConfig, PREFIX)
    c.add_argument("--seed", type=count(0), default=0, help="corpus seed (default: %(default)s)")
    add_resume_or_overwrite(
        c,
        resume="continue an interrupted harvest in the output folder",
        overwrite="replace an existing cache in the output folder",
    )
    add_device_flag(c)
    c.set_defaults(func=_run)


def _run(a: argparse.Namespace) -> None:
    if a.action == "verify":
        _verify(a.folder)
        return
    from workbench.steps.cache import make_cache

    cfg = HarvestConfig(**config_values(a, HarvestConfig, PREFIX))
    cache = make_cache(
        Workspace(a.workspace),
        a.model,
        a.corpus,
        a.hooks,
        cfg,
        out=a.out,
        name=a.name,
        corpus_seed=a.seed,
        text_field=a.text_field,
        device=chosen_device(a),
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


def _verify(folder: str | None) -> None:
    from workbench.cache.reader import ActivationCache

    if not folder:
        raise BadValueError("cache verify needs the cache folder: workbench cache verify DIR")
    n = ActivationCache.open(folder).verify()
    print(f"cache {folder}: all {n} files match their checksums and the manifest")
