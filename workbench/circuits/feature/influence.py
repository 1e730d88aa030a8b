"""Influence, pruning and the graph scores of an attribution graph (docs/methods.md §11), with circuit-tracer's
definitions, on the graph's compact adjacency: rows are the targets (features, then logits), columns the sources
(features, error nodes, token embeddings), so the all-zero rows of errors and tokens and columns of logits of
circuit-tracer's square matrix are never stored.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from workbench.circuits.feature.graph_config import check_threshold


def normalise(a: torch.Tensor) -> torch.Tensor:
    """|A| with each row scaled to sum 1 (rows of zeros stay zero)."""
    a = a.abs()
    return a.div_(a.sum(1, keepdim=True).clamp_min(1e-10))  # in place on the fresh |A|: one copy, not two


def influence(a_hat: torch.Tensor, n_features: int, logit_weights: torch.Tensor) -> torch.Tensor:
    """[n_sources]: w (Â + Â² + ...) over the source columns. Edges run from lower layers to higher ones, so the
    series ends after at most n_layers + 1 terms."""
    cur = logit_weights.to(a_hat.dtype) @ a_hat[n_features:]
    total = cur.clone()
    for _ in range(10_000):
        cur = cur[:n_features] @ a_hat[:n_features]
        if not cur.any():
            return total
        total += cur
    raise RuntimeError("influence did not converge: the adjacency has a cycle")


def split_columns(adj: torch.Tensor, n_features: int, logit_weights, first: int, parts: torch.Tensor) -> tuple:
    """(first part [n], second part [n]) of the influence of columns first..first+n whose direct effects split
    into two (parts [rows, n]: the second part of each entry; the first is the rest), e.g. a token embedding's
    token and position. Each target row passes on its share of a column's influence (its own influence times the
    column's normalised entry) to the parts by their |direct effect|, so the two sum to the column's influence
    and every other node's influence (and the pruning) is that of the unsplit graph."""
    a_hat = normalise(adj)
    row_weight = torch.cat([influence(a_hat, n_features, logit_weights)[:n_features], logit_weights.to(adj.dtype)])
    per_row = a_hat[:, first : first + parts.shape[1]] * row_weight[:, None]
    second = parts.abs()
    rest = (adj[:, first : first + parts.shape[1]] - parts).abs()
    share = second / (rest + second).clamp_min(1e-30)
    second_inf = (per_row * share).sum(0)
    return per_row.sum(0) - second_inf, second_inf


def cut(scores: torch.Tensor, share: float) -> torch.Tensor:
    """The score at which the largest scores first cover `share` of the total (circuit-tracer's find_threshold)."""
    s = torch.from_numpy(np.sort(scores.detach().flatten().cpu().numpy())).flip(0)  # values only: torch.sort
    # would also hold int64 indices, twice the scores' size (1.2 GB for a 7,500-row graph of 1,024 tokens)
    cum = torch.cumsum(s, 0) / s.sum().clamp_min(1e-30)
    return s[min(int(torch.searchsorted(cum, torch.tensor(share, dtype=cum.dtype))), s.numel() - 1)]


class Pruned(NamedTuple):
    node_mask: torch.Tensor  # [n_nodes] bool: features, errors, tokens, logits
    edge_mask: torch.Tensor  # [n_rows, n_sources] bool, like the adjacency
    cumulative: torch.Tensor  # [n_nodes] the cumulative share of influence at each node's rank


def prune(adj: torch.Tensor, n_features: int, n_tokens: int, logit_weights: torch.Tensor, node_t, edge_t) -> Pruned:
    """circuit-tracer's prune_graph: keep the nodes covering node_t of the influence (tokens and logits always),
    then the edges covering edge_t of the edge influence among them, then drop features and errors left without
    an outgoing edge and features without an incoming one, until nothing changes."""
    node_t, edge_t = check_threshold("node_threshold", node_t), check_threshold("edge_threshold", edge_t)
    n_rows, n_src = adj.shape
    n_logits = n_rows - n_features
    node_inf = torch.cat([influence(normalise(adj), n_features, logit_weights), adj.new_zeros(n_logits)])
    node_mask = node_inf >= cut(node_inf, node_t)
    node_mask[n_src - n_tokens :] = True
    row_keep = torch.cat([node_mask[:n_features], node_mask[n_src:]])
    a_hat = normalise(adj * row_keep[:, None] * node_mask[None, :n_src])
    row_weight = torch.cat([influence(a_hat, n_features, logit_weights)[:n_features], logit_weights.to(adj.dtype)])
    edge_scores = a_hat.mul_(row_weight[:, None])  # in place: a long prompt's graph holds few copies of it
    edge_mask = edge_scores >= cut(edge_scores, edge_t)
    n_inner = n_src - n_tokens  # features and errors: they need an outgoing edge
    while True:
        old = node_mask.clone()
        node_mask[:n_inner] &= edge_mask[:, :n_inner].any(0)
        node_mask[:n_features] &= edge_mask[:n_features].any(1)
        if torch.equal(old, node_mask):
            break
        edge_mask &= torch.cat([node_mask[:n_features], node_mask[n_src:]])[:, None] & node_mask[None, :n_src]
    order = torch.sort(node_inf, descending=True)
    cumulative = torch.empty_like(node_inf)
    cumulative[order.indices] = torch.cumsum(order.values, 0) / order.values.sum().clamp_min(1e-30)
    return Pruned(node_mask, edge_mask, cumulative)


def graph_scores(adj: torch.Tensor, n_features: int, n_errors: int, logit_weights: torch.Tensor) -> dict:
    """circuit-tracer's replacement and completeness scores (docs/methods.md §11): the share of the tokens' and
    errors' influence that is the tokens', and the influence-weighted share of each node's input not from errors."""
    a_hat = normalise(adj)
    inf = influence(a_hat, n_features, logit_weights)
    err = slice(n_features, n_features + n_errors)
    tok, error = inf[n_features + n_errors :].sum(), inf[err].sum()
    n_src = adj.shape[1]
    non_error = torch.ones(n_src + adj.shape[0] - n_features, dtype=adj.dtype)
    rows = 1 - a_hat[:, err].sum(1)
    non_error[:n_features] = rows[:n_features]
    non_error[n_src:] = rows[n_features:]
    out_inf = torch.cat([inf, logit_weights.to(adj.dtype)])
    return {
        "replacement": float(tok / (tok + error).clamp_min(1e-30)),
        "completeness": float((non_error * out_inf).sum() / out_inf.sum().clamp_min(1e-30)),
    }
