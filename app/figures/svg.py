"""Small charts as inline SVG (no Streamlit): the histogram, curve and scatter a page shows on every load.

Plotly's 4.6 MB chunk is evaluated on every full load of a page that holds a Plotly chart (0.67-1.10 s on the
project's machine, bench/results/app.md), more than a whole empty Streamlit page. These charts need no zoom or
selection, so they are drawn as SVG the page sends with its script run (`block`: an image of it): nothing to fetch or evaluate. Each
mark carries a <title> (the browser's tooltip) with its numbers, and the root its `data-chart` name and, for a
marked point, `data-mark` (what the browser tests and the benchmark wait for).
"""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass
from urllib.parse import quote

import numpy as np

BLUE, ORANGE, RED, GREY = "#1f77b4", "#ff7f0e", "#d62728", "#888"
FONT = 'font-family="sans-serif" font-size="11" fill="#333"'
RED_FONT = FONT.replace("#333", RED)


def block(chart: str) -> str:
    """A chart as an <img> of its SVG (a data URI), drawn with st.html: st.html's sanitiser drops inline SVG, and
    st.markdown(unsafe_allow_html=True) would make a fresh load fetch and evaluate a 190 kB HTML parser (rehype-raw).
    The image keeps the chart's `data-chart` and `data-mark` (tests and benchmarks read them), its title as its
    alt text and its marked value as a tooltip; the marks' own <title>s stay in the SVG (shown where it is opened
    as a file)."""
    root = chart[: chart.index(">")]
    attrs = dict(re.findall(r'(data-chart|data-mark|aria-label)="([^"]*)"', root))
    width = re.search(r"max-width:(\d+px)", root).group(1)
    tip = f' title="marked: {attrs["data-mark"]}"' if "data-mark" in attrs else ""
    keep = " ".join(f'{k}="{attrs[k]}"' for k in ("data-chart", "data-mark") if k in attrs)
    src = "data:image/svg+xml," + quote(chart, safe="=:/,.;'()-_")
    return f'<img class="wb-chart" {keep}{tip} alt="{attrs["aria-label"]}" style="width:100%;max-width:{width}" src="{src}">'


