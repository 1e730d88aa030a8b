"""Small random HookedTransformers for the attention tests (the corpus tokenizer, seconds per test)."""

import pytest
from small_models import GQA, small_model


def build(tokenizer=None, seed=0, **kw):
    shape = dict(
        n_heads=4, d_head=8, n_ctx=24, model_name="test-attention", **({"d_vocab": 40} if tokenizer is None else {})
    )
    return small_model(tokenizer, seed, **{**shape, **kw})


@pytest.fixture
def small(tokenizer):
    return build(tokenizer, seed=1)


@pytest.fixture
def gqa():
    """Grouped-query attention: 4 query heads share 2 key/value heads; RMSNorm, rotary."""
    return build(None, seed=2, **GQA)


@pytest.fixture(scope="session")
def small_dir(tokenizer, tmp_path_factory):
    """A saved small model folder: a base-model spec for sparsify runs."""
    from workbench.models import save

    return str(save(build(tokenizer, seed=3), tmp_path_factory.mktemp("base") / "small"))
