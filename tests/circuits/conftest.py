"""Small random models for the circuit tests: the real tokenizer on a 2-layer model (fast), the
tiny shape for exactness checks, and a grouped-query-attention config with RMSNorm and rotary."""

import pytest
from small_models import GQA, small_model

from workbench.corpus import tasks


def _model(tokenizer=None, seed=0, **kw):
    return small_model(tokenizer, seed, **{"model_name": "test-circuits", **kw})


@pytest.fixture(scope="session")
def small(tokenizer):
    """2 layers, 2 heads, the corpus tokenizer: fast end-to-end search tests."""
    return _model(tokenizer, seed=1)


@pytest.fixture(scope="session")
def tiny_shape(tokenizer):
    """The embedded model's shape with random weights (4 layers, d_model 128, 4 heads)."""
    return _model(tokenizer, seed=0, n_layers=4, d_model=128, n_heads=4, d_head=32, d_mlp=512)


@pytest.fixture(scope="session")
def gqa():
    """Grouped-query attention (4 query heads, 2 KV heads), RMSNorm, rotary, gated MLP; token ids only."""
    return _model(
        None,
        seed=2,
        n_layers=3,
        d_model=32,
        n_heads=4,
        d_head=8,
        **GQA,
        d_vocab=40,
        n_ctx=16,
    )


@pytest.fixture(scope="session")
def ioi(tokenizer):
    return tasks.queries("ioi", 3, seed=0, tokenizer=tokenizer)


@pytest.fixture(scope="session")
def attn_only():
    return _model(None, seed=3, attn_only=True, d_vocab=40, n_ctx=16)


@pytest.fixture(scope="session")
def parallel():
    """GPT-J style: attention and MLP read the same residual (parallel_attn_mlp)."""
    return _model(
        None, seed=4, parallel_attn_mlp=True, d_vocab=40, n_ctx=16, positional_embedding_type="rotary", rotary_dim=8
    )


def _train_set(spec, model, root):
    """A transcoder set on every layer of a model, trained briefly on a small cache of it."""
    from workbench import steps
    from workbench.cache.config import HarvestConfig
    from workbench.sae.config import SAEConfig, TrainConfig
    from workbench.sae.transcoders import train_set
    from workbench.workspace import Workspace

    cfg = HarvestConfig(n_tokens=6000, heldout_fraction=0.2)
    steps.make_cache(
        Workspace(root / "ws"), spec, "synthetic", None, cfg, out=root / "cache", progress=False, model=model
    )
    train = TrainConfig(n_tokens=512 * 12, batch_size=512, lr=3e-3, warmup_steps=2, progress=False)
    folder, _ = train_set(root / "cache", "all", [SAEConfig("topk", k=8, expansion=4)], train, root / "set")
    return folder


@pytest.fixture(scope="session")
def tiny_set(tiny, tmp_path_factory):
    """A transcoder set of the embedded model."""
    return _train_set("tiny", tiny[0], tmp_path_factory.mktemp("tiny_set"))


SPARSE = "tiny-sparse"


@pytest.fixture(scope="session")
def tiny_sparse():
    from workbench.models import load

    return load(SPARSE, device="cpu")


@pytest.fixture(scope="session")
def sparse_set(tiny_sparse, tmp_path_factory):
    """A transcoder set of the embedded sparse-attention model."""
    return _train_set(SPARSE, tiny_sparse[0], tmp_path_factory.mktemp("sparse_set"))
