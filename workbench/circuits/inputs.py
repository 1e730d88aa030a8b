"""Turn (prompt, answer[, counterfactual]) into checked token ids.

Everything downstream works on token ids, so a model without a tokenizer works too: pass token-id
lists (or 1-D tensors) for prompts and ints for answers.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from workbench.errors import UserError

Text = str | Sequence[int] | torch.Tensor


class QueryError(UserError, ValueError):
    """A query the circuit finder cannot work with (multi-token answer, prompt too long, ...)."""


@dataclass
class QueryInput:
    """One tokenised query. tokens/cf_tokens are 1-D long tensors; positions are predicted at the last token."""

    tokens: torch.Tensor
    answer: int
    wrong: int | None = None
    cf_tokens: torch.Tensor | None = None
    prompt: str | None = None
    counterfactual: str | None = None
    answer_str: str | None = None
    wrong_str: str | None = None

    def to_dict(self) -> dict:
        return dict(
            prompt=self.prompt,
            tokens=self.tokens.tolist(),
            answer=self.answer_str,
            answer_id=self.answer,
            wrong=self.wrong_str,
            wrong_id=self.wrong,
            counterfactual=self.counterfactual,
            counterfactual_tokens=None if self.cf_tokens is None else self.cf_tokens.tolist(),
        )


def _str_tokens(model, ids: list[int]) -> list[str]:
    tok = getattr(model, "tokenizer", None)
    return [str(i) for i in ids] if tok is None else [tok.decode([i]) for i in ids]


def _unknown_words(tok, text: str) -> list[str]:
    """Words of `text` that the tokenizer can only encode as its unknown token (word-level vocabularies)."""
    unk = getattr(tok, "unk_token_id", None)
    if unk is None:
        return []
    pre = getattr(getattr(tok, "backend_tokenizer", None), "pre_tokenizer", None)
    words = [w for w, _ in pre.pre_tokenize_str(text)] if pre is not None else text.split()
    return [w for w in dict.fromkeys(words) if w != tok.unk_token and unk in tok.encode(w, add_special_tokens=False)]


def _unknown_error(tok, words: list[str], what: str) -> QueryError:
    vocab = [w for w in tok.get_vocab() if w not in tok.all_special_tokens]
    hints = []
    for w in words[:5]:
        close = difflib.get_close_matches(w, vocab, n=3, cutoff=0.5)
        hints.append(f"{w!r} (did you mean {', '.join(map(repr, close))}?)" if close else repr(w))
    return QueryError(
        f"the {what} has {len(words)} word(s) outside the model's vocabulary, which would silently "
        f"become {tok.unk_token}: {', '.join(hints)}; use words the model knows "
        f"(its vocabulary has {len(vocab)} words, e.g. {', '.join(vocab[:: max(1, len(vocab) // 6)][:6])})"
    )


def tokens_of(model, text: Text, what: str = "prompt") -> torch.Tensor:
    """A prompt as token ids, refused in one line when it would be changed silently or mean nothing: no text (the
    model would read its start token alone), a word outside a word-level vocabulary (named, with suggestions),
    more tokens than the context, ids outside the vocabulary. Every prompt the workbench reads comes through here."""
    if isinstance(text, str):
        if not text.strip():
            raise QueryError(
                f"the {what} {text!r} is empty: the model would read its start token alone; give the {what}'s text"
            )
        if getattr(model, "tokenizer", None) is None:
            raise QueryError(f"the model has no tokenizer, so the {what} must be a list of token ids, got {text!r}")
        unknown = _unknown_words(model.tokenizer, text)
        if unknown:
            raise _unknown_error(model.tokenizer, unknown, what)
        ids = model.to_tokens(text, truncate=False)[0].cpu()
    else:
        ids = torch.as_tensor(text, dtype=torch.long).flatten().cpu()
    if ids.numel() == 0:
        raise QueryError(f"the {what} is empty")
    n_ctx = model.cfg.n_ctx
    if ids.numel() > n_ctx:
        raise QueryError(f"the {what} has {ids.numel()} tokens but the model's context is {n_ctx} tokens")
    if ids.max() >= model.cfg.d_vocab or ids.min() < 0:
        raise QueryError(f"the {what} has token ids outside the vocabulary [0, {model.cfg.d_vocab})")
    return ids


def single_token(model, answer: str | int, what: str = "answer") -> int:
    """The token id of an answer, or a QueryError naming the tokens it splits into."""
    if isinstance(answer, int):
        if not 0 <= answer < model.cfg.d_vocab:
            raise QueryError(f"the {what} token id {answer} is outside the vocabulary [0, {model.cfg.d_vocab})")
        return answer
    if getattr(model, "tokenizer", None) is None:
        raise QueryError(f"the model has no tokenizer, so the {what} must be a token id, got {answer!r}")
    ids = model.to_tokens(answer, prepend_bos=False)[0].tolist()
    if len(ids) != 1:
        raise QueryError(
            f"the {what} {answer!r} is not a single token: it splits into {len(ids)} tokens "
            f"{_str_tokens(model, ids)}; pass one token (e.g. {_str_tokens(model, ids)[0]!r})"
        )
    unk = getattr(model.tokenizer, "unk_token_id", None)
    if unk is not None and ids[0] == unk and answer != model.tokenizer.unk_token:
        raise _unknown_error(model.tokenizer, [answer], what)
    return ids[0]


def prepare(
    model, prompt: Text, answer: str | int, counterfactual: Text | None = None, wrong: str | int | None = None
) -> QueryInput:
    tokens = tokens_of(model, prompt, "prompt")
    cf = None if counterfactual is None else tokens_of(model, counterfactual, "counterfactual")
    a = single_token(model, answer)
    w = None if wrong is None else single_token(model, wrong, "wrong answer")
    if w is not None and w == a:
        raise QueryError(f"the wrong answer {wrong!r} is the same token as the answer {answer!r}")
    return QueryInput(
        tokens,
        a,
        w,
        cf,
        prompt if isinstance(prompt, str) else None,
        counterfactual if isinstance(counterfactual, str) else None,
        _str_tokens(model, [a])[0],
        None if w is None else _str_tokens(model, [w])[0],
    )


def str_tokens(model, tokens: torch.Tensor) -> list[str]:
    return _str_tokens(model, tokens.tolist())


def align(clean_len: int, cf_len: int, anchor_first: bool) -> torch.Tensor:
    """For each clean position, the counterfactual position it is compared with (-1: none).

    Prompts are right-aligned on the answer (last) position, because that is where the metric is
    read; when both start with the same token (BOS), position 0 is also anchored to position 0.
    Clean positions with no counterpart keep their clean activations (no intervention there);
    extra leading counterfactual tokens are dropped.
    """
    offset = cf_len - clean_len
    idx = torch.arange(clean_len) + offset
    lo = 1 if anchor_first else 0
    idx[(idx < lo)] = -1
    if anchor_first:
        idx[0] = 0
    return idx