def _num(v: float) -> str:
    return f"{v:.3g}"


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (steps of 1, 2 or 5 times a power of ten)."""
    if not hi > lo:
        return [lo]
    raw = (hi - lo) / n
    step = min((m * 10 ** math.floor(math.log10(raw)) for m in (1, 2, 5, 10)), key=lambda s: abs(s - raw))
    first = math.ceil(lo / step - 1e-9) * step
    return [round(first + i * step, 12) for i in range(int((hi - first) / step + 1e-9) + 1)]


@dataclass
class Axes:
    """Data ranges to pixels: x linear or log10, y linear; margins hold the tick labels and titles."""

    x0: float
    x1: float
    y0: float
    y1: float
    width: int = 560
    height: int = 280
    top: int = 34
    left: int = 48
    bottom: int = 40
    right: int = 12
    log_x: bool = False

    def _t(self, x: float) -> float:
        return math.log10(x) if self.log_x else x

    def sx(self, x: float) -> float:
        a, b = self._t(self.x0), self._t(self.x1)
        return self.left + (self._t(x) - a) / ((b - a) or 1) * (self.width - self.left - self.right)

    def sy(self, y: float) -> float:
        return (
            self.height
            - self.bottom
            - (y - self.y0) / ((self.y1 - self.y0) or 1) * (self.height - self.top - self.bottom)
        )

    def x_ticks(self) -> list[float]:
        if not self.log_x:
            return nice_ticks(self.x0, self.x1)
        lo, hi = math.floor(math.log10(self.x0)), math.ceil(math.log10(self.x1))
        return [10.0**e for e in range(lo, hi + 1) if self.x0 <= 10.0**e <= self.x1 * (1 + 1e-9)]

    def frame(self, title: list[str], xlabel: str, ylabel: str) -> list[str]:
        """Axis lines, ticks with labels, axis titles and the title lines."""
        b, r = self.height - self.bottom, self.width - self.right
        out = [
            f'<line x1="{self.left}" y1="{b}" x2="{r}" y2="{b}" stroke="{GREY}"/>',
            f'<line x1="{self.left}" y1="{self.top}" x2="{self.left}" y2="{b}" stroke="{GREY}"/>',
        ]
        for t in self.x_ticks():
            x = self.sx(t)
            out.append(f'<line x1="{x:.1f}" y1="{b}" x2="{x:.1f}" y2="{b + 4}" stroke="{GREY}"/>')
            out.append(f'<text x="{x:.1f}" y="{b + 15}" text-anchor="middle" {FONT}>{_num(t)}</text>')
        for t in nice_ticks(self.y0, self.y1, 4):
            y = self.sy(t)
            out.append(f'<line x1="{self.left - 4}" y1="{y:.1f}" x2="{r}" y2="{y:.1f}" stroke="#eee"/>')
            out.append(f'<text x="{self.left - 6}" y="{y + 4:.1f}" text-anchor="end" {FONT}>{_num(t)}</text>')
        mid = (self.left + r) / 2
        out.append(f'<text x="{mid:.0f}" y="{self.height - 6}" text-anchor="middle" {FONT}>{_esc(xlabel)}</text>')
        yc = (self.top + b) / 2
        out.append(
            f'<text x="12" y="{yc:.0f}" transform="rotate(-90 12 {yc:.0f})" text-anchor="middle" {FONT}>'
            f"{_esc(ylabel)}</text>"
        )
        for i, line in enumerate(title):
            out.append(f'<text x="{mid:.0f}" y="{14 + 13 * i}" text-anchor="middle" {FONT}>{_esc(line)}</text>')
        return out


def _esc(s) -> str:
    return html.escape(str(s), quote=True)


def _svg(name: str, ax: Axes, parts: list[str], label: str, mark: float | None = None) -> str:
    attr = "" if mark is None else f' data-mark="{mark:.6g}"'
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="wb-chart" data-chart="{_esc(name)}"{attr} aria-label="{_esc(label)}" '
        f'viewBox="0 0 {ax.width} {ax.height}" width="100%" style="max-width:{ax.width}px" role="img">'
        + "".join(parts)
        + "</svg>"
    )


def histogram(counts, edges, mark: float | None = None, title: str = "non-zero activations") -> str:
    """Bars of counts over [edges[i], edges[i+1]); `mark` (an activation, e.g. on the prompt a graph node came from)
    drawn as a red line across, clamped into the axis and labelled with its value."""
    counts, edges = np.asarray(counts, float), np.asarray(edges, float)
    x1 = max(float(edges[-1]), mark or 0.0, 1e-12)
    ax = Axes(float(edges[0]), x1, 0.0, max(float(counts.max()) if len(counts) else 0.0, 1.0))
    parts = ax.frame([title], "activation", "tokens")
    for c, a, b in zip(counts, edges[:-1], edges[1:]):
        if c > 0:
            x, w, y = ax.sx(a), max(ax.sx(b) - ax.sx(a) - 0.5, 0.5), ax.sy(c)
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{ax.sy(0) - y:.1f}" fill="{ORANGE}">'
                f"<title>activation {_num(a)}..{_num(b)}: {int(c)} tokens</title></rect>"
            )
    if mark is not None:
        x = ax.sx(min(max(mark, ax.x0), x1))
        parts.append(
            f'<line x1="{x:.1f}" y1="{ax.top}" x2="{x:.1f}" y2="{ax.sy(0):.1f}" stroke="{RED}" stroke-width="2">'
            f"<title>on the prompt: {_num(mark)}</title></line>"
            f'<text x="{x + 3:.1f}" y="{ax.top + 10}" {RED_FONT}>prompt {_num(mark)}</text>'
        )
    return _svg("histogram", ax, parts, title, mark)


@dataclass
class Line:
    name: str
    xs: list[float]
    ys: list[float | None]  # None: no value at that x (a gap)
    colour: str
    dashed: bool = False


def curve(
    lines: list[Line],
    point: tuple[float, float] | None,
    title: list[str],
    xlabel: str,
    ylabel: str,
    log_x: bool = False,
    name: str = "curve",
) -> str:
    """Lines with markers (a legend under the title) and a starred point (`data-mark` holds its x)."""
    pts = [(x, y) for ln in lines for x, y in zip(ln.xs, ln.ys) if y is not None] + ([point] if point else [])
    xs, ys = [p[0] for p in pts] or [1.0], [p[1] for p in pts] or [0.0]
    ax = Axes(min(xs), max(xs), min(0.0, min(ys)), max(1.0, max(ys)), height=320, top=34 + 14, log_x=log_x)
    parts = ax.frame(title, xlabel, ylabel)
    for i, ln in enumerate(lines):
        kept = [(x, y) for x, y in zip(ln.xs, ln.ys) if y is not None]
        seg = [(ax.sx(x), ax.sy(y)) for x, y in kept]
        dash = ' stroke-dasharray="4 3"' if ln.dashed else ""
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in seg)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{ln.colour}" stroke-width="1.6"{dash}/>')
        for (px, py), (x, y) in zip(seg, kept):
            parts.append(
                f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2.6" fill="{ln.colour}">'
                f"<title>{_esc(ln.name)}: {_num(x)} → {_num(y)}</title></circle>"
            )
        lx = ax.left + 8 + i * (ax.width - ax.left) / max(len(lines), 1)
        parts.append(
            f'<line x1="{lx:.0f}" y1="{ax.top - 8}" x2="{lx + 18:.0f}" y2="{ax.top - 8}" stroke="{ln.colour}" '
            f'stroke-width="2"{dash}/><text x="{lx + 22:.0f}" y="{ax.top - 4}" {FONT}>{_esc(ln.name)}</text>'
        )
    if point is not None:
        x, y = ax.sx(point[0]), ax.sy(point[1])
        star = " ".join(
            f"{x + r * math.sin(k * math.pi / 5):.1f},{y - r * math.cos(k * math.pi / 5):.1f}"
            for k, r in zip(range(10), [8, 3.4] * 5)
        )
        parts.append(
            f'<polygon points="{star}" fill="{RED}"><title>drawn: {_num(point[0])} → {_num(point[1])}</title></polygon>'
        )
    return _svg(name, ax, parts, " ".join(title), None if point is None else point[0])


def scatter(xs, ys, values, title: str, xlabel: str, ylabel: str, name: str = "scatter") -> str:
    """Points shaded by `values` (light to dark orange, the largest darkest), each titled with its value."""
    xs, ys, values = (np.asarray(a, float) for a in (xs, ys, values))
    pad = lambda a: (float(a.min()) - 0.05 * (np.ptp(a) or 1), float(a.max()) + 0.05 * (np.ptp(a) or 1))  # noqa: E731
    (x0, x1), (y0, y1) = pad(xs) if len(xs) else (0, 1), pad(ys) if len(ys) else (0, 1)
    ax = Axes(x0, x1, y0, y1, height=320)
    parts = ax.frame([title], xlabel, ylabel)
    top = float(values.max()) if len(values) else 1.0
    for i, (x, y, v) in enumerate(zip(xs, ys, values)):
        alpha = 0.25 + 0.75 * (v / top if top > 0 else 1)
        parts.append(
            f'<circle cx="{ax.sx(x):.1f}" cy="{ax.sy(y):.1f}" r="4" fill="{ORANGE}" fill-opacity="{alpha:.2f}" '
            f'stroke="#a04000" stroke-width="0.5"><title>example {i + 1}: norm {_num(v)}</title></circle>'
        )
    return _svg(name, ax, parts, title)


def heatmap(pattern, tokens: list[str], title: str, name: str = "pattern") -> str:
    """A [query, key] attention pattern as white-to-blue cells on 0..1, the upper triangle (future keys) blank,
    rows and columns labelled position:token; each cell titled with its weight."""
    a = np.asarray(pattern, float)
    n = len(a)
    lab = [f"{i}:{t}" for i, t in enumerate(tokens[:n])]
    cell = max(min(360 // max(n, 1), 28), 3)
    left, top = 96, 30
    size = (left + n * cell + 10, top + n * cell + 90)
    parts = [f'<text x="{left}" y="16" {FONT}>{_esc(title)}</text>']
    for q in range(n):
        for k in range(q + 1):
            v = min(max(a[q, k], 0.0), 1.0)
            shade = ",".join(str(int(round(255 - (255 - c) * v))) for c in (8, 81, 156))
            parts.append(
                f'<rect x="{left + k * cell}" y="{top + q * cell}" width="{cell}" height="{cell}" fill="rgb({shade})">'
                f"<title>query {_esc(lab[q])}, key {_esc(lab[k])}: attention {a[q, k]:.3f}</title></rect>"
            )
    if cell >= 8:  # labels only where they fit
        for i, t in enumerate(lab):
            y, x = top + (i + 0.7) * cell, left + (i + 0.5) * cell
            parts.append(f'<text x="{left - 4}" y="{y:.0f}" text-anchor="end" {FONT}>{_esc(t)}</text>')
            parts.append(
                f'<text x="{x:.0f}" y="{top + n * cell + 6}" transform="rotate(60 {x:.0f} {top + n * cell + 6})" '
                f"{FONT}>{_esc(t)}</text>"
            )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="wb-chart" data-chart="{_esc(name)}" aria-label="{_esc(title)}" '
        f'viewBox="0 0 {size[0]} {size[1]}" width="100%" style="max-width:{size[0]}px" role="img">'
        + "".join(parts)
        + "</svg>"
    )
