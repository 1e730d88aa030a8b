"""QK attribution on an attribution graph's edges (docs/methods.md §11): why each head that carries a kept edge
attends where it does. For each kept edge, the heads carrying at least HEAD_SHARE of its split (graph_heads), and
for each such head the attention entry (query q, key = the source's position) carrying the most of that head's
part (graph_heads.split_entries), the entry's score (before the softmax) is attributed to every graph
source (features, error nodes, token embeddings) twice: through the query side (keys held at this prompt's) and
through the key side (queries held), in the frozen replacement model, as graph_heads.qk_attribution does for one
entry. The score is bilinear in the two sides, so each side is exact with the other held.

The entries come from the head split's own backward passes; the scores' parts from one held forward pass and one
backward pass per batch of (entry, side) targets.
"""

from __future__ import annotations

import torch

from workbench.circuits.feature.graph_config import HEAD_SHARE
from workbench.circuits.feature.replacement import EMBED, ActiveFeatures, ReplacementModel, source_rows
from workbench.circuits.feature.transcoders import output_hook
from workbench.errors import BadValueError


class Uses:
    """graph_heads.split_edges's on_entries: collects (edge, layer, head, query, key) of the heads carrying >=
    HEAD_SHARE of each edge's split, each at the query whose entry carries the most of that head's part."""

    def __init__(self, n_heads: int):
        self.n_heads, self.parts = n_heads, []

    def __call__(self, pick, weights, queries, key_pos) -> None:
        w = weights.abs()
        e, k = (w[:, :-1] >= HEAD_SHARE * w.sum(1, keepdim=True)).nonzero().unbind(1)
        layer, head = k // self.n_heads, k % self.n_heads
        self.parts.append(torch.stack([pick[e], layer, head, queries(e, layer, head), key_pos[e]], 1))


def _qk_names(rm: ReplacementModel, layer: int) -> tuple[str, str]:
    """The hooks whose product is the score: the rotated queries and keys under rotary positions."""
    rot = "rot_" if rm.model.cfg.positional_embedding_type == "rotary" else ""
    return f"blocks.{layer}.attn.hook_{rot}q", f"blocks.{layer}.attn.hook_{rot}k"


