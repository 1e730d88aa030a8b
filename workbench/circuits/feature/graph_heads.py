"""The heads on every edge of an attribution graph (docs/methods.md §11): each kept edge split into the part
that reaches its target through no attention head (the residual stream and any skip paths) and, for each head,
the part whose first attention hop is that head's OV circuit (the later path may cross further heads). The
parts are computed independently of the edge and sum to it exactly in the frozen replacement model.

First hop through head (l, h) of a source writing v at position p: v . LN1_l^T(W_V[l, h] gv[h, p]), with
gv[h, p] = sum_q pattern_l[h, q, p] dT/dz_l[q, h] the target's gradient at the head's value at p, and LN1_l^T the
transpose of the frozen normalisation before the attention. The direct part is the gradient with every value
held at this prompt's (no path through attention), dotted with v.

`split_entries`: the same first hop split further over the attention entries (query, key) it crosses.
`qk_attribution`: why a head attends, the query-side and key-side sources of one attention score.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.circuits.feature.replacement import EMBED, ActiveFeatures, ReplacementModel, source_rows
from workbench.circuits.feature.transcoders import output_hook
from workbench.errors import BadValueError


def _frozen_ln1(rm: ReplacementModel, layer: int):
    """(scale [pos, 1] at this prompt, weight or None, centres?) of `layer`'s ln1; None: no normalisation."""
    ln = rm.model.blocks[layer].ln1
    scale = rm.frozen.get(f"blocks.{layer}.ln1.hook_scale")
    if scale is None:
        return None
    w = getattr(ln, "w", None)
    return scale[0].reshape(-1, 1), None if w is None else w.detach(), "LayerNorm" in type(ln).__name__


def _ln_transpose(rm: ReplacementModel, layer: int, u: torch.Tensor) -> torch.Tensor:
    """u [.., pos, d] (a gradient at ln1's output of `layer`) pulled back through the frozen ln1."""
    ln = _frozen_ln1(rm, layer)
    if ln is None:
        return u
    scale, w, centres = ln
    u = (u if w is None else u * w) / scale
    return u - u.mean(-1, keepdim=True) if centres else u


def _targets(rm: ReplacementModel, g, active_rows: torch.Tensor):
    """(layers, positions, vectors) of graph rows: features through their encoders, logits as built."""
    rows = active_rows.tolist()
    layers = torch.tensor([int(g.features[r, 0]) if r < g.n_features else rm.L for r in rows], dtype=torch.long)
    positions = torch.tensor([int(g.features[r, 1]) if r < g.n_features else rm.P - 1 for r in rows])
    vecs = [None] * len(rows)
    for layer in layers.unique().tolist():  # one pass of a layer's encoder for all its rows
        at = (layers == layer).nonzero().flatten().tolist()
        if layer < rm.L:
            got = rm.tcs.encoder_vectors(layer, g.features[[rows[i] for i in at], 2], rm.x[layer].dtype)
        else:
            got = rm.unembed_vectors([g.logit_tokens[rows[i] - g.n_features] for i in at])
        for i, v in zip(at, got):
            vecs[i] = v
    return layers, positions, torch.stack(vecs)


@dataclass
class Sources:
    """Graph source columns and what each writes: `layer` (the lowest layer it writes; -1 for a token), `pos`, and
    its writes `vectors` [n, k, d] into the taps `taps` [n, k] (t < n_layers: layer t's MLP output; n_layers: the
    embedding). A per-layer feature, an error node or a token writes one tap; a cross-layer feature writes every
    layer in Transcoders.writes_to of its own (unused slots hold its first tap and a zero vector)."""

    layer: torch.Tensor
    pos: torch.Tensor
    taps: torch.Tensor
    vectors: torch.Tensor

    def __getitem__(self, i) -> Sources:
        return Sources(self.layer[i], self.pos[i], self.taps[i], self.vectors[i])

    def deltas(self, n_layers: int, n_pos: int, slot: torch.Tensor, copies: int) -> dict:
        """{hook: [copies, n_pos, d]}: every write added at its tap, source i's in copy slot[i] at its position."""
        out = {}
        for t in self.taps.unique().tolist():
            i, j = (self.taps == t).nonzero(as_tuple=True)
            name = EMBED if t == n_layers else output_hook(t)
            out[name] = self.vectors.new_zeros(copies, n_pos, self.vectors.shape[-1])
            out[name].index_put_((slot[i], self.pos[i]), self.vectors[i, j], accumulate=True)
        return out


