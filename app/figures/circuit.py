"""A circuit as a bounded subgraph: rows from a schema record, the subgraph to draw, the curve beside it.

Pure Python + numpy + Plotly (no torch, no Streamlit), so the page sends the browser a graph of at
most `max_edges` edges whatever the circuit's size, and every filter reports what it hides. The
files themselves are read by workbench.circuits.schema (every format, validated once).

Edges are kept per reader input: a head's query, key and value inputs are separate edges (the graph
view, app/graph_view, draws them into three ports on the head's left); a key/value group's edge is
drawn into each head of the group. The drawn subgraph at a budget other than the saved circuit is the top-k of
the query's attribution scores (|score|), pruned to input -> logits paths: the same circuit as the
curve's "top-k" line at that budget, so the marked point's NDF is that circuit's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from app.figures import svg
from workbench.circuits import schema
from workbench.errors import UserError

MAX_EDGES = 300  # default display cap
HARD_MAX_EDGES = 2000  # what the page may ask for at most


@dataclass
class CircuitData:
    """One circuit's edges as arrays (one row per drawn reader input), plus what the file says about it."""

    n_layers: int
    n_heads: int
    src: list[str]  # writer node
    dst: list[str]  # reader node (a head, an MLP, logits)
    kind: list[str]  # q | k | v | mlp | logits | in (a head input of unknown kind)
    score: np.ndarray  # attribution score per row
    in_circuit: np.ndarray  # bool per row
    orig: np.ndarray  # graph edge index per row (a KV-group edge spans several rows)
    n_graph_edges: int
    fmt: str
    model_id: str = ""
    query: dict = field(default_factory=dict)
    faithfulness: dict = field(default_factory=dict)
    curve: dict | None = None
    method: dict = field(default_factory=dict)

    @property
    def n_circuit_edges(self) -> int:
        return len(np.unique(self.orig[self.in_circuit]))

    @property
    def warnings(self) -> list[str]:
        """What the finder warned about this circuit (a budget below any faithful circuit; attribution scores
        that vanish while the exact search still finds the circuit, so the scores are estimates, not effects)."""
        w = self.faithfulness.get("warnings") or []
        return [str(x) for x in w] if isinstance(w, list) else [str(w)]


def from_record(rec: schema.CircuitRecord) -> CircuitData:
    """The drawable rows of a circuit record: one per reader input, a KV-group edge once per head of its group."""
    src, dst, kind, orig = [], [], [], []
    sh = rec.shape
    for i, name in enumerate(rec.edges):
        w, r = schema.split_edge(name)
        for node, k in schema.parse_reader(r, sh.n_heads, sh.n_kv_heads):
            src.append(w)
            dst.append(node)
            kind.append(k)
            orig.append(i)
    orig = np.asarray(orig, dtype=np.int64)
    return CircuitData(
        sh.n_layers,
        sh.n_heads,
        src,
        dst,
        kind,
        rec.scores[orig],
        rec.in_circuit[orig],
        orig,
        rec.n_graph_edges,
        rec.fmt,
        model_id=rec.model_id,
        query=rec.query,
        faithfulness=rec.faithfulness,
        curve=rec.curve,
        method=rec.method,
    )


# ------------------------------------------------------------------ choosing the subgraph


def prune(cd: CircuitData, keep: np.ndarray) -> np.ndarray:
    """Keep only rows on an input -> logits path (a node is alive with an incoming and an outgoing kept row)."""
    keep = keep.copy()
    src, dst = np.asarray(cd.src, dtype=object), np.asarray(cd.dst, dtype=object)
    while True:
        has_out = set(src[keep]) | {"logits"}
        has_in = set(dst[keep]) | {"input"}
        alive = has_out & has_in
        new = keep & np.fromiter((s in alive and t in alive for s, t in zip(src, dst)), bool, len(src))
        if (new == keep).all():
            return keep
        keep = new


