"""Attribution graphs on the local replacement model (docs/methods.md §11): `build_graph(model, transcoders,
prompt)` -> an `AttributionGraph` of the exact direct effects between active features, error nodes, token
embeddings and target logits, pruned by influence, with replacement / completeness scores and (with heads) each
kept edge split over the attention heads that carry it (graph_heads.py).

Rows are computed by backward passes batched over targets, from the logits down the layers: when a layer is
reached, every feature on it has its exact influence (all its targets lie above), so the features given a row
(`max_feature_nodes`, shared out over the layers left) are chosen then, and only the running influence of every
source column is kept. Rows are stored whole when the [rows x all active sources] matrix fits
`max_matrix_mib`; otherwise they are computed again for the chosen features only, so memory stays at
[rows x chosen sources] plus one batch.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field

import torch

from workbench.circuits import graph_heads
from workbench.circuits import influence as inf
from workbench.circuits.graph_config import GraphConfig
from workbench.circuits.inputs import single_token, str_tokens, tokens_of
from workbench.circuits.replacement import ActiveFeatures, ReplacementModel, load_transcoders, source_rows
from workbench.errors import BadValueError
from workbench.provenance import model_id


@dataclass
class AttributionGraph:
    """Nodes: features [n_f, 3] (layer, pos, latent) with their activations, error nodes (layer, pos) at index
    layer * n_pos + pos, token embeddings (pos), logits. `adjacency` [n_f + n_logits, n_f + n_layers * n_pos +
    n_pos]: row = target (features, then logits), column = source (features, errors, tokens), the direct effect
    on the target's pre-activation (a logit: minus the mean logit)."""

    tokens: list[int]
    str_tokens: list[str]
    prompt: str | None
    n_layers: int
    n_heads: int
    features: torch.Tensor
    activations: torch.Tensor
    logit_tokens: list[int]
    logit_probs: torch.Tensor
    logit_strs: list[str]
    adjacency: torch.Tensor
    config: dict
    n_active: int  # active features before the choice of rows
    model_id: str = ""
    pruned: inf.Pruned | None = None
    scores: dict = field(default_factory=dict)
    heads: dict | None = None  # graph_heads.split_edges: {"edges": [n, 2] (row, col), "weights": [n, L*H + 1]}

    @property
    def n_pos(self) -> int:
        return len(self.tokens)

    @property
    def n_features(self) -> int:
        return self.features.shape[0]

    @property
    def n_errors(self) -> int:
        return self.n_layers * self.n_pos

    @property
    def n_sources(self) -> int:
        return self.adjacency.shape[1]

    def node_name(self, node: int) -> str:
        """'f{layer}.{latent}@{pos}', 'err{layer}@{pos}', 'emb@{pos}' or 'logit {token!r}' of a node index."""
        n_f, n_e = self.n_features, self.n_errors
        if node < n_f:
            layer, pos, latent = self.features[node].tolist()
            return f"f{layer}.{latent}@{pos}"
        if node < n_f + n_e:
            layer, pos = divmod(node - n_f, self.n_pos)
            return f"err{layer}@{pos}"
        if node < self.n_sources:
            return f"emb@{node - n_f - n_e}"
        return f"logit {self.logit_strs[node - self.n_sources]!r}"

    def row_node(self, row: int) -> int:
        return row if row < self.n_features else self.n_sources + row - self.n_features


def _logit_targets(model, rm: ReplacementModel, answer, wrong, cfg: GraphConfig):
    """(token ids, probabilities, unembedding directions minus their mean) of the target logits."""
    probs = rm.logits.float().softmax(-1)
    if answer is not None:
        ids = [single_token(model, answer)] + ([] if wrong is None else [single_token(model, wrong, "wrong answer")])
        if len(set(ids)) < len(ids):
            raise BadValueError(f"the wrong answer {wrong!r} is the same token as the answer {answer!r}")
    else:
        top = probs.sort(descending=True)
        k = int(torch.searchsorted(top.values.cumsum(0), torch.tensor(cfg.desired_logit_prob))) + 1
        ids = top.indices[: min(k, cfg.max_n_logits)].tolist()
    return ids, probs[ids].cpu(), rm.unembed_vectors(ids)


class _Rows:
    """Rows of targets, streamed in batches: (layers, positions, vectors) -> source_rows."""

    def __init__(self, rm: ReplacementModel, active: ActiveFeatures, batch: int):
        self.rm, self.active, self.batch = rm, active, batch

    def feature_targets(self, idx: torch.Tensor):
        """(layers, positions, encoder vectors) of active features idx, all on one layer."""
        a = self.active
        layer = int(a.layer[idx[0]])
        vecs = self.rm.tcs[layer].encoder_vectors(a.latent[idx], self.rm.x[layer].dtype)
        return a.layer[idx], a.pos[idx], vecs

    def batch_rows(self, layers, positions, vectors) -> torch.Tensor:
        return source_rows(self.rm, self.active, self.rm.backward(layers, positions, vectors, copies=self.batch))

    def of(self, layers, positions, vectors):
        """Rows of the given targets, one batch at a time."""
        for start in range(0, layers.numel(), self.batch):
            sl = slice(start, start + self.batch)
            yield self.batch_rows(layers[sl], positions[sl], vectors[sl])

    def of_features(self, idx: torch.Tensor):
        """(chunk, rows) of active features idx (all on one layer), one batch at a time."""
        for start in range(0, idx.numel(), self.batch):
            chunk = idx[start : start + self.batch]
            yield chunk, self.batch_rows(*self.feature_targets(chunk))


