"""Word-level tokenizer for the embedded model.

One word is one token, so task answers (names, numbers, cities) are single tokens and the corpus's
per-word labels line up with tokens exactly. Wrapped as a Hugging Face PreTrainedTokenizerFast so
TransformerLens (to_tokens, to_single_token, to_str_tokens) treats it like any other tokenizer.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

SPECIALS = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"}


def build_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate(SPECIALS.values())}
    for w in words:
        vocab.setdefault(w, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=SPECIALS["unk_token"]))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with single spaces
    # add_bos_token tells TransformerLens the BOS handling is settled (it would otherwise reload the
    # tokenizer by name from the Hub); with it, encode() prepends <bos> itself.
    return PreTrainedTokenizerFast(tokenizer_object=core, add_bos_token=True, name_or_path="workbench-tiny", **SPECIALS)
