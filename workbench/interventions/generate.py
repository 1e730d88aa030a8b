"""Continuations of a prompt, clean and intervened, side by side in one batch: greedy, or sampled with one seed per
row (each row draws as it would alone, so what differs between rows is the intervention's doing, not the draw).

The prompt runs once; each later step runs only the new token against a key/value cache (TransformerLens's), and
the hooks are entered once per continuation, not once per token. Hooks that act by position read `Span.start`:
where the tokens of the running forward begin in the sequence (0 for the prompt, then the prompt's length plus the
tokens generated so far). `kv_cache=False` re-runs the whole sequence each step instead: what the cached
continuation is tested against.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

from workbench.cache.hooks import mlp_in_hooks


@dataclass
class Span:
    """Where the tokens of the forward running now start in the sequence (set by `rollout`; 0 outside it)."""

    start: int = 0


@dataclass
class Rollout:
    """A batch's prompt logits [rows, P, d_vocab], each row's generated tokens, and the logits each was chosen
    from [rows, generated, d_vocab]."""

    prompt: torch.Tensor
    tokens: list[list[int]]
    logits: torch.Tensor


@torch.no_grad()
def forward(model, tokens: torch.Tensor, hooks: list, reads=(), rows: int | None = None) -> torch.Tensor:
    """[len(tokens), d_vocab] logits of one sequence with `hooks` on (reads: hook names that need hook_mlp_in);
    rows: [rows, len(tokens), d_vocab], the sequence repeated over a batch (hooks that act per row)."""
    batch = tokens[None].expand(rows or 1, -1).to(model.cfg.device)
    with mlp_in_hooks(model, reads), model.hooks(fwd_hooks=hooks):
        logits = model(batch).float()
    return logits if rows else logits[0]


@torch.no_grad()
def rollout(
    model,
    tokens: torch.Tensor,
    n: int,
    hooks: list,
    reads=(),
    span: Span | None = None,
    rows: int = 1,
    sample: bool = False,
    seed: int = 0,
    temp: float = 1.0,
    kv_cache: bool = True,
    prompt_hooks=(),
) -> Rollout:
    """`rows` copies of the prompt `tokens` run with `hooks` on (which tell the rows apart), then n tokens (fewer at
    the model's context length) generated after each. `prompt_hooks` (first at each hook point) act on prompt
    positions only, so the cached steps run without them."""
    span = span or Span()
    gens = [torch.Generator().manual_seed(seed) for _ in range(rows)]
    seq = tokens.reshape(1, -1).cpu().expand(rows, -1)
    P = seq.shape[1]
    past = TransformerLensKeyValueCache.init_cache(model.cfg, model.cfg.device, rows) if kv_cache else None
    steps = []
    every = [*prompt_hooks, *hooks]
    with mlp_in_hooks(model, reads), model.hooks(fwd_hooks=every):
        span.start = 0
        logits = prompt = _forward(model, seq, past)
        if kv_cache and prompt_hooks and n:  # from here on each step's hooks are `hooks` alone
            model.reset_hooks(clear_contexts=False, level=model.context_level)
            for name, hook in hooks:
                model.add_hook(name, hook, level=model.context_level)
        for t in range(n):
            if seq.shape[1] >= model.cfg.n_ctx:
                break
            last = logits[:, -1].cpu()
            nxt = _draw(last, sample, temp, gens)
            steps.append(last)
            seq = torch.cat([seq, nxt], 1)
            if t + 1 < n and seq.shape[1] < model.cfg.n_ctx:  # the next step's logits
                span.start = seq.shape[1] - 1 if kv_cache else 0
                logits = _forward(model, nxt if kv_cache else seq, past)
    span.start = 0
    gen = seq[:, P:]
    logits = torch.stack(steps, 1) if steps else torch.zeros(rows, 0, prompt.shape[-1])
    return Rollout(prompt, [r.tolist() for r in gen], logits)


def _forward(model, tokens: torch.Tensor, past) -> torch.Tensor:
    """[rows, len, d_vocab] logits of the new `tokens` after those in the cache `past` (None: no cache). With a
    cache the embedding is made here and the blocks run from it, with no attention mask: every token is attended
    (TransformerLens would otherwise make a mask from the tokenizer, masking trailing pad tokens, a generated
    end-of-text token, GPT-2's pad), and an all-ones mask would only add per-layer work (its positions, its masking)
    for the same numbers. The embedding's hooks run as in TransformerLens's own forward."""
    tokens = tokens.to(model.cfg.device)
    if past is None:
        return model(tokens).float()
    if model.cfg.use_hook_tokens:
        tokens = model.hook_tokens(tokens)
    embed = model.hook_embed(model.embed(tokens))
    offset = model.get_pos_offset(past, tokens.shape[0])
    residual, short = model.get_residual(embed, offset, tokens=tokens, return_shortformer_pos_embed=True)
    return model(residual, start_at_layer=0, past_kv_cache=past, shortformer_pos_embed=short).float()


def _draw(logits: torch.Tensor, sample: bool, temp: float, gens: list) -> torch.Tensor:
    """[rows, 1]: each row's next token from its logits [rows, d_vocab], greedy or drawn with that row's generator."""
    if not sample:
        return logits.argmax(-1, keepdim=True)
    probs = (logits / temp).softmax(-1)
    return torch.stack([torch.multinomial(p, 1, generator=g) for p, g in zip(probs, gens)])


def continuation(
    model, tokens: torch.Tensor, n: int, hooks: list, reads=(), sample: bool = False, seed: int = 0, temp: float = 1.0
) -> list[int]:
    """The n tokens (fewer at the model's context length) generated after `tokens` with `hooks` on (hooks that act
    by position need the engine's rollout, which tells them where each step's tokens start)."""
    return rollout(model, tokens, n, hooks, reads, sample=sample, seed=seed, temp=temp).tokens[0]
