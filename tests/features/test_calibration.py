"""The scorers' calibration on the embedded model and its corpus: a latent's true planted label must score above a
label shuffled from another latent and above a random label of its kind, with intervals over latents."""

import pytest

from workbench.features.calibration import calibrate
from workbench.features.explain import ExplainConfig


@pytest.fixture(scope="module")
def tiny_store(tiny, tmp_path_factory):
    """A Top-k SAE of the embedded model trained briefly on a synthetic-corpus cache, and its feature store."""
    from workbench.cache.config import HarvestConfig
    from workbench.sae.config import SAEConfig, TrainConfig
    from workbench.steps.cache import make_cache
    from workbench.steps.dictionaries import train_saes
    from workbench.steps.features import build_features
    from workbench.workspace import Workspace

    model, _ = tiny
    ws = Workspace(tmp_path_factory.mktemp("calibration"))
    hook = "blocks.2.hook_resid_post"
    cfg = HarvestConfig(n_tokens=8000, heldout_fraction=0.5)
    cache = make_cache(ws, "tiny", "synthetic", [hook], cfg, progress=False, model=model)
    train = TrainConfig(n_tokens=20_000, batch_size=512, lr=1e-3, progress=False)
    (folder,) = train_saes(ws, cache.path, hook, [SAEConfig("topk", k=16, n_latents=256)], train, name="cal")
    build_features(ws, [folder], cache.path, "tiny", progress=False)
    return folder


def test_true_labels_outscore_shuffled_and_random_labels(tiny_store):
    got = calibrate(tiny_store, ExplainConfig(pool=1000), ("detection", "fuzz"), 60)
    assert got["n_latents"] == 60
    rows = {(r["scorer"], r["metric"], r["control"]): r for r in got["rows"]}
    for control in ("shuffled", "random"):
        for key in (("detection", "auc"), ("fuzz", "token_accuracy")):
            r = rows[(*key, control)]
            assert r["n"] >= 30 and r["difference"].lo > 0, (key, control, r)
    assert got["precise_latents"] == 0 or 0 <= got["named_share"] <= 1


def test_steering_raises_a_latents_own_promoted_tokens_more_than_random_ones(tiny_store):
    got = calibrate(tiny_store, ExplainConfig(steer_prompts=2), ("intervention",), 8, model="tiny")
    rows = {(r["metric"], r["control"]): r for r in got["rows"]}
    assert rows[("percentile", "random")]["difference"].lo > 0 and rows[("percentile", "random")]["n"] == 8
