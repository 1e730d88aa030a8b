"""Attention figures as pure functions (no Streamlit): one head's pattern (closed gates in their own colour),
base - sparse differences, a layer's open/closed gate masks, a sparse model's open edges, and which heads
only one model's circuits use."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

# a closed gate is drawn in a hue outside the weight scale (Blues), so it never reads as a small weight
CLOSED = "#e6550d"
OPEN = "#08519c"


def _labels(tokens: list[str]) -> list[str]:
    """Unique axis labels (Plotly merges equal category names): position and token."""
    return [f"{i}:{t}" for i, t in enumerate(tokens)]


def _layout(fig: go.Figure, title: str, height: int) -> go.Figure:
    fig.update_layout(
        title=title,
        height=height,
        margin=dict(l=10, r=10, t=40, b=10),
        yaxis=dict(autorange="reversed", title="query"),
        xaxis=dict(title="key"),
    )
    return fig


def _square(z, lab: list[str], **kw) -> go.Heatmap:
    """A [query, key] heatmap over the prompt's positions."""
    return go.Heatmap(z=z, x=lab, y=lab, **kw)


def _closed_layer(closed, lab: list[str]) -> go.Heatmap:
    """The closed gates of one head as cells of one colour (NaN elsewhere: the layer below shows through)."""
    c = np.asarray(closed, dtype=bool) & np.tri(len(lab), dtype=bool)
    return _square(
        np.where(c, 1.0, np.nan),
        lab,
        colorscale=[[0, CLOSED], [1, CLOSED]],
        showscale=False,
        name="closed gate",
        hovertemplate="query %{y}<br>key %{x}<br>closed gate: weight exactly 0<extra></extra>",
    )


def attention_heatmap(pattern, tokens: list[str], title: str, height: int = 380, closed=None) -> go.Figure:
    """A [query, key] attention pattern; the upper triangle (future keys) is blank. closed: the head's
    closed gates [query, key], drawn in CLOSED over the weights (without it an exact 0 shows as 0)."""
    a = np.asarray(pattern, dtype=float)
    n = len(a)
    z = np.where(np.tri(n, dtype=bool), a, np.nan)
    lab = _labels(tokens[:n])
    fig = go.Figure(
        _square(
            z,
            lab,
            zmin=0,
            zmax=1,
            colorscale="Blues",
            hovertemplate="query %{y}<br>key %{x}<br>attention %{z:.3f}<extra></extra>",
        )
    )
    if closed is not None:
        fig.add_trace(_closed_layer(closed, lab))
    return _layout(fig, title, height)


def difference_heatmap(base, sparse, tokens: list[str], title: str, closed=None, height: int = 380) -> go.Figure:
    """base - sparse attention of one head on a diverging scale centred on 0 (red: the base attends more);
    the hover gives both weights and whether the sparse model's gate is closed."""
    b, s = np.asarray(base, dtype=float), np.asarray(sparse, dtype=float)
    n = len(b)
    causal = np.tri(n, dtype=bool)
    d = np.where(causal, b - s, np.nan)
    m = float(np.nanmax(np.abs(d))) if causal.any() else 0.0
    gate = np.zeros((n, n), dtype=bool) if closed is None else np.asarray(closed, dtype=bool)
    lab = _labels(tokens[:n])
    fig = go.Figure(
        _square(
            d,
            lab,
            zmid=0,
            zmin=-max(m, 1e-6),
            zmax=max(m, 1e-6),
            colorscale="RdBu_r",
            customdata=np.stack([b, s, np.where(gate, "closed", "open")], axis=-1),
            colorbar=dict(title="base − sparse"),
            hovertemplate="query %{y}<br>key %{x}<br>base %{customdata[0]:.3f} − sparse %{customdata[1]:.3f} = "
            "%{z:+.3f}<br>sparse gate %{customdata[2]}<extra></extra>",
        )
    )
    return _layout(fig, title, height)


def gate_masks(gates, tokens: list[str], layer: int, height: int = 300) -> go.Figure:
    """One layer's open/closed gates [head][query][key], one panel per head titled with its open count."""
    g = np.asarray(gates, dtype=bool)
    H, n = g.shape[0], g.shape[-1]
    causal = np.tri(n, dtype=bool)
    titles = [f"a{layer}.h{h}: {int((g[h] & causal).sum())} of {int(causal.sum())} open" for h in range(H)]
    fig = make_subplots(rows=1, cols=H, subplot_titles=titles, shared_yaxes=True, horizontal_spacing=0.02)
    lab = _labels(tokens[:n])
    for h in range(H):
        fig.add_trace(
            _square(
                np.where(causal, g[h].astype(float), np.nan),
                lab,
                zmin=0,
                zmax=1,
                colorscale=[[0, CLOSED], [0.5, CLOSED], [0.5, OPEN], [1, OPEN]],
                showscale=False,
                hovertemplate=f"h{h}<br>query %{{y}}<br>key %{{x}}<br>gate %{{z}} (1 open, 0 closed)<extra></extra>",
            ),
            row=1,
            col=h + 1,
        )
    fig.update_yaxes(autorange="reversed", showticklabels=False)
    fig.update_yaxes(showticklabels=True, row=1, col=1)
    fig.update_xaxes(showticklabels=False)
    fig.update_layout(
        title=f"layer {layer}: open (blue) and closed (orange) gates per head on this prompt",
        height=height,
        margin=dict(l=10, r=10, t=70, b=10),
    )
    return fig


def head_membership(base_heads: set[str], sparse_heads: set[str]) -> list[dict]:
    """Heads of two circuits, each marked as in both, only the base model's or only the sparse model's."""
    where = {h: "both" for h in base_heads & sparse_heads}
    where |= {h: "only base" for h in base_heads - sparse_heads} | {h: "only sparse" for h in sparse_heads - base_heads}
    return [{"head": h, "in": where[h]} for h in sorted(where, key=lambda h: ({"both": 2}.get(where[h], 0), h))]


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


def heads_only_in_one(res: dict) -> list[dict]:
    """Rows of an `attention compare` result: per NDF target and pair of models, the heads that only one model's
    component circuit uses on a query, with how many queries (those every model has a gap on) it does so on. The
    pairs: base and sparse, and where the run has a control, base and control (training) and control and sparse
    (the gates)."""
    control = bool(res.get("control_model"))
    sides = ("base", "control", "sparse") if control else ("base", "sparse")
    pairs = [("base", "sparse")] + ([("base", "control"), ("control", "sparse")] if control else [])
    used = [q for q in res.get("queries", []) if not any("skipped" in q[s] for s in sides)]
    out = []
    for t in map(str, res.get("targets", [])):
        for a, b in pairs:
            for side, other in ((a, b), (b, a)):
                counts: dict[str, int] = {}
                for q in used:
                    for h in set(q[side]["component"][t]["heads"]) - set(q[other]["component"][t]["heads"]):
                        counts[h] = counts.get(h, 0) + 1
                heads = ", ".join(f"{h} ({n})" for h, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
                out.append({"NDF": t, "heads only in": side, "not in": other, "heads (queries)": heads or "none"})
    return out
