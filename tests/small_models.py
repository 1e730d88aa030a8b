"""Small random HookedTransformers for fast tests: the corpus tokenizer (or bare token ids, vocabulary
50) on 2 layers; keywords override any HookedTransformerConfig field."""

import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

# grouped-query attention (2 key/value heads) with RMSNorm, rotary positions and a gated MLP: the
# non-GPT-2 code paths the circuit graph and the attention gates must handle
GQA = dict(
    n_key_value_heads=2,
    normalization_type="RMS",
    positional_embedding_type="rotary",
    rotary_dim=8,
    act_fn="silu",
    gated_mlp=True,
)

# the architectures the loader accepts beyond the embedded model's (LayerNorm, rotary): every command
# must work on each (tests/test_model_variants.py)
VARIANTS = {
    "no_layernorm": dict(normalization_type=None),
    "gqa": GQA,
    "learned_positions": dict(positional_embedding_type="standard"),
}


def small_model(tokenizer=None, seed=0, **kw) -> HookedTransformer:
    cfg = dict(
        n_layers=2,
        d_model=32,
        n_heads=2,
        d_head=16,
        d_mlp=64,
        n_ctx=64,
        act_fn="gelu",
        normalization_type="LN",
        seed=seed,
        device="cpu",
        model_name="test-model",
        d_vocab=len(tokenizer) if tokenizer is not None else 50,
    )
    cfg.update(kw)
    if tokenizer is not None:
        cfg.update(tokenizer_prepends_bos=False, default_prepend_bos=True)
    torch.manual_seed(seed)
    model = HookedTransformer(HookedTransformerConfig(**cfg), tokenizer=tokenizer)
    model.eval()
    return model
