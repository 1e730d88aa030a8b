"""Turn edge scores into circuits: top-k, greedy-from-logits (MIB's apply_greedy) and pruning.

Every circuit is pruned: an edge stays only if its writer is reachable from `input` and its reader
reaches `logits` through circuit edges, so edge counts never include dead edges.
"""

from __future__ import annotations

import heapq
from functools import lru_cache

import torch

from workbench.circuits.component.graph import Graph


@lru_cache(maxsize=16)
def incidence(graph: Graph):
    """Node-level incidence: writer -> node id, reader -> node ids (a KV group reader belongs to several heads)."""
    nodes = {n: i for i, n in enumerate(graph.nodes)}
    src, dst = graph.edge_index
    parent = src.clone()  # writers are the first len(writers) nodes
    child = torch.zeros(graph.n_edges, len(nodes), dtype=torch.bool)
    for r, reader in enumerate(graph.readers):
        ids = [nodes[n] for n in graph.reader_node(reader)] if reader != "logits" else [nodes["logits"]]
        for i in ids:
            child[dst == r, i] = True
    return parent, child


@lru_cache(maxsize=16)
def _child_float(graph: Graph) -> tuple[torch.Tensor, torch.Tensor]:
    """incidence's child matrix as float and its transpose, made once per graph (prune multiplies by them every
    round; on a 70,000-edge graph converting it was most of a prune)."""
    child = incidence(graph)[1].float()
    return child, child.T.contiguous()


@lru_cache(maxsize=16)
def _into(graph: Graph) -> list[list[int]]:
    """Per node, the edges reading into it in edge order (greedy's expansion lists), made once per graph."""
    into = [[] for _ in graph.nodes]
    for n, e in incidence(graph)[1].T.nonzero().tolist():  # sorted by node, then edge
        into[n].append(e)
    return into


def prune(graph: Graph, mask: torch.Tensor) -> torch.Tensor:
    """Drop edges not on an input -> logits path (works on [E] or [n, E] masks)."""
    parent, _ = incidence(graph)
    child_f, child_t = _child_float(graph)
    m = mask.clone().reshape(-1, graph.n_edges)
    n_nodes = len(graph.nodes)
    logits, inp = n_nodes - 1, 0
    while True:
        # a node is alive if it has an incoming (or is input) and an outgoing (or is logits) circuit edge
        has_out = (
            torch.zeros(m.shape[0], n_nodes).scatter_reduce_(1, parent.expand(m.shape[0], -1), m.float(), reduce="amax")
            > 0
        )
        has_in = (m.float() @ child_f) > 0
        has_in[:, inp] = True
        has_out[:, logits] = True
        alive = has_in & has_out
        keep = alive.gather(1, parent.expand(m.shape[0], -1)) & ((alive.float() @ child_t) > 0)
        new = m & keep
        if torch.equal(new, m):
            return new.reshape(mask.shape)
        m = new


def topk(graph: Graph, ranking: torch.Tensor, k: int) -> torch.Tensor:
    mask = torch.zeros(graph.n_edges, dtype=torch.bool)
    mask[torch.argsort(ranking, descending=True, stable=True)[:k]] = True
    return prune(graph, mask)


def greedy(graph: Graph, ranking: torch.Tensor, k: int) -> torch.Tensor:
    """Grow from the logits: repeatedly take the best edge whose reader's node is already in the circuit."""
    parent, into = incidence(graph)[0].tolist(), _into(graph)
    r = ranking.tolist()
    heap = [(-r[e], e) for e in into[len(graph.nodes) - 1]]
    heapq.heapify(heap)
    in_graph = {len(graph.nodes) - 1}
    taken: set[int] = set()
    while heap and len(taken) < k:
        _, e = heapq.heappop(heap)
        if e in taken:
            continue
        taken.add(e)
        p = parent[e]
        if p not in in_graph:
            in_graph.add(p)
            for e2 in into[p]:
                heapq.heappush(heap, (-r[e2], e2))
    mask = torch.zeros(graph.n_edges, dtype=torch.bool)
    mask[list(taken)] = True
    return prune(graph, mask)


def node_names(graph: Graph, mask: torch.Tensor) -> list[str]:
    """Nodes touched by the circuit's edges, in graph order."""
    parent, child = incidence(graph)
    m = mask.bool()
    used = torch.zeros(len(graph.nodes), dtype=torch.bool)
    used[parent[m]] = True
    used |= child[m].any(0)
    return [n for n, u in zip(graph.nodes, used.tolist()) if u]
