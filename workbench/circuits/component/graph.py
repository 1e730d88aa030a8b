"""The computational graph of a TransformerLens model (docs/methods.md §6), as torch tensors.

Writers (sources): `input`, every head `a{l}.h{h}`, every MLP `m{l}`.
Readers (destinations): each head's query/key/value input, each MLP input, `logits`.
An edge joins every writer to every later reader, named `a0.h1->a3.h2<q>` (the names, their order
and the edge set are schema.GraphShape's, which reads files without torch). Grouped-query attention
keeps its grouping: keys and values are read once per KV head, so K/V readers are the KV groups,
`a3.kv0<k>` (a group shares one key/value input, so patching it per head would not be a real
intervention). For plain multi-head attention a group is a head and the names are `a3.h2<k>`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from workbench.circuits.schema import GraphShape
from workbench.errors import BadValueError


@dataclass(frozen=True)
class Graph(GraphShape):
    """The graph of schema.GraphShape (its names, order and edges) with the torch views the engine uses."""

    @classmethod
    def from_model(cls, model_or_cfg) -> Graph:
        cfg = getattr(model_or_cfg, "cfg", model_or_cfg)
        kv = cfg.n_key_value_heads
        if kv is None or getattr(cfg, "ungroup_grouped_query_attention", False):
            kv = cfg.n_heads
        return cls(cfg.n_layers, cfg.n_heads, kv, cfg.d_model, bool(cfg.parallel_attn_mlp), bool(cfg.attn_only))

    @cached_property
    def writer_layer(self) -> torch.Tensor:
        """Per writer: (layer, slot) as 2*layer+slot with slot 0 = attention, 1 = MLP; input = -1."""
        return torch.from_numpy(self.writer_codes)

    def reader_slice(self, layer: int, kind: str) -> slice:
        """Index range of one layer's q / k / v / mlp readers in `readers`."""
        per = self.n_heads + 2 * self.n_kv_heads + (0 if self.attn_only else 1)
        start = layer * per
        offsets = {
            "q": (0, self.n_heads),
            "k": (self.n_heads, self.n_kv_heads),
            "v": (self.n_heads + self.n_kv_heads, self.n_kv_heads),
            "mlp": (self.n_heads + 2 * self.n_kv_heads, 1),
        }
        off, n = offsets[kind]
        return slice(start + off, start + off + n)

    @cached_property
    def reader_layer(self) -> torch.Tensor:
        """Per reader, the same 2*layer+slot code as `writer_layer` (logits = 2*n_layers)."""
        return torch.from_numpy(self.reader_codes)

    @cached_property
    def edge_mask(self) -> torch.Tensor:
        """[n_writers, n_readers] bool: which writer reaches which reader (writes strictly before it)."""
        return torch.from_numpy(self.edge_matrix)

    @cached_property
    def edge_index(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(writer index, reader index) per edge, in canonical (row-major) order."""
        src, dst = self.edge_pairs
        return torch.from_numpy(src), torch.from_numpy(dst)

    def edges_to_matrix(self, values: torch.Tensor) -> torch.Tensor:
        """Scatter per-edge values [..., E] into [..., n_writers, n_readers] (zeros off-graph)."""
        out = values.new_zeros(*values.shape[:-1], len(self.writers), len(self.readers))
        src, dst = self.edge_index
        out[..., src.to(values.device), dst.to(values.device)] = values
        return out

    def matrix_to_edges(self, matrix: torch.Tensor) -> torch.Tensor:
        src, dst = self.edge_index
        return matrix[..., src.to(matrix.device), dst.to(matrix.device)]

    def check_same(self, other: Graph, what: str = "circuit") -> None:
        if self != other:
            raise BadValueError(
                f"the {what} was made for a model of shape {other.config()}, but this model has shape {self.config()}"
            )
