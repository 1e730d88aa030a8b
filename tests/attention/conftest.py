"""Small random HookedTransformers for the attention tests (the corpus tokenizer, seconds per test)."""

import pytest
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig


def build(tokenizer=None, seed=0, **kw):
    cfg = dict(
        n_layers=2,
        d_model=32,
        n_heads=4,
        d_head=8,
        d_mlp=64,
        n_ctx=24,
        act_fn="gelu",
        normalization_type="LN",
        seed=seed,
        device="cpu",
        model_name="test-attention",
        d_vocab=len(tokenizer) if tokenizer is not None else 40,
    )
    cfg.update(kw)
    if tokenizer is not None:
        cfg.update(tokenizer_prepends_bos=False, default_prepend_bos=True)
    torch.manual_seed(seed)
    model = HookedTransformer(HookedTransformerConfig(**cfg), tokenizer=tokenizer)
    model.eval()
    return model


@pytest.fixture
def small(tokenizer):
    return build(tokenizer, seed=1)


@pytest.fixture
def gqa():
    """Grouped-query attention: 4 query heads share 2 key/value heads; RMSNorm, rotary."""
    return build(
        None,
        seed=2,
        n_key_value_heads=2,
        normalization_type="RMS",
        positional_embedding_type="rotary",
        rotary_dim=8,
        act_fn="silu",
        gated_mlp=True,
    )


@pytest.fixture(scope="session")
def small_dir(tokenizer, tmp_path_factory):
    """A saved small model folder: a base-model spec for sparsify runs."""
    from workbench.models import save

    return str(save(build(tokenizer, seed=3), tmp_path_factory.mktemp("base") / "small"))