def _sources(rm: ReplacementModel, g, cols: torch.Tensor) -> Sources:
    """The Sources of graph source columns `cols`: features write act * their decoder rows into every layer they
    write to (one decoder gather per (layer, target layer)), errors their error vectors, tokens their embeddings."""
    n_f, n_e, L, n = g.n_features, g.n_errors, rm.L, cols.numel()
    feat, tok = cols < n_f, cols >= n_f + n_e
    f_layer = g.features[cols[feat], 0]
    k = max([len(rm.tcs.writes_to(layer)) for layer in f_layer.unique().tolist()] + [1])
    layer, pos = torch.empty(n, dtype=torch.long), torch.empty(n, dtype=torch.long)
    layer[feat], pos[feat] = f_layer, g.features[cols[feat], 1]
    err = ~feat & ~tok
    layer[err], pos[err] = (cols[err] - n_f) // rm.P, (cols[err] - n_f) % rm.P
    layer[tok], pos[tok] = -1, cols[tok] - n_f - n_e
    taps = (layer % (L + 1))[:, None].repeat(1, k)
    vectors = rm.embed.new_zeros(n, k, rm.embed.shape[1])
    vectors[err, 0] = torch.stack(rm.errors)[layer[err], pos[err]].to(vectors.dtype)
    vectors[tok, 0] = rm.embed[pos[tok]]
    for source in f_layer.unique().tolist():
        idx = (feat & (layer == source)).nonzero().flatten()
        latents, acts = g.features[cols[idx], 2], g.activations[cols[idx], None]
        for j, target in enumerate(rm.tcs.writes_to(source)):
            taps[idx, j] = target
            vectors[idx, j] = (rm.tcs.decoder(source, target, latents) * acts).to(vectors.dtype)
    return Sources(layer, pos, taps, vectors)


@torch.no_grad()
def carried(rm: ReplacementModel, src: Sources) -> torch.Tensor:
    """[n, n_layers, d]: each source's writes as they reach each layer's attention input at its own position
    through no attention (the residual stream and the skip paths of skip transcoders; zero below the source).

    With no attention, positions do not interact, so sources at different positions share one copy of the
    prompt: the pass runs on as many copies as the most sources any one position has."""
    s_layer, s_pos = src.layer, src.pos
    n = s_pos.numel()
    order = torch.argsort(s_pos, stable=True)
    first = torch.searchsorted(s_pos[order], s_pos[order])  # where each position's run of sources starts
    slot = torch.empty_like(s_pos)
    slot[order] = torch.arange(n) - first
    copies = int(slot.max()) + 1 if n else 0
    deltas = src.deltas(rm.L, rm.P, slot, copies)
    names = tuple(f"blocks.{layer}.hook_resid_pre" for layer in range(1, rm.L))
    moved, _ = rm.forward(copies, deltas, no_attention=True, record=names)
    still, _ = rm.forward(1, no_attention=True, record=names)
    out = [torch.where((s_layer < 0)[:, None], src.vectors[:, 0], 0)]
    out += [
        (moved[k][slot, s_pos] - still[k][0, s_pos]) * (s_layer < layer)[:, None] for layer, k in enumerate(names, 1)
    ]
    return torch.stack(out, 1)


def _split_batch(rm: ReplacementModel, targets, b, src, reach, copies: int) -> tuple[torch.Tensor, dict]:
    """([n_edges, n_layers * n_heads + 1] for edges from sources src (reach: carried(src)) to the targets' copies b,
    the pass's gradients (top_queries reads their hook_z ones))."""
    full = rm.backward(*targets, copies=copies, with_z=True)
    direct = rm.backward(*targets, copies=copies, no_attention=True)
    taps = torch.stack([direct[output_hook(layer)] for layer in range(rm.L)] + [direct[EMBED]])
    writes = range(src.taps.shape[1])  # a cross-layer feature's direct part sums its writes at every layer
    out = [sum(torch.einsum("ed,ed->e", taps[src.taps[:, j], b, src.pos], src.vectors[:, j]) for j in writes)[:, None]]
    for layer in range(rm.L):
        gz = full[f"blocks.{layer}.attn.hook_z"]  # [n, q, head, d_head]
        pattern = rm.frozen[f"blocks.{layer}.attn.hook_pattern"][0]  # [head, q, k]
        gv = torch.einsum("hqk,bqhe->bhke", pattern, gz)
        u = _ln_transpose(rm, layer, torch.einsum("bhke,hde->bhkd", gv, rm.model.blocks[layer].attn.W_V.detach()))
        out.insert(layer, torch.einsum("ehd,ed->eh", u[b, :, src.pos], reach[:, layer]))
    return torch.cat(out, 1), full


