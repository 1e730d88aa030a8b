"""`workbench features build`: feature stores for saved SAEs from one pass over a cache."""

from __future__ import annotations

import argparse

from workbench.cli.options import add_model_flag, quiet_flag, workspace_flag
from workbench.configflags import add_config_flags, config_values
from workbench.features.config import FeatureConfig
from workbench.guard import INPUT, declare, in_place
from workbench.workspace import Workspace

PREFIX = "features."  # namespace prefix of the FeatureConfig flags


def add_parser(sub) -> None:
    f = sub.add_parser("features", help="feature stores: top contexts, histograms, logit effects, neighbours, labels")
    features = f.add_subparsers(dest="action", required=True, metavar="ACTION")
    b = features.add_parser(
        "build",
        parents=[workspace_flag(), quiet_flag()],
        help="build (or resume) the feature store beside each SAE; SAEs on one hook share one pass",
    )
    declare(
        b.add_argument("sae", nargs="+", help="SAE folders (SAELens format, as `workbench sae train` saves them)"),
        in_place("saes"),  # the store is built beside the SAE
    )
    declare(b.add_argument("--cache", required=True, help="activation cache holding the SAEs' hook(s)"), INPUT)
    add_model_flag(b, help="the model the cache came from, for logit effects and token text (default: %(default)s)")
    add_config_flags(b, FeatureConfig, PREFIX)
    b.add_argument("--overwrite", action="store_true", help="rebuild a finished or unfinished store from scratch")
    b.set_defaults(func=_build)


def _build(a: argparse.Namespace) -> None:
    from workbench import steps

    cfg = FeatureConfig(**config_values(a, FeatureConfig, PREFIX))
    for store in steps.build_features(
        Workspace(a.workspace), a.sae, a.cache, a.model, cfg, overwrite=a.overwrite, progress=not a.quiet
    ):
        m = store.manifest
        dead = int((store.units["count"] == 0).sum())
        print(
            f"saved {store.path}: {store.n_units} {m['unit']}s over {m['n_rows']:,} {m['split']} tokens, "
            f"{dead} never fired, {m['seconds']} s"
        )
