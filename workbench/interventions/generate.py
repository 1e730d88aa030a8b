"""Continuations of a prompt, clean and intervened, side by side: greedy, or sampled with one seed for both (so
what differs is the intervention's doing, not the draw).

Each step re-runs the whole sequence (no key/value cache): the intervention's hooks see every position each time,
which is what `positions all` and `generated` mean, and on the models this runs on the cost is a few passes.
"""

from __future__ import annotations

import torch

from workbench.cache.hooks import mlp_in_hooks


@torch.no_grad()
def forward(model, tokens: torch.Tensor, hooks: list, reads=(), rows: int | None = None) -> torch.Tensor:
    """[len(tokens), d_vocab] logits of one sequence with `hooks` on (reads: hook names that need hook_mlp_in);
    rows: [rows, len(tokens), d_vocab], the sequence repeated over a batch (hooks that act per row)."""
    batch = tokens[None].expand(rows or 1, -1).to(model.cfg.device)
    with mlp_in_hooks(model, reads), model.hooks(fwd_hooks=hooks):
        logits = model(batch).float()
    return logits if rows else logits[0]


@torch.no_grad()
def continuation(
    model, tokens: torch.Tensor, n: int, hooks: list, reads=(), sample: bool = False, seed: int = 0, temp: float = 1.0
) -> list[int]:
    """The n tokens (fewer at the model's context length) generated after `tokens` with `hooks` on."""
    gen = torch.Generator().manual_seed(seed)
    seq = tokens.reshape(-1).cpu()
    out = []
    for _ in range(n):
        if seq.numel() >= model.cfg.n_ctx:
            break
        logits = forward(model, seq, hooks, reads)[-1].cpu()
        if sample:
            nxt = torch.multinomial((logits / temp).softmax(-1), 1, generator=gen)
        else:
            nxt = logits.argmax(-1, keepdim=True)
        seq = torch.cat([seq, nxt])
        out.append(int(nxt))
    return out
