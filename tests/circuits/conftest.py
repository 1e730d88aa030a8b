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