def _unique_pairs(u: torch.Tensor, sizes: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    """u.unique(dim=0, return_inverse=True) for rows of small non-negative fields (each below its sizes entry):
    each row as one number in mixed radix, the same order, without unique(dim=0)'s row sort."""
    key = u[:, 0]
    for col, size in zip(u.unbind(1)[1:], sizes[1:]):
        key = key * size + col
    uniq, which = key.unique(return_inverse=True)
    out = []
    for size in reversed(sizes[1:]):
        uniq, col = uniq.div(size, rounding_mode="floor"), uniq % size
        out.append(col)
    return torch.stack([uniq, *reversed(out)], 1), which


def _clean(rm: ReplacementModel, pairs: torch.Tensor) -> tuple[dict, torch.Tensor, int]:
    """(clean q and k per layer, each pair's score, query heads per kv head), refused in one line when the
    model's score is not q . k / attn_scale (a soft cap, ALiBi, ...)."""
    layers = pairs[:, 0].unique().tolist()
    names = [n for layer in layers for n in _qk_names(rm, layer)]
    names += [f"blocks.{layer}.attn.hook_attn_scores" for layer in layers]
    with torch.no_grad():
        clean, _ = rm.forward(1, record=names)
    per_kv = rm.model.cfg.n_heads // clean[_qk_names(rm, layers[0])[1]].shape[2]
    score, mine = torch.zeros(pairs.shape[0]), torch.zeros(pairs.shape[0])
    for layer in layers:
        i = (pairs[:, 0] == layer).nonzero().flatten()
        _, h, q, k = pairs[i].unbind(1)
        qn, kn = _qk_names(rm, layer)
        score[i] = clean[f"blocks.{layer}.attn.hook_attn_scores"][0, h, q, k].float().cpu()
        dot = (clean[qn][0, q, h] * clean[kn][0, k, h // per_kv]).sum(-1)
        mine[i] = (dot / rm.model.blocks[layer].attn.attn_scale).float().cpu()
    if not torch.allclose(mine, score, rtol=1e-4, atol=1e-5 * float(score.abs().max())):
        raise BadValueError(
            f"{rm.model.cfg.model_name}'s attention score is not q . k / attn_scale at its hooks: QK attribution "
            "does not apply; build the graph with qk off (--no-qk)"
        )
    return clean, score, per_kv


def _graph_features(g) -> ActiveFeatures:
    """The graph's features as ActiveFeatures, so source_rows gives the graph's own columns."""
    f = g.features
    return ActiveFeatures(f[:, 0], f[:, 1], f[:, 2], g.activations, torch.ones(f.shape[0], dtype=torch.bool))


def _seeds(rm: ReplacementModel, layer: int, t: torch.Tensor, clean: dict, per_kv: int, live: dict):
    """(outputs, their gradient targets) of one backward pass over targets t [n, 4] (head, query, key, query
    side?) of one layer's scores, copy i holding target i: a query-side target is the held key's clean vector /
    attn_scale at (query, head) of the query hook, a key-side one the held query's at (key, kv head) of the key
    hook. A side no target of the batch uses is left out of the pass."""
    qn, kn = _qk_names(rm, layer)
    scale = rm.model.blocks[layer].attn.attn_scale
    i, (h, q, k, side) = torch.arange(t.shape[0]), t.unbind(1)
    outs, grads = [], []
    for name, s, at, held in (
        (qn, side == 1, (q, h), (kn, k, h // per_kv)),
        (kn, side == 0, (k, h // per_kv), (qn, q, h)),
    ):
        if s.any():
            g = torch.zeros_like(live[name])
            g[i[s], at[0][s], at[1][s]] = (clean[held[0]][0, held[1][s], held[2][s]] / scale).to(g.dtype)
            outs.append(live[name])
            grads.append(g)
    return outs, grads


def _rows(rm: ReplacementModel, g, targets: torch.Tensor, clean: dict, per_kv: int, batch_size: int):
    """[n, n_sources] rows of targets [n, 5] (layer, head, query, key, query side?): one forward pass (positions
    up to the last query, blocks up to the highest layer, recording every layer's q and k) held for every batch;
    each batch is one layer's targets, so its backward pass runs through that layer's blocks only."""
    active, layers = _graph_features(g), targets[:, 0].unique().tolist()
    n_pos = int(targets[:, 2].max()) + 1
    rows = torch.zeros(targets.shape[0], g.n_sources)
    with torch.enable_grad():
        record = [n for layer in layers for n in _qk_names(rm, layer)]
        live, taps = rm.forward(batch_size, record=record, upto=max(layers), n_pos=n_pos)
        for layer in layers:
            tap_names = [EMBED] + [output_hook(below) for below in range(layer)]  # all source_rows reads
            idx = (targets[:, 0] == layer).nonzero().flatten()
            for sl in idx.split(batch_size):
                outs, grads = _seeds(rm, layer, targets[sl, 1:], clean, per_kv, live)
                got = torch.autograd.grad(
                    outs,
                    [taps[n] for n in tap_names],
                    grads,
                    retain_graph=True,
                    allow_unused=True,
                    materialize_grads=True,
                )
                with torch.no_grad():
                    r = source_rows(rm, active, dict(zip(tap_names, got)), below=layer, n_pos=n_pos)
                rows[sl] = r[: sl.numel()].float().cpu()
    return rows


def score_rows(rm: ReplacementModel, g, pairs: torch.Tensor, batch_size: int = 32) -> dict:
    """{"score": [m], "query": [m, n_sources], "key": [m, n_sources]}: each entry (layer, head, query, key) of
    pairs [m, 4], its score and each graph source's direct effect on it through either side. With the other side
    held, a side's part is linear in that side's q (k): the gradient target is the held side's clean vector /
    attn_scale at the hook, so one held forward pass serves every batch (one backward pass each)."""
    clean, score, per_kv = _clean(rm, pairs)
    m = pairs.shape[0]
    both = torch.cat([torch.cat([pairs, pairs]), (torch.arange(2 * m) < m)[:, None].long()], 1)
    rows = _rows(rm, g, both, clean, per_kv, batch_size)
    if not g.config.get("bos_nodes", True):  # the start token's error nodes are not the graph's nodes
        rows[:, g.n_features + torch.arange(rm.L) * rm.P] = 0
    return {"score": score, "query": rows[:m], "key": rows[m:]}


def qk_scores(rm: ReplacementModel, g, uses: Uses, batch_size: int = 32) -> dict:
    """The QK attribution of the collected uses: {"pairs": [m, 4] (layer, head, query, key), "score", "query",
    "key" (score_rows of them), "uses": [u, 2] (index into g.heads["edges"], index into pairs)}."""
    u = torch.cat(uses.parts) if uses.parts else torch.zeros(0, 5, dtype=torch.long)
    if not u.shape[0]:
        empty, none = torch.zeros(0, g.n_sources), torch.zeros(0, 4, dtype=torch.long)
        return {"pairs": none, "score": torch.zeros(0), "query": empty, "key": empty, "uses": none[:, :2]}
    pairs, which = _unique_pairs(u[:, 1:], (rm.L, g.n_heads, rm.P, rm.P))
    return {**score_rows(rm, g, pairs, batch_size), "pairs": pairs, "uses": torch.stack([u[:, 0], which], 1)}
