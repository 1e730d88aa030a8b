"""The computational graph of a TransformerLens model (docs/methods.md §6).

Writers (sources): `input`, every head `a{l}.h{h}`, every MLP `m{l}`.
Readers (destinations): each head's query/key/value input, each MLP input, `logits`.
An edge joins every writer to every later reader, named `a0.h1->a3.h2<q>`. Grouped-query attention
keeps its grouping: keys and values are read once per KV head, so K/V readers are the KV groups,
`a3.kv0<k>` (a group shares one key/value input, so patching it per head would not be a real
intervention). For plain multi-head attention a group is a head and the names are `a3.h2<k>`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from workbench.errors import UserError


class GraphMismatchError(UserError, ValueError):
    """A circuit or file describes a different model shape than the graph it is used with."""


@dataclass(frozen=True)
class Graph:
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_model: int
    parallel_attn_mlp: bool = False
    attn_only: bool = False

    @classmethod
    def from_model(cls, model_or_cfg) -> Graph:
        cfg = getattr(model_or_cfg, "cfg", model_or_cfg)
        kv = cfg.n_key_value_heads
        if kv is None or getattr(cfg, "ungroup_grouped_query_attention", False):
            kv = cfg.n_heads
        return cls(cfg.n_layers, cfg.n_heads, kv, cfg.d_model, bool(cfg.parallel_attn_mlp), bool(cfg.attn_only))

    def config(self) -> dict:
        return dict(
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            n_kv_heads=self.n_kv_heads,
            d_model=self.d_model,
            parallel_attn_mlp=self.parallel_attn_mlp,
            attn_only=self.attn_only,
        )

    @property
    def grouped(self) -> bool:
        return self.n_kv_heads != self.n_heads

    # ------------------------------------------------------------------ nodes
    def head(self, layer: int, h: int) -> str:
        return f"a{layer}.h{h}"

    def kv_name(self, layer: int, g: int) -> str:
        return f"a{layer}.kv{g}" if self.grouped else f"a{layer}.h{g}"

    @cached_property
    def writers(self) -> list[str]:
        """Source nodes in forward order: `input`, then per layer its heads then its MLP."""
        out = ["input"]
        for layer in range(self.n_layers):
            out += [self.head(layer, h) for h in range(self.n_heads)]
            if not self.attn_only:
                out.append(f"m{layer}")
        return out

    @cached_property
    def writer_layer(self) -> torch.Tensor:
        """Per writer: (layer, slot) as 2*layer+slot with slot 0 = attention, 1 = MLP; input = -1."""
        return torch.tensor([-1] + [2 * int(w[1:].split(".")[0]) + (w[0] == "m") for w in self.writers[1:]])

    @cached_property
    def readers(self) -> list[str]:
        """Destination inputs: per layer q (per head), k and v (per KV group), the MLP; then `logits`."""
        out = []
        for layer in range(self.n_layers):
            out += [f"{self.head(layer, h)}<q>" for h in range(self.n_heads)]
            out += [f"{self.kv_name(layer, g)}<k>" for g in range(self.n_kv_heads)]
            out += [f"{self.kv_name(layer, g)}<v>" for g in range(self.n_kv_heads)]
            if not self.attn_only:
                out.append(f"m{layer}")
        return out + ["logits"]

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
        codes = []
        for layer in range(self.n_layers):
            codes += [2 * layer] * (self.n_heads + 2 * self.n_kv_heads)
            if not self.attn_only:
                codes.append(2 * layer + 1)
        return torch.tensor(codes + [2 * self.n_layers])

    @cached_property
    def edge_mask(self) -> torch.Tensor:
        """[n_writers, n_readers] bool: which writer reaches which reader (writes strictly before it)."""
        w, r = self.writer_layer[:, None], self.reader_layer[None, :]
        mask = w < r
        if self.parallel_attn_mlp:  # the MLP reads resid_pre, not the same layer's attention output
            mlp_reader = (r % 2 == 1) & (r < 2 * self.n_layers)
            mask &= ~(mlp_reader & (w == r - 1))
        return mask

    @cached_property
    def edge_index(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(writer index, reader index) per edge, in canonical (row-major) order."""
        src, dst = self.edge_mask.nonzero(as_tuple=True)
        return src, dst

    @property
    def n_edges(self) -> int:
        return len(self.edge_index[0])

    @cached_property
    def edges(self) -> list[str]:
        src, dst = self.edge_index
        return [f"{self.writers[s]}->{self.readers[d]}" for s, d in zip(src.tolist(), dst.tolist())]

    @cached_property
    def edge_ids(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.edges)}

    @cached_property
    def nodes(self) -> list[str]:
        return self.writers + ["logits"]

    def reader_node(self, reader: str) -> list[str]:
        """The nodes a reader belongs to (a KV group belongs to each of its heads)."""
        base = reader.split("<")[0]
        if ".kv" not in base:
            return [base]
        layer, g = base[1:].split(".kv")
        per = self.n_heads // self.n_kv_heads
        return [self.head(int(layer), int(g) * per + i) for i in range(per)]

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
            raise GraphMismatchError(
                f"the {what} was made for a model of shape {other.config()}, but this model has shape {self.config()}"
            )