def topk_rows(cd: CircuitData, n_edges: int) -> np.ndarray:
    """Rows of the top n_edges graph edges by |score| (MIB's top-k on the query's own attribution), pruned."""
    first = np.unique(cd.orig, return_index=True)[1]
    order = np.argsort(-np.abs(cd.score[first]), kind="stable")[:n_edges]
    chosen = np.zeros(cd.n_graph_edges, dtype=bool)
    chosen[cd.orig[first][order]] = True
    return prune(cd, chosen[cd.orig])


@dataclass
class View:
    """The rows to draw, and one sentence per filter saying what it hides."""

    rows: np.ndarray  # indices into cd rows, strongest first
    selected_edges: int  # graph edges in the selection (before the display cap)
    label: str  # what the selection is
    hidden: list[str]
    point: tuple[float, float] | None = None  # (edge fraction, NDF) of the selection on the curve


def grid_point(cd: CircuitData, fraction: float) -> tuple[int, float | None, float | None]:
    """(MIB edge count, search NDF, top-k NDF) at a grid fraction of the curve."""
    c = cd.curve or {}
    if fraction in c.get("fractions", []):
        i = c["fractions"].index(fraction)
        return c["edges"][i], c["search_ndf"][i], c["topk_ndf"][i]
    return int(fraction * cd.n_graph_edges), None, None


def fraction_for_target(cd: CircuitData, target: float) -> float | None:
    """The smallest grid fraction whose top-k circuit reaches NDF >= target (None: none does)."""
    c = cd.curve or {}
    for f, v in zip(c.get("fractions", []), c.get("topk_ndf", [])):
        if v is not None and v >= target:
            return f
    return None


def choose(cd: CircuitData, fraction: float | None = None, max_edges: int = MAX_EDGES) -> View:
    """The subgraph to draw: the saved circuit (fraction None) or the top-k circuit at a fraction, then the
    display cap (the strongest |score| rows). Every filter adds a sentence to `hidden`."""
    if not 1 <= max_edges <= HARD_MAX_EDGES:
        raise UserError(f"the display cap must be 1..{HARD_MAX_EDGES} edges, got {max_edges}")
    nodes_all = set(cd.src) | set(cd.dst)
    hidden = []
    if fraction is None:
        sel = cd.in_circuit.copy()
        n_sel = len(np.unique(cd.orig[sel]))
        label = f"the saved circuit ({n_sel} edges, NDF {_fmt(cd.faithfulness.get('ndf'))})"
        point = (
            (n_sel / cd.n_graph_edges, cd.faithfulness.get("ndf")) if cd.faithfulness.get("ndf") is not None else None
        )
        hidden.append(f"{cd.n_graph_edges - n_sel} graph edges outside the saved circuit")
    else:
        k, search_ndf, topk_ndf = grid_point(cd, fraction)
        raw = np.zeros(len(cd.score), dtype=bool)
        raw[topk_rows(cd, k)] = True
        n_sel = len(np.unique(cd.orig[raw]))
        label = (
            f"top {k} edges by |attribution| at {100 * fraction:g}% ({n_sel} after pruning), NDF {_fmt(topk_ndf)}"
            f"; the search's best circuit at this budget reaches NDF {_fmt(search_ndf)}"
        )
        point = (fraction, topk_ndf) if topk_ndf is not None else None
        hidden.append(f"{cd.n_graph_edges - k} graph edges below the top {k} by |score|")
        if k > n_sel:
            hidden.append(f"{k - n_sel} of the top {k} off every input -> logits path (pruned)")
        sel = raw
    idx = np.flatnonzero(sel)
    idx = idx[np.argsort(-np.abs(cd.score[idx]), kind="stable")]
    if len(idx) > max_edges:
        cut = idx[max_edges:]
        hidden.append(
            f"{len(cut)} selected edge inputs weaker than the {max_edges} strongest (display cap, |score| < "
            f"{abs(float(cd.score[idx[max_edges - 1]])):.3g})"
        )
        idx = idx[:max_edges]
    shown_nodes = {cd.src[i] for i in idx} | {cd.dst[i] for i in idx}
    hidden.append(f"{len(nodes_all - shown_nodes)} of {len(nodes_all)} nodes touch no drawn edge")
    return View(idx, n_sel, label, hidden, point)


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.3f}"


