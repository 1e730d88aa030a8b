"""Shared fixtures: a deterministic stream of activations built from known sparse features."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

D_IN = 32


def feature_batches(
    start: int = 0,
    rank: int = 0,
    world: int = 1,
    batch: int = 128,
    d: int = D_IN,
    n_features: int = 64,
    density: float = 0.05,
):
    """Batch i depends only on (i, rank): sparse non-negative codes over fixed random features + an offset."""
    feats = torch.randn(n_features, d, generator=torch.Generator().manual_seed(123))
    i = start
    while True:
        g = torch.Generator().manual_seed(i * 7919 + rank)
        codes = (torch.rand(batch, n_features, generator=g) < density) * torch.rand(batch, n_features, generator=g) * 3
        yield codes @ feats + 2.0 + 0.05 * torch.randn(batch, d, generator=g)
        i += 1


@pytest.fixture
def batches():
    return feature_batches


HOOK = "blocks.2.hook_resid_post"


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory) -> tuple[Path, Path]:
    """(cache, model folder): a random-init model of the embedded model's shape, saved, plus a small
    cache of its middle-layer residual stream over the synthetic corpus. Random weights keep the
    tests independent of the trained embedded model."""
    from workbench.cache import harvest
    from workbench.corpus import load_corpus
    from workbench.corpus.vocab import vocabulary
    from workbench.models import save
    from workbench.models.tokenizer import build_tokenizer
    from workbench.models.toy import TinyConfig, build

    root = tmp_path_factory.mktemp("tiny")
    tok = build_tokenizer(vocabulary())
    model = build(TinyConfig(), tok)
    save(model, root / "model")
    harvest(model, load_corpus("synthetic", tok), [HOOK], root / "cache", 6000, heldout_fraction=0.1, progress=False)
    return root / "cache", root / "model"


@pytest.fixture(scope="session")
def tc_cache(tmp_path_factory):
    """(cache, model folder): a random-init model of the embedded shape and a cache with the default hooks (every
    residual stream, each MLP's input and output)."""
    from workbench.cache.config import HarvestConfig
    from workbench.corpus.vocab import vocabulary
    from workbench.models import save
    from workbench.models.tokenizer import build_tokenizer
    from workbench.models.toy import TinyConfig, build
    from workbench.steps.cache import make_cache
    from workbench.workspace import Workspace

    root = tmp_path_factory.mktemp("tc")
    model = build(TinyConfig(), build_tokenizer(vocabulary()))
    save(model, root / "model")
    ws = Workspace(root / "ws")
    cfg = HarvestConfig(n_tokens=5000, heldout_fraction=0.2)
    cache = make_cache(ws, str(root / "model"), "synthetic", None, cfg, out=root / "cache", progress=False, model=model)
    assert {"blocks.1.ln2.hook_normalized", "blocks.1.hook_mlp_out", "blocks.3.hook_resid_post"} <= set(
        cache.hooks
    ) and cache.manifest["n_layers"] == 4
    return root / "cache", root / "model"
