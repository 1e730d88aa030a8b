"""Attribution graphs on the local replacement model (docs/methods.md §11): `build_graph(model, transcoders,
prompt)` -> an `AttributionGraph` of the exact direct effects between active features, error nodes, token
embeddings and target logits, pruned by influence, with replacement / completeness scores and (with heads) each
kept edge split over the attention heads that carry it (graph_heads.py).

Rows are computed by backward passes batched over targets, from the logits down the layers: when a layer is
reached, every feature on it has its exact influence (all its targets lie above), so the features given a row
(`max_feature_nodes`, shared out over the layers left) are chosen then, and only the running influence of every
source column is kept. Each row is computed once and kept in chunks (row_store.py): in memory when [rows x all
active sources] fits `max_matrix_mib`, else in chunk files (cfg.work_dir, which a stopped build resumes from, or
a temporary folder), read back one at a time for the chosen columns, so memory stays at [rows x chosen sources]
plus one chunk.

By default (cfg.bos_nodes False) the graph has circuit-tracer's nodes: no features at position 0 (the start token)
and its error nodes' columns zero, so its kept nodes and links are circuit-tracer's (tests/circuits/feature/
test_tracer_export.py); with bos_nodes they are nodes too, and enter the influence normalisation.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import torch

from workbench.circuits.feature import graph_heads, graph_qk
from workbench.circuits.feature import influence as inf
from workbench.circuits.feature.graph_config import GraphConfig
from workbench.circuits.feature.replacement import ActiveFeatures, ReplacementModel, source_rows
from workbench.circuits.feature.row_store import BuildStopped, RowStore
from workbench.circuits.feature.transcoders import resolve
from workbench.circuits.inputs import single_token, str_tokens, tokens_of
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
    qk: dict | None = None  # graph_qk.qk_edges: each split edge's heads' QK attribution
    # absolute positions (hook_pos_embed): [rows, n_pos] the positional embedding's part of each token column
    # (the token's own part is the column minus it); None for rotary models, whose embedding is the token's only
    positions: torch.Tensor | None = None

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

    def embedding_parts(self) -> dict | None:
        """{"token": [rows, n_pos], "position": [rows, n_pos]}: each embedding column split into its token's and
        its position's direct effects (they sum to it), and "influence": {part: [n_pos]} (influence.split_columns,
        summing to each embedding node's influence); None without absolute positions."""
        if self.positions is None:
            return None
        first = self.n_features + self.n_errors
        column = self.adjacency[:, first:]
        parts = {"token": column - self.positions, "position": self.positions}
        token, position = inf.split_columns(self.adjacency, self.n_features, self.logit_probs, first, self.positions)
        return {**parts, "influence": {"token": token, "position": position}}


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
    """Rows of targets in chunks of whole batches: each chunk loaded from the store, else computed (one backward
    pass per batch) and stored."""

    def __init__(self, rm: ReplacementModel, active: ActiveFeatures, cfg: GraphConfig, store: RowStore):
        self.rm, self.active, self.batch, self.store, self.max_batches = (
            rm,
            active,
            cfg.batch_size,
            store,
            cfg.max_batches,
        )
        self.per_chunk = max(1, int(cfg.chunk_mib * 2**20 // (store.n_columns * 4 * self.batch))) * self.batch
        self.computed = 0  # backward batches run by this call (max_batches counts them)
        # first feature of each layer: a target read at layer L has no edge from features at layer >= L
        self.first = torch.searchsorted(active.layer, torch.arange(rm.L + 1))
        # the error nodes at position 0 (the start token), unless cfg.bos_nodes: zero, as circuit-tracer's
        self.dropped = None if cfg.bos_nodes else len(active) + torch.arange(rm.L) * rm.P
        self.n_all = len(active) + rm.L * rm.P + rm.P  # the graph's columns (then, with absolute positions, the
        # positional embedding's part of each token column, rm.pos_embed)

    def _compute(self, layers, positions, vectors) -> torch.Tensor:
        out = torch.empty(layers.numel(), self.store.n_columns, dtype=self.rm.x[0].dtype)
        for start in range(0, layers.numel(), self.batch):
            sl = slice(start, start + self.batch)
            grads = self.rm.backward(layers[sl], positions[sl], vectors[sl], copies=self.batch)
            cut = dict(below=int(layers[sl].max()), n_pos=self.rm.cut(positions[sl]))  # the rest is zero
            out[sl] = source_rows(self.rm, self.active, grads, positions=True, **cut)
            if self.dropped is not None:
                out[sl, self.dropped] = 0
            self.computed += 1
        return out

    def chunks(self, name: str, layers, positions, vectors):
        """(slice of the targets, their rows) per chunk of the targets (all read at one layer)."""
        for index, start in enumerate(range(0, layers.numel(), self.per_chunk)):
            sl = slice(start, start + self.per_chunk)
            rows = self.store.get(name, index)
            if rows is None:
                if self.max_batches is not None and self.computed >= self.max_batches:
                    raise BuildStopped(
                        f"the build stopped after max_batches={self.max_batches} backward batches; its rows so far "
                        f"are in {str(self.store.folder)!r}: run it again with the same arguments to continue"
                    )
                rows = self._compute(layers[sl], positions[sl], vectors[sl])
                rows = self.store.put(name, index, rows, int(self.first[int(layers.max())]))
            yield sl, rows
        self.rm.release()  # each forward pass held serves one layer's targets only: one is held at a time


def _sweep(rows: _Rows, logits: tuple, cfg: GraphConfig):
    """(chosen feature indices, the store's (name, index) of their chunks in the same order, the logit rows): the
    layer-by-layer choice of rows."""
    rm, active = rows.rm, rows.active
    layers, positions, vecs, weights = logits
    logit_rows = torch.cat([r for _, r in rows.chunks("logits", layers, positions, vecs)])
    n_all = rows.n_all  # influence is of the graph's own columns, not of the positional parts after them
    running = weights.to(logit_rows.dtype) @ inf.normalise(logit_rows[:, :n_all])  # each column's influence so far
    budget = cfg.max_feature_nodes or len(active)
    chosen, parts = [], []
    for layer in reversed(range(rm.L)):
        idx = active.at(layer)
        idx = idx[active.has_row[idx] & (running[idx] > 0)]
        quota = math.ceil((budget - sum(c.numel() for c in chosen)) / (layer + 1))
        idx = idx[running[idx].argsort(descending=True)[:quota]].sort().values
        vecs = rm.tcs.encoder_vectors(layer, active.latent[idx], rm.x[layer].dtype)  # once per layer: a pass of
        # the encoder over the input basis, as costly as a backward pass at 24,576 latents
        for index, (sl, r) in enumerate(rows.chunks(f"L{layer}", active.layer[idx], active.pos[idx], vecs)):
            running += running[idx[sl]] @ inf.normalise(r[:, :n_all])
            parts.append((f"L{layer}", index))
        chosen.append(idx)
    return torch.cat(chosen), parts, logit_rows


def _adjacency(store: RowStore, chosen: torch.Tensor, parts: list, logit_rows, cols: torch.Tensor) -> torch.Tensor:
    """[chosen features (in index order), then logits x cols]: the chunks read back one at a time, each cut to
    cols at once and written into the one matrix (no second copy of it)."""
    out = torch.empty(chosen.numel() + logit_rows.shape[0], cols.numel(), dtype=torch.float32)
    rank = chosen.argsort().argsort()  # where each chosen feature's row goes
    start = 0
    for name, index in parts:
        r = store.get(name, index, rebuild=False)[:, cols]  # read in this call's sweep: damaged since, refused
        out[rank[start : start + r.shape[0]]] = r.float()
        start += r.shape[0]
    out[chosen.numel() :] = logit_rows[:, cols].float()
    return out


@contextmanager
def _row_folder(cfg: GraphConfig, n_bytes: int):
    """Where the rows go: cfg.work_dir; memory (None) when they fit max_matrix_mib; else a temporary folder."""
    if cfg.work_dir is not None or n_bytes <= cfg.max_matrix_mib * 2**20:
        yield cfg.work_dir
        return
    with tempfile.TemporaryDirectory(prefix="workbench-graph-rows-") as folder:
        yield folder


def _build_key(model, tokens, ids, cfg: GraphConfig, rm: ReplacementModel) -> dict:
    """What a work folder's rows are of: a build with another key cannot reuse them."""
    fields = ("max_feature_nodes", "batch_size", "chunk_mib", "bos_nodes")
    key = {
        "model": model_id(model),
        "transcoders": rm.tcs.fingerprint(),
        "tokens": tokens.tolist(),
        "logit_tokens": ids,
    }
    split = {} if rm.pos_embed is None else {"positions": True}  # the rows hold the positional parts too
    return {**key, **{f: getattr(cfg, f) for f in fields}, "position_step": rm.position_step, **split}


def build_graph(model, transcoders, prompt, answer=None, wrong_answer=None, cfg: GraphConfig | None = None, **options):
    """The attribution graph of `prompt` through `transcoders` (a transcoders.Transcoders, a transcoder set
    folder, or a list of transcoders.Transcoder). Targets: the answer (and wrong answer) logits, or the top logits covering
    cfg.desired_logit_prob. options override GraphConfig fields, e.g. build_graph(m, tcs, p, node_threshold=0.7)."""
    cfg = dataclasses.replace(cfg or GraphConfig(), **options)
    tokens = tokens_of(model, prompt, "prompt")
    rm = ReplacementModel(model, resolve(transcoders, model), tokens, cfg.position_step)
    active = ActiveFeatures.of(rm)
    if not cfg.bos_nodes:  # circuit-tracer's node set: no feature or error node at the start token
        active = active.from_position(1)
    ids, probs, vecs = _logit_targets(model, rm, answer, wrong_answer, cfg)
    n = len(ids)
    logits = (torch.full((n,), rm.L), torch.full((n,), rm.P - 1), vecs, probs)
    n_all = len(active) + rm.L * rm.P + rm.P
    n_split = 0 if rm.pos_embed is None else rm.P  # the positional parts' columns, after the graph's
    n_rows = min(cfg.max_feature_nodes or len(active), int(active.has_row.sum())) + n
    with _row_folder(cfg, n_rows * (n_all + n_split) * 4) as folder:
        store = RowStore(folder, _build_key(model, tokens, ids, cfg, rm), n_all + n_split, len(active))
        chosen, parts, logit_rows = _sweep(_Rows(rm, active, cfg, store), logits, cfg)
        active.forget_writes()
        cols = torch.cat([chosen.sort().values, torch.arange(len(active), n_all + n_split)])
        adjacency = _adjacency(store, chosen, parts, logit_rows, cols)
    positions = adjacency[:, adjacency.shape[1] - n_split :].clone() if n_split else None
    adjacency = adjacency[:, : adjacency.shape[1] - n_split].contiguous() if n_split else adjacency
    chosen = cols[: chosen.numel()]
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
        adjacency=adjacency,
        config=asdict(cfg),
        n_active=len(active),
        model_id=model_id(model),
        positions=positions,
    )
    w = g.logit_probs
    g.pruned = inf.prune(g.adjacency, g.n_features, g.n_pos, w, cfg.node_threshold, cfg.edge_threshold)
    g.scores = inf.graph_scores(g.adjacency, g.n_features, g.n_errors, w)
    if cfg.heads:
        uses = graph_qk.Uses(g.n_heads) if cfg.qk else None
        g.heads = graph_heads.split_edges(rm, g, g.pruned.edge_mask, cfg.batch_size, uses)
        if cfg.qk:
            g.qk = graph_qk.qk_scores(rm, g, uses, cfg.batch_size)
    rm.release()
    return g
