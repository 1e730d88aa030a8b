"""`workbench features build`: feature stores for saved SAEs from one pass over a cache."""

from __future__ import annotations

import argparse

from workbench.cli.options import add_device_flag, add_model_flag, chosen_device, quiet_flag, workspace_flag
from workbench.configflags import add_config_flags, config_values, count
from workbench.dictionaries.kinds import SAE
from workbench.errors import BadValueError
from workbench.features.config import FeatureConfig
from workbench.features.explain import SCORERS, ExplainConfig
from workbench.guard import FILE, INPUT, declare, in_place
from workbench.workspace import Workspace

PREFIX = "features."  # namespace prefix of the FeatureConfig flags
EXPLAIN = "explain."  # and of the ExplainConfig flags


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
        in_place(SAE.workspace),  # the store is built beside the SAE
    )
    declare(b.add_argument("--cache", required=True, help="activation cache holding the SAEs' hook(s)"), INPUT)
    add_model_flag(b, help="the model the cache came from, for logit effects and token text (default: %(default)s)")
    add_config_flags(b, FeatureConfig, PREFIX)
    b.add_argument("--overwrite", action="store_true", help="rebuild a finished or unfinished store from scratch")
    add_device_flag(b)
    b.set_defaults(func=_build)
    _add_explain(features)
    _add_search(features)


def _latents(text: str) -> int | None:
    if text == "all":
        return None
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"--latents {text!r}: give a count >= 1 or 'all'")
    return n


def _add_explain(features) -> None:
    e = features.add_parser(
        "explain",
        parents=[workspace_flag("that recorded the stores (their records then list the explanations)"), quiet_flag()],
        help="explanations of each store's latents (template, or --explainer openai), scored (detection, fuzzing, "
        "intervention), saved in it",
    )
    declare(e.add_argument("store", nargs="+", help="feature stores (or the SAE folders holding them)"), INPUT)
    e.add_argument(
        "--scorers",
        nargs="+",
        choices=SCORERS,
        default=["detection", "fuzz"],
        help="scorers run (default: %(default)s)",
    )
    e.add_argument("--latents", type=_latents, default=None, help="the first N latents, or all (default: all)")
    declare(e.add_argument("--out", help="also write one JSON line per latent here (one store only)"), FILE)
    add_model_flag(e, help="the store's model, for the intervention scorer (default: %(default)s)")
    add_config_flags(e, ExplainConfig, EXPLAIN)
    e.add_argument("--overwrite", action="store_true", help="make finished or unfinished explanations again")
    add_device_flag(e)
    e.set_defaults(func=_explain)


def _explain(a: argparse.Namespace) -> None:
    from workbench.features.explanations import load_explanations, summary
    from workbench.features.store import FeatureStore
    from workbench.steps.features import explain_features

    if a.out and len(a.store) > 1:
        raise BadValueError(f"--out takes the lines of one store, got {len(a.store)} stores; run one at a time")
    cfg = ExplainConfig(**config_values(a, ExplainConfig, EXPLAIN))
    for path in a.store:
        [folder] = explain_features(
            Workspace(a.workspace),
            [path],
            cfg,
            a.scorers,
            a.latents,
            out=a.out,
            overwrite=a.overwrite,
            progress=not a.quiet,
            model=a.model,
            device=chosen_device(a),
        )
        manifest, _ = load_explanations(FeatureStore(path))
        said = summary(FeatureStore(path))
        auc = said["mean_detection_auc"]
        mean = f", mean detection AUC {auc:.3f} over {said['scored']} scored" if auc is not None else ""
        u = manifest.get("usage")
        used = (
            f"; {u['calls']} requests ({u['cached']} answered from the cache), {u['prompt_tokens']:,} prompt + "
            f"{u['completion_tokens']:,} completion tokens"
            if u
            else ""
        )
        print(
            f"saved {folder}: {said['latents']} {manifest['explainer']} explanations{mean}{used}"
            + (f"; lines in {a.out}" if a.out else "")
        )


def _add_search(features) -> None:
    s = features.add_parser("search", help="latents whose explanation contains every word of TEXT")
    s.add_argument("text", help="words to find in the explanations (case-insensitive)")
    declare(s.add_argument("--store", required=True, help="a feature store holding explanations"), INPUT)
    s.add_argument("--top", type=count(1), default=20, help="hits shown (default: %(default)s)")
    s.set_defaults(func=_search)


def _search(a: argparse.Namespace) -> None:
    from workbench.features.explanations import search
    from workbench.features.store import FeatureStore

    hits = search(FeatureStore(a.store), a.text, a.top)
    if not hits:
        print(f"no explanation contains {a.text!r}")
    for h in hits:
        auc = "n/a" if h["auc"] is None else f"{h['auc']:.3f}"
        print(f"latent {h['latent']}  detection AUC {auc}  {h['explanation']}")


def _build(a: argparse.Namespace) -> None:
    from workbench.steps.features import build_features

    cfg = FeatureConfig(**config_values(a, FeatureConfig, PREFIX))
    for store in build_features(
        Workspace(a.workspace),
        a.sae,
        a.cache,
        a.model,
        cfg,
        overwrite=a.overwrite,
        progress=not a.quiet,
        device=chosen_device(a),
    ):
        m = store.manifest
        dead = int((store.units["count"] == 0).sum())
        print(
            f"saved {store.path}: {store.n_units} {m['unit']}s over {m['n_rows']:,} {m['split']} tokens, "
            f"{dead} never fired, {m['seconds']} s"
        )
