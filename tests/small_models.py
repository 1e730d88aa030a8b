"""Small random HookedTransformers for fast tests: the corpus tokenizer (or bare token ids, vocabulary
50) on 2 layers; keywords override any HookedTransformerConfig field."""

import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig


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
