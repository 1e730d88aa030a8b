"""`workbench features build`: feature stores for saved SAEs from one pass over a cache."""

from __future__ import annotations

import argparse


def _build(a: argparse.Namespace) -> None:
    from workbench.features.build import build_stores
    from workbench.features.config import FeatureConfig

    cfg = FeatureConfig(split=a.split, n_tokens=a.tokens, n_top=a.n_top, chunk_rows=a.chunk_rows)
    for path in build_stores(a.sae, a.cache, a.model, cfg, overwrite=a.overwrite, progress=not a.quiet):
        from workbench.features.store import FeatureStore

        s = FeatureStore(path)
        dead = int((s.units["count"] == 0).sum())
        print(f"saved {path}: {s.n_units} {s.manifest['unit']}s over {s.manifest['n_rows']:,} {s.manifest['split']} tokens, "
              f"{dead} never fired, {s.manifest['seconds']} s")


def add_commands(sub) -> None:
    f = sub.add_parser("features", help="feature stores: top contexts, histograms, logit effects, neighbours, labels")
    fs = f.add_subparsers(dest="action", required=True, metavar="ACTION")
    b = fs.add_parser("build", help="build (or resume) the feature store beside each SAE; SAEs on one hook share one pass")
    b.add_argument("sae", nargs="+", help="SAE folders (SAELens format, as `workbench sae train` saves them)")
    b.add_argument("--cache", required=True, help="activation cache holding the SAEs' hook(s)")
    b.add_argument("--model", default="tiny", help="the model the cache came from, for logit effects and token text (default: %(default)s)")
    b.add_argument("--split", default="heldout", choices=["heldout", "train"], help="cache split to read (default: %(default)s)")
    b.add_argument("--tokens", type=int, default=None, help="rows of the split to read (default: all)")
    b.add_argument("--n-top", type=int, default=20, help="top activating examples per unit (default: %(default)s)")
    b.add_argument("--chunk-rows", type=int, default=16384, help="rows per resumable chunk (default: %(default)s)")
    b.add_argument("--overwrite", action="store_true", help="rebuild a finished or unfinished store from scratch")
    b.add_argument("--quiet", action="store_true", help="no progress bars")
    b.set_defaults(func=_build)
