"""Figure builders as pure functions (no Streamlit): Plotly figures and token-highlight HTML."""

from __future__ import annotations

import html
import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]


def log_frequency_histogram(freqs: dict[str, np.ndarray], n_bins: int = 40) -> go.Figure:
    """Overlaid histograms of log10 firing frequency, one per SAE; units that never fired are counted in the legend."""
    fig = go.Figure()
    live = [np.log10(f[f > 0]) for f in freqs.values() if (f > 0).any()]
    lo = min((x.min() for x in live), default=-6.0)
    bins = dict(start=math.floor(lo), end=0.0, size=(0 - math.floor(lo)) / n_bins)
    for i, (name, f) in enumerate(freqs.items()):
        f = np.asarray(f)
        fig.add_trace(
            go.Histogram(
                x=np.log10(f[f > 0]),
                xbins=bins,
                name=f"{name} ({int((f == 0).sum())} never fired)",
                opacity=0.6,
                marker_color=PALETTE[i % len(PALETTE)],
            )
        )
    fig.update_layout(
        barmode="overlay",
        xaxis_title="log10 firing frequency",
        yaxis_title="units",
        height=320,
        margin=dict(l=40, r=10, t=30, b=40),
        legend=dict(orientation="h", y=-0.25),
    )
    return fig


def training_curves(curves: dict[str, list[dict]], keys=("fvu", "l0", "dead_frac")) -> go.Figure:
    """One panel per metric, one line per SAE, against training tokens."""
    keys = [k for k in keys if any(k in r for rows in curves.values() for r in rows)]
    fig = make_subplots(rows=1, cols=max(len(keys), 1), subplot_titles=keys)
    for i, (name, rows) in enumerate(curves.items()):
        for j, k in enumerate(keys):
            pts = [(r["tokens"], r[k]) for r in rows if k in r and "tokens" in r]
            if pts:
                x, y = zip(*pts)
                fig.add_trace(
                    go.Scatter(
                        x=x,
                        y=y,
                        mode="lines",
                        name=name,
                        legendgroup=name,
                        showlegend=j == 0,
                        line=dict(color=PALETTE[i % len(PALETTE)]),
                    ),
                    row=1,
                    col=j + 1,
                )
    fig.update_xaxes(title_text="tokens")
    fig.update_layout(height=300, margin=dict(l=40, r=10, t=40, b=40), legend=dict(orientation="h", y=-0.3))
    return fig


def scaffold_heatmap(abs_cos, explained) -> go.Figure:
    """|cos| between each scaffold direction and the stream's top principal components."""
    a = np.asarray(abs_cos, dtype=float)
    x = [f"PC{j + 1} ({100 * e:.1f}%)" for j, e in enumerate(explained)]
    fig = go.Figure(
        go.Heatmap(
            z=a,
            x=x,
            y=[f"scaffold {i + 1}" for i in range(len(a))],
            zmin=0,
            zmax=1,
            colorscale="Blues",
            hovertemplate="%{y} vs %{x}: |cos| %{z:.3f}<extra></extra>",
        )
    )
    fig.update_layout(
        title="scaffold directions vs the stream's principal components (|cos|, % variance)",
        height=120 + 30 * len(a),
        margin=dict(l=10, r=10, t=40, b=10),
    )
    return fig


def highlight_html(tokens: list[str], acts: list[float], center: int | None = None, vmax: float | None = None) -> str:
    """Tokens as inline spans shaded by activation (title = the value); the example's token underlined."""
    vmax = vmax or max([abs(a) for a in acts] + [1e-12])
    spans = []
    for i, (t, a) in enumerate(zip(tokens, acts)):
        alpha = min(abs(a) / vmax, 1.0)
        style = f"background:rgba(255,140,0,{alpha:.2f});padding:1px 2px;border-radius:3px"
        if i == center:
            style += ";border-bottom:2px solid #d62728;font-weight:600"
        spans.append(f'<span style="{style}" title="{a:.3f}">{html.escape(t)}</span>')
    return '<div style="font-family:monospace;line-height:1.9">' + " ".join(spans) + "</div>"


def examples_html(examples: list[dict], vmax: float) -> str:
    """Several token-highlighted contexts as one HTML block (one element, not one per example)."""
    rows = "".join(
        f'<tr><td style="padding:2px 8px 2px 0;vertical-align:top"><code>{e["value"]:.3f}</code></td>'
        f"<td>{highlight_html(e['tokens'], e['acts'], e['center'], vmax)}</td></tr>"
        for e in examples
    )
    return f'<table style="border:none">{rows}</table>'


def steering_sweep(rows: list[dict], target: str) -> go.Figure:
    """A strength sweep (`intervene --strengths`, the result's sweep rows): the target token's logit change and the
    KL from the clean run at the last position, per strength (the KL on its own axis: it grows much faster)."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    x = [r["strength"] for r in rows]
    fig.add_trace(
        go.Scatter(
            x=x,
            y=[r["target_logit_change"] for r in rows],
            mode="lines+markers",
            name=f"logit change of {target!r}",
            marker_color=PALETTE[0],
        ),
        secondary_y=False,
    )
    fig.add_trace(
        go.Scatter(x=x, y=[r["kl"] for r in rows], mode="lines+markers", name="KL", marker_color=PALETTE[3]),
        secondary_y=True,
    )
    fig.update_xaxes(title_text="strength")
    fig.update_yaxes(title_text="target logit change", secondary_y=False)
    fig.update_yaxes(title_text="KL (nats)", secondary_y=True, rangemode="tozero")
    fig.update_layout(height=300, margin=dict(l=40, r=40, t=30, b=40), legend=dict(orientation="h", y=-0.3))
    return fig