def top_queries(rm: ReplacementModel, full: dict, b, pos, reach, e, layer, head) -> torch.Tensor:
    """[m] for m (edge, layer, head) triples, the query whose entry (query, key = the source's position) carries the
    most of the edge's first hop through that head: the argmax over q of |split_entries|, for only those heads (not
    every head's [n_pos] parts of every edge). b, pos, reach: a split batch's target copy, source position and carried
    writes [n, n_layers, d] per edge, full: its pass's gradients; e [m]: indices into them. Grouped by (target copy,
    head), each group is one product with that copy's gradient at the head's output (nothing gathered per edge)."""
    out = torch.zeros(len(e), dtype=torch.long)
    n_heads = rm.model.cfg.n_heads
    for la in layer.unique().tolist():
        i = (layer == la).nonzero().flatten()
        ei, hi = e[i].to(b.device), head[i].to(b.device)
        x = _ln_forward(rm, la, reach[ei, la], pos[ei])  # [m, d]
        gz, w_v = full[f"blocks.{la}.attn.hook_z"], rm.model.blocks[la].attn.W_V.detach()
        pattern = rm.frozen[f"blocks.{la}.attn.hook_pattern"][0]  # [head, q, k]
        groups, rows = (b[ei] * n_heads + hi).sort()
        kinds, counts = groups.unique_consecutive(return_counts=True)
        for kind, r in zip(kinds.tolist(), rows.split(counts.tolist())):
            cb, h = divmod(kind, n_heads)
            parts = (x[r] @ w_v[h]) @ gz[cb, :, h].T * pattern[h, :, pos[ei[r]]].T  # [m_g, q]
            out[i[r.cpu()]] = parts.abs().argmax(1).cpu()
    return out


def _entries(rm: ReplacementModel, layer: int, gz, pattern, pos, reach) -> torch.Tensor:
    """[n, n_heads, n_pos]: each edge's first hop through each head of `layer` split over the queries: the pattern
    entry (query, key = pos) times the target's gradient at the head's output dotted with the head's value of
    the carried write `reach` [n, d]. gz: [n, q, head, d_head] the edges' targets' gradients at hook_z."""
    x = _ln_forward(rm, layer, reach, pos)
    val = torch.einsum("nd,hde->nhe", x, rm.model.blocks[layer].attn.W_V.detach())
    return (torch.einsum("nqhe,nhe->nqh", gz, val) * pattern[:, :, pos].permute(2, 1, 0)).transpose(1, 2)


def head_names(n_layers: int, n_heads: int) -> list[str]:
    return [f"a{layer}.h{h}" for layer in range(n_layers) for h in range(n_heads)] + ["direct"]


def _edge_batches(rm: ReplacementModel, g, edges: torch.Tensor, batch_size: int):
    """(indices into edges, targets, target copy of each edge, sources, their carried writes), batch_size targets
    at a time; each source's write and how it travels depend on no target, so they are computed once."""
    rows = edges[:, 0].unique()
    cols, col_of = edges[:, 1].unique(return_inverse=True)
    src = _sources(rm, g, cols)
    reach = carried(rm, src)
    every = _targets(rm, g, rows)  # each layer's encoder once for all rows, not once per batch
    for start in range(0, rows.numel(), batch_size):
        chunk = rows[start : start + batch_size]
        pick = torch.isin(edges[:, 0], chunk).nonzero().flatten()
        c = col_of[pick]
        yield (
            pick,
            tuple(t[start : start + batch_size] for t in every),
            torch.searchsorted(chunk, edges[pick, 0]),
            src[c],
            reach[c],
        )


