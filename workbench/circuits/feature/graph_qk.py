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
from workbench.circuits.feature.replacement import ActiveFeatures, ReplacementModel, source_rows
from workbench.errors import BadValueError


class Uses:
    """graph_heads.split_edges's on_entries: collects (edge, layer, head, query, key) of the heads carrying >=
    HEAD_SHARE of each edge's split, each at the query whose entry carries the most of that head's part."""

    def __init__(self, n_heads: int):
        self.n_heads, self.rows = n_heads, []

    def __call__(self, pick, weights, queries, key_pos) -> None:
        w = weights.abs()
        e, k = (w[:, :-1] >= HEAD_SHARE * w.sum(1, keepdim=True)).nonzero().unbind(1)
        layer, head = k // self.n_heads, k % self.n_heads
        self.rows += torch.stack([pick[e], layer, head, queries(e, layer, head), key_pos[e]], 1).tolist()


def _qk_names(rm: ReplacementModel, layer: int) -> tuple[str, str]:
    """The hooks whose product is the score: the rotated queries and keys under rotary positions."""
    rot = "rot_" if rm.model.cfg.positional_embedding_type == "rotary" else ""
    return f"blocks.{layer}.attn.hook_{rot}q", f"blocks.{layer}.attn.hook_{rot}k"


def _clean(rm: ReplacementModel, pairs: torch.Tensor) -> tuple[dict, torch.Tensor, list]:
    """(clean q and k per layer, each pair's score, kv head of each pair's head), refused in one line when the
    model's score is not q . k / attn_scale (a soft cap, ALiBi, ...)."""
    layers = pairs[:, 0].unique().tolist()
    names = [n for layer in layers for n in _qk_names(rm, layer)]
    names += [f"blocks.{layer}.attn.hook_attn_scores" for layer in layers]
    with torch.no_grad():
        clean, _ = rm.forward(1, record=names)
    per_kv = rm.model.cfg.n_heads // clean[_qk_names(rm, layers[0])[1]].shape[2]
    score = torch.stack([clean[f"blocks.{la}.attn.hook_attn_scores"][0, h, q, k] for la, h, q, k in pairs.tolist()])
    mine = torch.stack(
        [
            clean[_qk_names(rm, la)[0]][0, q, h]
            @ clean[_qk_names(rm, la)[1]][0, k, h // per_kv]
            / rm.model.blocks[la].attn.attn_scale
            for la, h, q, k in pairs.tolist()
        ]
    )
    if not torch.allclose(mine, score, rtol=1e-4, atol=1e-5 * float(score.abs().max())):
        raise BadValueError(
            f"{rm.model.cfg.model_name}'s attention score is not q . k / attn_scale at its hooks: QK attribution "
            "does not apply; build the graph with qk off (--no-qk)"
        )
    return clean, score, [per_kv]


def _graph_features(g) -> ActiveFeatures:
    """The graph's features as ActiveFeatures, so source_rows gives the graph's own columns."""
    f = g.features
    return ActiveFeatures(f[:, 0], f[:, 1], f[:, 2], g.activations, torch.ones(f.shape[0], dtype=torch.bool))


def _layer_rows(rm: ReplacementModel, g, active, layer: int, targets, clean: dict, per_kv: int, batch_size: int):
    """[n, n_sources] rows (active: _graph_features(g)) of targets [n, 4] (head, query, key, query side?) of one layer's scores: one forward pass
    (blocks 0..layer, positions up to the last query) held for every batch of them."""
    qn, kn = _qk_names(rm, layer)
    scale, n_pos = rm.model.blocks[layer].attn.attn_scale, int(targets[:, 1].max()) + 1
    rows = torch.zeros(targets.shape[0], g.n_sources)
    with torch.enable_grad():
        live, taps = rm.forward(batch_size, record=(qn, kn), upto=layer, n_pos=n_pos)
        tap_names = list(taps)
        for start in range(0, targets.shape[0], batch_size):
            sl = slice(start, start + batch_size)
            gq, gk = torch.zeros_like(live[qn]), torch.zeros_like(live[kn])
            for i, (h, q, k, side) in enumerate(targets[sl].tolist()):
                if side:
                    gq[i, q, h] += clean[kn][0, k, h // per_kv] / scale
                else:
                    gk[i, k, h // per_kv] += clean[qn][0, q, h] / scale
            got = torch.autograd.grad(
                [live[qn], live[kn]],
                [taps[n] for n in tap_names],
                [gq, gk],
                retain_graph=True,
                allow_unused=True,
                materialize_grads=True,
            )
            with torch.no_grad():
                r = source_rows(rm, active, dict(zip(tap_names, got)), below=layer, n_pos=n_pos)
            rows[sl] = r[: rows[sl].shape[0]].float().cpu()
    return rows


def score_rows(rm: ReplacementModel, g, pairs: torch.Tensor, batch_size: int = 32) -> dict:
    """{"score": [m], "query": [m, n_sources], "key": [m, n_sources]}: each entry (layer, head, query, key) of
    pairs [m, 4], its score and each graph source's direct effect on it through either side. With the other side
    held, a side's part is linear in that side's q (k): the gradient target is the held side's clean vector /
    attn_scale at the hook, so one held forward pass per layer serves every batch (one backward pass each)."""
    clean, score, (per_kv,) = _clean(rm, pairs)
    m = pairs.shape[0]
    both = torch.cat([torch.cat([pairs, pairs])[:, 1:], (torch.arange(2 * m) < m)[:, None].long()], 1)
    layers = torch.cat([pairs[:, 0], pairs[:, 0]])
    rows, active = torch.zeros(2 * m, g.n_sources), _graph_features(g)
    for layer in layers.unique().tolist():
        i = (layers == layer).nonzero().flatten()
        rows[i] = _layer_rows(rm, g, active, layer, both[i], clean, per_kv, batch_size)
    if not g.config.get("bos_nodes", True):  # the start token's error nodes are not the graph's nodes
        rows[:, g.n_features + torch.arange(rm.L) * rm.P] = 0
    return {"score": score.float().cpu(), "query": rows[:m], "key": rows[m:]}


def qk_scores(rm: ReplacementModel, g, uses: Uses, batch_size: int = 32) -> dict:
    """The QK attribution of the collected uses: {"pairs": [m, 4] (layer, head, query, key), "score", "query",
    "key" (score_rows of them), "uses": [u, 2] (index into g.heads["edges"], index into pairs)}."""
    if not uses.rows:
        empty = torch.zeros(0, g.n_sources)
        none = torch.zeros(0, 4, dtype=torch.long)
        return {"pairs": none, "score": torch.zeros(0), "query": empty, "key": empty, "uses": none[:, :2]}
    u = torch.tensor(uses.rows)
    pairs, which = u[:, 1:].unique(dim=0, return_inverse=True)
    return {**score_rows(rm, g, pairs, batch_size), "pairs": pairs, "uses": torch.stack([u[:, 0], which], 1)}
