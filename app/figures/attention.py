"""Attention figures as pure functions (no Streamlit): one head's pattern, and a sparse model's open edges."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go


def _labels(tokens: list[str]) -> list[str]:
    """Unique axis labels (Plotly merges equal category names): position and token."""
    return [f"{i}:{t}" for i, t in enumerate(tokens)]


def attention_heatmap(pattern, tokens: list[str], title: str, height: int = 380) -> go.Figure:
    """A [query, key] attention pattern; the upper triangle (future keys) is blank, exact zeros show as 0."""
    a = np.asarray(pattern, dtype=float)
    n = len(a)
    z = np.where(np.tri(n, dtype=bool), a, np.nan)
    lab = _labels(tokens[:n])
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=lab,
            y=lab,
            zmin=0,
            zmax=1,
            colorscale="Blues",
            hovertemplate="query %{y}<br>key %{x}<br>attention %{z:.3f}<extra></extra>",
        )
    )
    fig.update_layout(
        title=title,
        height=height,
        margin=dict(l=10, r=10, t=40, b=10),
        yaxis=dict(autorange="reversed", title="query"),
        xaxis=dict(title="key"),
    )
    return fig


def open_fraction_heatmap(per_head, per_layer, keys_per_query=None) -> go.Figure:
    """Open-edge fraction per (layer, head) of a gated model, the layer mean in the row label."""
    a = np.asarray(per_head, dtype=float)
    text = None
    if keys_per_query is not None:
        k = np.asarray(keys_per_query, dtype=float)
        text = [[f"{100 * a[i, j]:.1f}%<br>{k[i, j]:.2f} keys" for j in range(a.shape[1])] for i in range(a.shape[0])]
    fig = go.Figure(
        go.Heatmap(
            z=100 * a,
            x=[f"h{j}" for j in range(a.shape[1])],
            y=[f"layer {i} ({100 * v:.1f}%)" for i, v in enumerate(per_layer)],
            text=text,
            texttemplate="%{text}" if text else None,
            colorscale="Oranges",
            zmin=0,
            colorbar=dict(title="% open"),
            hovertemplate="%{y} %{x}: %{z:.2f}% of causal pairs open<extra></extra>",
        )
    )
    fig.update_layout(
        title="open attention edges per head (% of causal query-key pairs; mean open keys per query)",
        height=120 + 45 * a.shape[0],
        margin=dict(l=10, r=10, t=40, b=10),
        yaxis=dict(autorange="reversed"),
    )
    return fig