def _sweep(rows: _Rows, logits: tuple, cfg: GraphConfig, store: bool):
    """(chosen feature indices, their rows or None, the logit rows): the layer-by-layer choice of rows."""
    rm, active = rows.rm, rows.active
    layers, positions, vecs, weights = logits
    logit_rows = torch.cat(list(rows.of(layers, positions, vecs)))
    rm.release()  # each forward pass held serves one layer's targets only: one is held at a time
    running = weights.to(logit_rows.dtype) @ inf.normalise(logit_rows)  # each source column's influence so far
    budget = cfg.max_feature_nodes or len(active)
    chosen, stored = [], []
    for layer in reversed(range(rm.L)):
        idx = active.at(layer)
        idx = idx[active.has_row[idx] & (running[idx] > 0)]
        quota = math.ceil((budget - sum(c.numel() for c in chosen)) / (layer + 1))
        idx = idx[running[idx].argsort(descending=True)[:quota]].sort().values
        for chunk, r in rows.of_features(idx):
            running += (running[chunk].clone()[:, None] * inf.normalise(r)).sum(0)
            if store:
                stored.append(r)
        chosen.append(idx)
        rm.release()
    order = torch.cat(chosen).argsort()
    return torch.cat(chosen)[order], torch.cat(stored)[order] if store and stored else None, logit_rows


def _recompute(rows: _Rows, chosen: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """The chosen features' rows computed again, each batch cut to the chosen columns at once: the memory is
    [rows x chosen sources] plus one batch's full rows, never [rows x all active sources]."""
    active, out = rows.active, []
    for layer in range(rows.rm.L):
        out += [r[:, cols] for _, r in rows.of_features(chosen[active.layer[chosen] == layer])]
        rows.rm.release()
    return torch.cat(out) if out else torch.zeros(0, cols.numel(), dtype=rows.rm.x[0].dtype)


def build_graph(model, transcoders, prompt, answer=None, wrong_answer=None, cfg: GraphConfig | None = None, **options):
    """The attribution graph of `prompt` through `transcoders` (a transcoder set folder, or a list of
    replacement.Transcoder). Targets: the answer (and wrong answer) logits, or the top logits covering
    cfg.desired_logit_prob. options override GraphConfig fields, e.g. build_graph(m, tcs, p, node_threshold=0.7)."""
    cfg = dataclasses.replace(cfg or GraphConfig(), **options)
    tcs = (
        transcoders
        if isinstance(transcoders, list)
        else load_transcoders(transcoders, device=model.cfg.device, model=model)
    )
    tokens = tokens_of(model, prompt, "prompt")
    rm = ReplacementModel(model, tcs, tokens)
    active = ActiveFeatures.of(rm)
    ids, probs, vecs = _logit_targets(model, rm, answer, wrong_answer, cfg)
    n = len(ids)
    logits = (torch.full((n,), rm.L), torch.full((n,), rm.P - 1), vecs, probs)
    n_all = len(active) + rm.L * rm.P + rm.P
    n_rows = min(cfg.max_feature_nodes or len(active), int(active.has_row.sum())) + n
    store = n_rows * n_all * 4 <= cfg.max_matrix_mib * 2**20
    rows = _Rows(rm, active, cfg.batch_size)
    chosen, feature_rows, logit_rows = _sweep(rows, logits, cfg, store)
    cols = torch.cat([chosen, torch.arange(len(active), n_all)])
    feature_rows = _recompute(rows, chosen, cols) if feature_rows is None else feature_rows[:, cols]
    g = AttributionGraph(
        tokens=tokens.tolist(),
        str_tokens=str_tokens(model, tokens),
        prompt=prompt if isinstance(prompt, str) else None,
        n_layers=rm.L,
        n_heads=model.cfg.n_heads,
        features=torch.stack([active.layer, active.pos, active.latent], 1)[chosen].cpu(),
        activations=active.act[chosen].float().cpu(),
        logit_tokens=ids,
        logit_probs=probs.float(),
        logit_strs=str_tokens(model, torch.tensor(ids)),
        adjacency=torch.cat([feature_rows, logit_rows[:, cols]]).float().cpu(),
        config=asdict(cfg),
        n_active=len(active),
        model_id=model_id(model),
    )
    w = g.logit_probs
    g.pruned = inf.prune(g.adjacency, g.n_features, g.n_pos, w, cfg.node_threshold, cfg.edge_threshold)
    g.scores = inf.graph_scores(g.adjacency, g.n_features, g.n_errors, w)
    if cfg.heads:
        g.heads = graph_heads.split_edges(rm, g, g.pruned.edge_mask, cfg.batch_size)
    rm.release()
    return g
