"""The sparse-attention paper's circuit-edge count, read as literally as its abstract allows (issue 50, ask 4).

The abstract (arXiv 2512.05865): "task-specific circuits involve far fewer components (attention heads and MLPs)
with up to 100x fewer edges connecting them". The paper's circuit section could not be read here (only its
abstract and opening are in reach), so what an edge is stays an open choice, recorded in `PaperEdgeConfig`:

  endpoints  "components": an edge joins two components, heads and MLPs only (the abstract's words);
             "all": the embedding and the logits count as components too.
  per        "component": one edge per (writer component, reader component) pair of the circuit, however many of
             the reader's q/k/v inputs it reaches (the workbench's own count splits an edge into a head by q/k/v);
             "entry": each such pair counted once per token-level path it can use: a pair into a head through its
             key or value counts the head's open (query, key) attention entries on this prompt, through its query
             only, or into an MLP, one per position; into the logits, one. This is where sparse attention enters:
             a dense head has T(T+1)/2 open entries, a gated one about keys-per-query x T.

    component_pairs(graph, mask, "components")       # distinct (writer, reader) component pairs in a circuit
    paper_edges(graph, mask, PaperEdgeConfig(...), open_entries=open_entry_counts(model, tokens))
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from workbench.circuits.schema import parse_reader
from workbench.config import Config
from workbench.errors import BadValueError

ENDPOINTS = ("components", "all")
RESOLVE = ("component", "entry")


@dataclass
class PaperEdgeConfig(Config):
    """The open choices of the paper's edge count (see the module doc); saved with every result."""

    error = BadValueError

    endpoints: str = field(
        default="components",
        metadata={"help": "heads and MLPs only, or also embedding and logits", "choices": ENDPOINTS},
    )
    per: str = field(
        default="component", metadata={"help": "one edge per component pair, or per open entry", "choices": RESOLVE}
    )


def _is_component(node: str) -> bool:
    return node.startswith(("a", "m"))


def pair_readers(graph, mask: torch.Tensor, endpoints: str = "components") -> dict[tuple[str, str], set[str]]:
    """(writer node, reader node) -> the reader inputs ("q", "k", "v", "mlp", "logits") the circuit's edges use
    between them. mask: bool per edge of `graph` (the circuit)."""
    PaperEdgeConfig(endpoints=endpoints)  # its check
    if mask.shape != (graph.n_edges,):
        raise BadValueError(f"the mask has shape {tuple(mask.shape)}, the graph has {graph.n_edges} edges")
    src, dst = graph.edge_index
    out: dict[tuple[str, str], set[str]] = {}
    for s, d in zip(src[mask].tolist(), dst[mask].tolist()):
        writer = graph.writers[s]
        for node, kind in parse_reader(graph.readers[d], graph.n_heads, graph.n_kv_heads):
            if endpoints == "components" and not (_is_component(writer) and _is_component(node)):
                continue
            out.setdefault((writer, node), set()).add(kind)
    return out


def component_pairs(graph, mask: torch.Tensor, endpoints: str = "components") -> int:
    """Distinct (writer component, reader component) pairs a circuit's edges join: the edges "connecting"
    its components, q/k/v merged."""
    return len(pair_readers(graph, mask, endpoints))


def _head_index(node: str) -> tuple[int, int]:
    layer, head = node[1:].split(".h")
    return int(layer), int(head)


def paper_edges(graph, mask: torch.Tensor, cfg: PaperEdgeConfig, open_entries=None, n_pos: int | None = None) -> int:
    """A circuit's edge count under `cfg` (the module doc). per "entry" needs open_entries ([n_layers, n_heads]
    open causal attention entries on the prompt, `open_entry_counts`) and n_pos (the prompt's length)."""
    pairs = pair_readers(graph, mask, cfg.endpoints)
    if cfg.per == "component":
        return len(pairs)
    if open_entries is None or n_pos is None:
        raise BadValueError("per 'entry' needs open_entries and n_pos (open_entry_counts on the prompt)")
    total = 0
    for (_, node), kinds in pairs.items():
        if node == "logits":
            total += 1
        elif node.startswith("a") and kinds & {"k", "v"}:
            total += int(open_entries[_head_index(node)])
        else:
            total += n_pos
    return total


@torch.no_grad()
def open_entry_counts(model, tokens: torch.Tensor) -> torch.Tensor:
    """[n_layers, n_heads] causal attention entries with weight > 0 on one prompt: every causal entry in a dense
    model (bar underflow), the gate's open ones in a gated model (a closed entry's weight is exactly 0)."""
    tokens = tokens.reshape(1, -1).to(model.cfg.device)
    names = [f"blocks.{i}.attn.hook_pattern" for i in range(model.cfg.n_layers)]
    _, cache = model.run_with_cache(tokens, names_filter=lambda n: n in names)
    n = tokens.shape[-1]
    causal = torch.ones(n, n, dtype=torch.bool, device=tokens.device).tril()
    return torch.stack([((cache[name][0] > 0) & causal).sum((-2, -1)) for name in names]).cpu()
