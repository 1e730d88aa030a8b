"""A small random-init model of the embedded model's kind (real tokenizer, real synthetic corpus),
saved once so subprocesses load the very same weights, and one clean cache to compare against."""

import pytest

from workbench.cache import harvest
from workbench.corpus import SyntheticCorpus
from workbench.models import load, save
from workbench.models.toy import TinyConfig, build

HOOKS = ("blocks.0.hook_resid_post", "blocks.1.hook_resid_post", "blocks.0.hook_mlp_out")
# 3000 rows in shards of >= 500 rows, 8 sequences of 32 tokens per forward: several shards per split.
BASE = dict(n_tokens=3000, batch_size=8, shard_tokens=500, heldout_fraction=0.1, progress=False)


@pytest.fixture(scope="session")
def hooks():
    return HOOKS


@pytest.fixture(scope="session")
def base():
    return dict(BASE)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory, tokenizer):
    model = build(TinyConfig(n_layers=2, d_model=64, n_heads=2, d_mlp=128, n_ctx=32, seed=0), tokenizer)
    return save(model, tmp_path_factory.mktemp("model") / "small")


@pytest.fixture(scope="session")
def model(model_dir):
    return load(str(model_dir), device="cpu")[0]


@pytest.fixture(scope="session")
def corpus(model):
    return SyntheticCorpus(model.tokenizer, seed=0)


@pytest.fixture(scope="session")
def clean(tmp_path_factory, model, corpus):
    """The reference: an uninterrupted harvest with BASE settings."""
    return harvest(model, corpus, HOOKS, tmp_path_factory.mktemp("clean") / "cache", **BASE)


@pytest.fixture(scope="session")
def same_cache():
    def check(a, b) -> None:
        """Equal shard layouts, per-file checksums and stats mean byte-identical caches."""
        assert a.manifest["shards"] == b.manifest["shards"]
        assert a.manifest["stats"] == b.manifest["stats"]
        assert a.manifest["config"] == b.manifest["config"]
        a.verify()
        b.verify()

    return check
