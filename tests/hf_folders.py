"""Small random Hugging Face model folders, as `transformers` saves them (`save_pretrained`), with a
word-level tokenizer over the synthetic corpus's words built locally with `tokenizers`: what a user's
own GPT-2, GPT-NeoX (Pythia), Llama, Gemma(-2), Mistral or Qwen2 looks like on disk, at test size."""

from pathlib import Path

import torch

from workbench.corpus.vocab import vocabulary
from workbench.models.tokenizer import build_tokenizer


def _configs(vocab: int) -> dict:
    from transformers import (
        Gemma2Config,
        GemmaConfig,
        GPT2Config,
        GPTNeoXConfig,
        LlamaConfig,
        MistralConfig,
        Qwen2Config,
    )

    small = dict(vocab_size=vocab, bos_token_id=0, eos_token_id=1, pad_token_id=2)
    gqa = dict(
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        **small,
    )
    return {
        "gpt2": GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=64, **small),
        "neox": GPTNeoXConfig(
            num_hidden_layers=2,
            hidden_size=32,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=64,
            rotary_pct=0.5,
            **small,
        ),
        "llama": LlamaConfig(**gqa),
        "gemma2": Gemma2Config(head_dim=8, sliding_window=8, query_pre_attn_scalar=8, **gqa),
        "gemma": GemmaConfig(head_dim=8, **gqa),
        "mistral": MistralConfig(**gqa),
        "qwen2": Qwen2Config(**gqa),
    }


ARCHITECTURES = ("gpt2", "neox", "llama", "gemma2")  # every command runs on each (tests/models/test_hf.py)
CONVERTED = (*ARCHITECTURES, "gemma", "mistral", "qwen2")  # checked against transformers' logits


def hf_folder(arch: str, out: Path, seed: int = 0) -> Path:
    """A random `arch` model (one of CONVERTED) and its tokenizer saved in `out`."""
    from transformers import AutoModelForCausalLM

    tok = build_tokenizer(vocabulary())
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(_configs(len(tok))[arch])
    with torch.no_grad():  # random norms and biases too, so a dropped weight cannot go unnoticed
        for name, p in model.named_parameters():
            if "norm" in name or "ln" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return Path(out)