# ------------------------------------------------------------------ layout and figures


def position(node: str, n_layers: int, n_heads: int) -> tuple[float, float]:
    """Layer columns left to right: input, then per layer its heads (one row each) and its MLP, then logits."""
    mid = (n_heads - 1) / 2
    kind, layer, h = schema.parse_node(node)
    if kind == "input":
        return 0.0, mid
    if kind == "logits":
        return 2.0 * n_layers + 1, mid
    if kind == "mlp":
        return 2.0 * layer + 2, mid
    return 2.0 * layer + 1, float(h)


def node_strength(cd: CircuitData, rows: np.ndarray) -> dict[str, float]:
    out: dict[str, float] = {}
    for i in rows:
        for n in (cd.src[i], cd.dst[i]):
            out[n] = out.get(n, 0.0) + abs(float(cd.score[i]))
    return out


def strongest_node(cd: CircuitData, view: View) -> str:
    """The drawn head or MLP with the most attribution on its drawn edges: what the node panel opens on."""
    strength = {n: v for n, v in node_strength(cd, view.rows).items() if n not in ("input", "logits")}
    if not strength:
        return min(node_strength(cd, view.rows) or {"logits": 0.0}, key=lambda n: position(n, cd.n_layers, cd.n_heads))
    return max(strength, key=strength.get)


def curve_figure(cd: CircuitData, point: tuple[float, float] | None = None) -> str:
    """NDF and NFS against % edges, search vs top-k, CPR/CMD in the title; the drawn selection starred (inline SVG:
    app/figures/svg.py)."""
    c = cd.curve
    x = [100 * f for f in c["fractions"]]
    lines = [
        svg.Line(name, x, c[key], colour, dashed)
        for key, name, colour, dashed in (
            ("search_ndf", "NDF search", svg.BLUE, False),
            ("topk_ndf", "NDF top-k", svg.ORANGE, False),
            ("search_cpr_f", "NFS search", svg.BLUE, True),
            ("topk_cpr_f", "NFS top-k", svg.ORANGE, True),
        )
    ]
    title = [
        f"CPR search {c['search_cpr']:.3f} / top-k {c['topk_cpr']:.3f} · "
        f"CMD search {c['search_cmd']:.3f} / top-k {c['topk_cmd']:.3f}"
    ]
    drawn = None if point is None or point[1] is None else (100 * point[0], point[1])
    return svg.curve(lines, drawn, title, "% of graph edges", "NDF / NFS", log_x=True)


def grid_rows(cd: CircuitData) -> list[dict]:
    """Search vs top-k at each grid point of the curve: the table beside the curve."""
    c = cd.curve or {}
    return [
        {
            "% edges": 100 * f,
            "edges": k,
            "NDF search": s,
            "NDF top-k": t,
            "NFS search": cs,
            "NFS top-k": ct,
        }
        for f, k, s, t, cs, ct in zip(
            c.get("fractions", []),
            c.get("edges", []),
            c.get("search_ndf", []),
            c.get("topk_ndf", []),
            c.get("search_cpr_f", []),
            c.get("topk_cpr_f", []),
        )
    ]


def edges_at_ndf(cd: CircuitData, target: float, line: str = "search_ndf") -> int | None:
    """Edges of the smallest grid circuit on `line` reaching NDF >= target (None: none on the grid does)."""
    c = cd.curve or {}
    return next((k for k, v in zip(c.get("edges", []), c.get(line, [])) if v is not None and v >= target), None)