def split_edges(rm: ReplacementModel, g, edge_mask: torch.Tensor, batch_size: int = 32, on_entries=None) -> dict:
    """{"edges": [n, 2] (row, column) of the edges in edge_mask, "weights": [n, n_layers * n_heads + 1] each
    edge's first-hop part through each head then its direct part, "names": the column names}. on_entries(pick,
    weights, queries, key positions): called per batch of edges, queries(edges, layers, heads) giving top_queries
    of those (edge, head) pairs of the batch from its own pass (graph_qk.py)."""
    edges = edge_mask.nonzero()
    weights = torch.zeros(edges.shape[0], rm.L * g.n_heads + 1)
    with torch.no_grad():
        for pick, targets, b, src, reach in _edge_batches(rm, g, edges, batch_size):
            w, full = _split_batch(rm, targets, b, src, reach, batch_size)
            weights[pick] = w.float().cpu()
            if on_entries is not None:

                def queries(e, layer, head, full=full, b=b, src=src, reach=reach):
                    return top_queries(rm, full, b, src.pos, reach, e, layer, head)

                on_entries(pick, weights[pick], queries, src.pos.cpu())
    return {"edges": edges, "weights": weights, "names": head_names(rm.L, g.n_heads)}


def _ln_forward(rm: ReplacementModel, layer: int, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """x [n, d] written at positions pos [n] as the frozen ln1 of `layer` passes it on (the transpose of
    _ln_transpose: (LN^T u) . x = u . LN x)."""
    ln = _frozen_ln1(rm, layer)
    if ln is None:
        return x
    scale, w, centres = ln
    x = (x - x.mean(-1, keepdim=True) if centres else x) / scale[pos]
    return x if w is None else x * w


def split_entries(rm: ReplacementModel, g, edges: torch.Tensor, batch_size: int = 32) -> torch.Tensor:
    """[n, n_layers, n_heads, n_pos]: each edge's first-hop part through head (l, h) split over the attention
    entries it crosses, (query q, key = the source's position): pattern_l[h, q, p] times the target's gradient at
    the head's output z[q, h] dotted with the head's value of the carried write. Summed over q: split_edges's
    part of that head. edges: [n, 2] (row, column) of graph edges."""
    out = torch.zeros(edges.shape[0], rm.L, g.n_heads, rm.P)
    with torch.no_grad():
        for pick, targets, b, src, reach in _edge_batches(rm, g, edges, batch_size):
            full = rm.backward(*targets, copies=batch_size, with_z=True)
            for layer in range(rm.L):
                gz = full[f"blocks.{layer}.attn.hook_z"][b]  # [n, q, head, d_head]
                pattern = rm.frozen[f"blocks.{layer}.attn.hook_pattern"][0]
                out[pick, layer] = _entries(rm, layer, gz, pattern, src.pos, reach[:, layer]).float().cpu()
    return out


def qk_attribution(rm: ReplacementModel, layer: int, head: int, query: int, key: int) -> dict:
    """Why head (layer, head) attends from position `query` to `key`: each source's direct effect on that
    attention score (before the softmax) through the query side (keys held at this prompt's) and through the
    key side (queries held), in the frozen replacement model. The score is bilinear in the two sides, so each
    side is exact with the other held. {"score", "sources": (layer, pos, latent) of the active features then
    errors then tokens as attribution_graph.source_rows orders them, "query": [n], "key": [n]}."""
    if not (0 <= layer < rm.L and 0 <= head < rm.model.cfg.n_heads and 0 <= key <= query < rm.P):
        raise BadValueError(
            f"pattern entry (layer {layer}, head {head}, query {query}, key {key}) is not one of this prompt's: "
            f"layers 0..{rm.L - 1}, heads 0..{rm.model.cfg.n_heads - 1}, 0 <= key <= query < {rm.P}"
        )
    active = ActiveFeatures.of(rm)
    clean = {}
    with torch.no_grad():
        rm.model.run_with_hooks(
            rm.tokens[None],
            return_type=None,
            fwd_hooks=[(f"blocks.{layer}.attn.hook_{s}", lambda a, hook, s=s: clean.__setitem__(s, a)) for s in "qk"],
        )
    out = {}
    for side, held in (("query", "k"), ("key", "q")):
        seen = {}
        hooks = [
            (f"blocks.{layer}.attn.hook_{held}", lambda a, hook, held=held: clean[held]),
            (f"blocks.{layer}.attn.hook_attn_scores", lambda a, hook: seen.__setitem__("s", a)),
        ]
        with torch.enable_grad(), rm.model.hooks(fwd_hooks=hooks):
            _, taps = rm.forward(1)
            score = seen["s"][0, head, query, key]
            names = list(taps)
            got = torch.autograd.grad(score, [taps[n] for n in names], allow_unused=True, materialize_grads=True)
        out[side] = source_rows(rm, active, dict(zip(names, got)))[0].detach()
        out["score"] = float(score)
    out["sources"] = torch.stack([active.layer, active.pos, active.latent], 1)
    return out
