"""What each attention head attends to on a prompt: its patterns (the one place they are computed: circuit
evidence and through it the app, the attention report and the model card), the prompt's induction
targets, and the previous-token and induction scores that circuit reports and model cards quote.

Previous-token score of a head: mean attention from each position to the one before it.
Induction score: mean attention from a repeated token to the token that followed its previous occurrence (the
classic induction target), over the positions that have one.
"""

from __future__ import annotations

import torch


def patterns_from_cache(model, cache) -> torch.Tensor:
    """[n_layers, n_heads, pos, pos] attention patterns of the first prompt of a run cached with hook_pattern."""
    return torch.stack([cache[f"blocks.{layer}.attn.hook_pattern"][0] for layer in range(model.cfg.n_layers)]).cpu()


@torch.no_grad()
def attention_patterns(model, tokens: torch.Tensor) -> torch.Tensor:
    """[n_layers, n_heads, pos, pos] attention patterns of one prompt (token ids, with BOS if the model uses one)."""
    _, cache = model.run_with_cache(
        tokens.reshape(1, -1).to(model.cfg.device), names_filter=lambda n: n.endswith("hook_pattern")
    )
    return patterns_from_cache(model, cache)


def induction_targets(tokens: torch.Tensor) -> dict[int, int]:
    """Query position -> the position right after the most recent earlier occurrence of its token."""
    seen, out = {}, {}
    for p, t in enumerate(tokens.tolist()):
        if t in seen and seen[t] + 1 < p:
            out[p] = seen[t] + 1
        seen[t] = p
    return out


def pattern_scores(patterns: torch.Tensor, tokens: torch.Tensor) -> dict[str, dict[str, float]]:
    """Per head `a{l}.h{h}`: previous-token and induction scores on this prompt."""
    pos = patterns.shape[-1]
    prev = patterns[..., torch.arange(1, pos), torch.arange(0, pos - 1)].mean(-1)
    targets = induction_targets(tokens)
    if targets:
        q, k = torch.tensor(list(targets)), torch.tensor(list(targets.values()))
        ind = patterns[..., q, k].mean(-1)
    else:
        ind = torch.zeros_like(prev)
    return {
        f"a{layer}.h{h}": {"previous_token": float(prev[layer, h]), "induction": float(ind[layer, h])}
        for layer in range(patterns.shape[0])
        for h in range(patterns.shape[1])
    }
