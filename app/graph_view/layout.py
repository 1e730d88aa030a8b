"""Any circuit the workbench draws as the graph view's data: nodes placed in layer columns (and token-position
bands where the circuit has positions), edges that end on their reader's q / k / v port, and the sentences
saying what each filter hides. Pure Python (no torch, no Streamlit): the view gets finished coordinates, so a
test can check that every edge ends on its node or port without a browser.

A circuit enters as a `Graph` of `Node`s and `Edge`s: `from_view` makes one from a component-level circuit
(app.figures.circuit), `from_neuronpedia` one from a circuit-tracer / Neuronpedia graph JSON (features by layer
and position), `diff` merges two; `bound` cuts any of them to what a browser draws at once (the view's own cap,
stated in the view: "showing N of M nodes; K hidden").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from workbench.circuits import neuronpedia, schema

COL_GAP, ROW_GAP, BAND_GAP = 150.0, 52.0, 30.0  # px between columns, rows, position bands
SIZE = {"head": (70.0, 38.0), "feature": (60.0, 30.0)}  # (width, height); anything else: DEFAULT_SIZE
DEFAULT_SIZE = (62.0, 30.0)
PORTS = ("q", "k", "v")
MARGIN = 40.0
MAX_NODES = 400  # nodes the view draws at once; a bigger graph shows its strongest (the rest are counted)
MAX_LINKS = 2000  # edges the view draws at once (the circuit page's own cap, app.figures.circuit, is at most this)
LIFT, MAX_LIFT = 30.0, 160.0  # px an edge arcs up per column it skips, at most (the drawing leaves room above)


@dataclass
class Node:
    """One node: `column` orders the layer columns (input first, logits last); `row` places it inside its
    column (None: stacked in order of appearance); `pos` is its token position (None: the circuit has none)."""

    id: str
    kind: str  # input | head | mlp | logits | feature | ...
    column: tuple
    column_label: str
    row: float | None = None
    pos: int | None = None
    layer: int | None = None
    label: str = ""
    score: float | None = None
    activation: float | None = None
    status: str = "both"  # diff mode: both | a | b
    token: str = ""  # the prompt's token at `pos` (links are named by label and token, never by id alone)
    influence: float | None = None  # feature graphs: the cumulative influence share at its rank (pruned in the view)
    prob: float | None = None  # a logit's probability: its weight in the view's influence pruning
    check: str | None = None  # the check's verdict word (feature_graph.verdict) or None (not checked)


@dataclass
class Edge:
    src: str
    dst: str
    port: str | None  # q | k | v: the reader's port; None: the node itself
    weight: float
    status: str = "both"
    weight_b: float | None = None  # diff mode: the second circuit's weight when both have the edge
    heads: dict | None = None  # feature graphs: head -> weight of the heads carrying the link (and "direct")
    check: str | None = None  # the check's verdict word (feature_graph.verdict) or None (not checked)
    qk: list | None = (
        None  # feature graphs built with --qk: why each head carrying it attends there (feature_graph.link_qk)
    )


@dataclass
class Graph:
    nodes: list[Node]
    edges: list[Edge]
    hidden: list[str] = field(default_factory=list)  # one sentence per filter: what it hides
    title: str = ""
    columns: list[tuple] | None = None  # (key, label) of every column, even empty ones; flow up: (position, token)
    shown: str = ""  # what `bound` cut: "showing N of M nodes; K hidden ..." ("" when nothing)
    flow: str = "right"  # right: layer columns left to right; up: token positions across, layers bottom to top


# ------------------------------------------------------------------ component-level circuits


def component_node(name: str, n_layers: int, n_heads: int) -> Node:
    """A head or MLP at its fixed place: heads of layer l in column (l, 0) on row h, the MLP in (l, 1)."""
    kind, layer, h = schema.parse_node(name)
    mid = (n_heads - 1) / 2
    if kind == "input":
        return Node(name, "input", (-1, 0), "input", mid, label=name)
    if kind == "logits":
        return Node(name, "logits", (n_layers, 0), "logits", mid, label=name)
    if kind == "mlp":
        return Node(name, "mlp", (layer, 1), f"L{layer} MLP", mid, layer=layer, label=name)
    return Node(name, "head", (layer, 0), f"L{layer} attn", float(h), layer=layer, label=name)


def component_columns(n_layers: int) -> list[tuple[tuple, str]]:
    cols = [((-1, 0), "input")]
    for layer in range(n_layers):
        cols += [((layer, 0), f"L{layer} attn"), ((layer, 1), f"L{layer} MLP")]
    return cols + [((n_layers, 0), "logits")]


def from_view(cd, view, title: str = "") -> Graph:
    """The drawn rows of a component-level circuit (cd: app.figures.circuit.CircuitData, view: its View, read by
    their fields only, so the view never imports the pages' figures): a head input of unknown port ends on the
    node itself."""
    names = sorted({cd.src[i] for i in view.rows} | {cd.dst[i] for i in view.rows})
    nodes = [component_node(n, cd.n_layers, cd.n_heads) for n in names]
    edges = [
        Edge(cd.src[i], cd.dst[i], cd.kind[i] if cd.kind[i] in PORTS else None, float(cd.score[i])) for i in view.rows
    ]
    return Graph(nodes, edges, list(view.hidden), title or view.label, component_columns(cd.n_layers))


# ------------------------------------------------------------------ feature graphs (circuit-tracer / Neuronpedia JSON)

NP_KINDS = {
    "cross layer transcoder": "feature",
    "mlp reconstruction error": "error",
    "embedding": "embedding",
    "attention head": "head",
}
LABEL_CHARS = 40  # a clerp longer than this is cut in the node's label (the details show it whole)


def _np_column(n: dict) -> tuple[tuple, str]:
    """Embeddings first, then one column per layer, logits last (circuit-tracer puts logits at layer n_layers+1)."""
    if n["feature_type"] == "embedding":
        return (-1, 0), "embeddings"
    if n["feature_type"] == "logit":
        return (10**6, 0), "logits"
    layer = str(n["layer"])
    return ((int(layer), 0), f"L{layer}") if layer.isdigit() else ((10**5, 0), layer)


def from_neuronpedia(d: dict, title: str = "") -> Graph:
    """A circuit-tracer / Neuronpedia graph JSON (checked by neuronpedia.validate) as an upward graph:
    token positions (`ctx_idx`) across, layers bottom to top, influence as the score, the clerp as the label."""
    neuronpedia.validate(d)
    nodes = []
    for n in map(neuronpedia.with_defaults, d["nodes"]):
        column, col_label = _np_column(n)
        layer = str(n["layer"])
        clerp = str(n.get("clerp") or n["node_id"])
        nodes.append(
            Node(
                n["node_id"],
                "logit" if n["feature_type"] == "logit" else NP_KINDS.get(n["feature_type"], "feature"),
                column,
                col_label,
                pos=int(n["ctx_idx"]),
                layer=int(layer) if layer.isdigit() else None,
                label=clerp if len(clerp) <= LABEL_CHARS else clerp[: LABEL_CHARS - 1] + "…",
                score=1.0 if n["influence"] is None else float(n["influence"]),  # null: ranks last
                activation=None if n["activation"] is None else float(n["activation"]),
            )
        )
    edges = [Edge(link["source"], link["target"], None, float(link["weight"])) for link in d["links"]]
    tokens = token_columns(d["metadata"].get("prompt_tokens") or [])
    return Graph(nodes, edges, [], title or str(d["metadata"].get("slug", "")), tokens, flow="up")


TOKEN_CHARS = 12  # a token longer than this is cut in its column's label


def token_columns(tokens: list) -> list[tuple[int, str]]:
    """An upward graph's column labels: (position, its token, cut to TOKEN_CHARS)."""
    cut = [str(t) if len(str(t)) <= TOKEN_CHARS else str(t)[: TOKEN_CHARS - 1] + "…" for t in tokens]
    return list(enumerate(cut))


# ------------------------------------------------------------------ what a browser draws at once


def bound(g: Graph, max_nodes: int = MAX_NODES, max_edges: int = MAX_LINKS, keep: frozenset = frozenset()) -> Graph:
    """At most `max_nodes` nodes (those in `keep`, e.g. the pinned ones, then the strongest by the summed |weight|
    of their edges) and `max_edges` of the edges between them (strongest |weight|); `shown` says what was cut."""
    if len(g.nodes) <= max_nodes and len(g.edges) <= max_edges:
        return g
    index = {n.id: i for i, n in enumerate(g.nodes)}
    src = np.fromiter((index[e.src] for e in g.edges), np.int64, len(g.edges))
    dst = np.fromiter((index[e.dst] for e in g.edges), np.int64, len(g.edges))
    w = np.abs(np.fromiter((e.weight for e in g.edges), np.float64, len(g.edges)))
    strength = np.zeros(len(g.nodes))
    np.add.at(strength, src, w)
    np.add.at(strength, dst, w)
    strength[[index[k] for k in keep if k in index]] = np.inf
    order = np.argsort(-strength, kind="stable")[:max_nodes]
    kept = np.zeros(len(g.nodes), dtype=bool)
    kept[order] = True
    between = np.flatnonzero(kept[src] & kept[dst])
    chosen = np.sort(between[np.argsort(-w[between], kind="stable")[:max_edges]])
    n_nodes, n_edges = int(kept.sum()), len(chosen)
    shown = f"showing {n_nodes:,} of {len(g.nodes):,} nodes; {len(g.nodes) - n_nodes:,} hidden"
    shown += " (the weakest by summed |edge weight|; pinned nodes first)" if n_nodes < len(g.nodes) else ""
    shown += f" · {n_edges:,} of {len(g.edges):,} edges; {len(g.edges) - n_edges:,} hidden"
    why = [f"{len(g.edges) - len(between):,} touch a hidden node"] if len(between) < len(g.edges) else []
    why += [f"{len(between) - n_edges:,} weaker than the {n_edges:,} strongest"] if n_edges < len(between) else []
    shown += f" ({', '.join(why)})" if why else ""
    nodes = [n for n, k in zip(g.nodes, kept) if k]
    return Graph(nodes, [g.edges[i] for i in chosen], g.hidden, g.title, g.columns, shown, g.flow)


# ------------------------------------------------------------------ two circuits


def diff(a: Graph, b: Graph, names: tuple[str, str] = ("A", "B")) -> tuple[Graph, dict]:
    """One graph of both circuits: every node and edge marked both | a | b, and the counts of each."""
    a_nodes, b_nodes = {n.id: n for n in a.nodes}, {n.id: n for n in b.nodes}
    nodes = []
    for nid in sorted(set(a_nodes) | set(b_nodes)):
        n = a_nodes.get(nid) or b_nodes[nid]
        nodes.append(Node(**{**asdict(n), "status": _status(nid in a_nodes, nid in b_nodes)}))
    key = lambda e: (e.src, e.dst, e.port)  # noqa: E731
    a_edges, b_edges = {key(e): e for e in a.edges}, {key(e): e for e in b.edges}
    edges = []
    for k in sorted(set(a_edges) | set(b_edges), key=lambda t: tuple(map(str, t))):
        ea, eb = a_edges.get(k), b_edges.get(k)
        e = ea or eb
        edges.append(
            Edge(
                e.src,
                e.dst,
                e.port,
                e.weight,
                _status(ea is not None, eb is not None),
                eb.weight if ea and eb else None,
            )
        )
    counts = {
        f"{what}_{s}": sum(x.status == s for x in items)
        for what, items in (("nodes", nodes), ("edges", edges))
        for s in ("both", "a", "b")
    }
    hidden = [f"{names[0]}: {h}" for h in a.hidden] + [f"{names[1]}: {h}" for h in b.hidden]
    columns = a.columns if a.columns == b.columns else None
    title = f"{names[0]} vs {names[1]}"
    return Graph(nodes, edges, hidden, title, columns, flow=a.flow), counts


def _status(in_a: bool, in_b: bool) -> str:
    return "both" if in_a and in_b else ("a" if in_a else "b")


# ------------------------------------------------------------------ coordinates

UP_SIZE = (28.0, 20.0)  # every node of an upward graph: many share a token, labels go above them by zoom
UP_GAP, UP_COL_GAP, UP_ROW = 6.0, 10.0, 44.0  # px between nodes of one cell, token columns, layer row centres
WRAP = 3  # nodes side by side in one (position, layer) cell; more wrap onto further lines of the layer's row


def _size(kind: str, flow: str = "right") -> tuple[float, float]:
    return UP_SIZE if flow == "up" else SIZE.get(kind, DEFAULT_SIZE)


def _rows(g: Graph) -> dict[str, float]:
    """Each node's row inside its (column, position band): its own row, else the next free slot."""
    rows, used = {}, {}
    for n in g.nodes:
        slot = (n.column, n.pos)
        if n.row is None:
            rows[n.id] = used.get(slot, -1.0) + 1.0
        else:
            rows[n.id] = n.row
        used[slot] = max(used.get(slot, -1.0), rows[n.id])
    return rows


def _columns(g: Graph) -> list[tuple]:
    """The columns that hold a node, in the graph's column order (layer order when it names none)."""
    present = {n.column for n in g.nodes}
    order = [c for c, _ in g.columns or []]
    return [c for c in order if c in present] + sorted(present - set(order))


def place(g: Graph) -> dict[str, tuple[float, float]]:
    """Node centres in px. Flow right: x by column, y by position band (bands as tall as their fullest column)
    and row. Flow up: see place_up."""
    if g.flow == "up":
        return place_up(g)[0]
    columns = _columns(g)
    col_x = {c: MARGIN + 40.0 + i * COL_GAP for i, c in enumerate(columns)}
    rows = _rows(g)
    bands = sorted({n.pos for n in g.nodes}, key=lambda p: -1 if p is None else p)
    depth = {p: max((rows[n.id] for n in g.nodes if n.pos == p), default=0.0) + 1.0 for p in bands}
    top, band_y = MARGIN + 30.0 + 0.75 * max(lifts(g), default=0.0), {}
    for p in bands:
        band_y[p] = top
        top += depth[p] * ROW_GAP + BAND_GAP
    return {n.id: (col_x[n.column], band_y[n.pos] + rows[n.id] * ROW_GAP + ROW_GAP / 2) for n in g.nodes}


def place_up(g: Graph) -> tuple[dict, dict, dict]:
    """(node centres, token column centres, layer row centres) of an upward graph, as circuit-tracer draws one:
    x by token position, y by layer (the first column key, bottom to top: embeddings low, logits high). A cell's
    nodes sit side by side, centred, in column order then as they come; past WRAP they wrap onto another line
    inside their layer's row (that row grows), so the answer's position does not become one very wide column."""
    layers = sorted({n.column[0] for n in g.nodes})
    cells: dict[tuple, list[str]] = {}
    for n in sorted(g.nodes, key=lambda n: n.column):
        cells.setdefault((n.pos, n.column[0]), []).append(n.id)
    positions = sorted({n.pos for n in g.nodes}, key=lambda p: -1 if p is None else p)
    line_h = UP_SIZE[1] + UP_GAP
    lines = {r: max(-(-len(cells.get((p, r), ())) // WRAP) for p in positions) for r in layers}
    row_y, top = {}, MARGIN + 30.0
    for r in reversed(layers):  # the top row is the highest layer
        height = UP_ROW + (max(lines[r], 1) - 1) * line_h
        row_y[r] = top + height / 2
        top += height
    pitch, left, xy, col_x = UP_SIZE[0] + UP_GAP, MARGIN + 50.0, {}, {}  # room for the row labels
    for p in positions:
        across = min(WRAP, max(len(cells.get((p, r), ())) for r in layers))
        col_x[p] = left + across * pitch / 2
        for r in layers:
            ids = cells.get((p, r), [])
            n_lines = -(-len(ids) // WRAP)
            for i, nid in enumerate(ids):
                line, k = divmod(i, WRAP)
                shift = (across - min(WRAP, len(ids) - line * WRAP)) * pitch / 2
                xy[nid] = (left + shift + (k + 0.5) * pitch, row_y[r] + (line - (n_lines - 1) / 2) * line_h)
        left += across * pitch + UP_COL_GAP
    return xy, col_x, row_y


def lifts(g: Graph) -> list[float]:
    """How far each edge's curve arcs up: by the columns it skips, so it passes over the nodes between (an
    upward graph's edges run between rows: none)."""
    if g.flow == "up":
        return [0.0] * len(g.edges)
    col = {c: i for i, c in enumerate(_columns(g))}
    at = {n.id: col[n.column] for n in g.nodes}
    return [min(LIFT * max(0, at[e.dst] - at[e.src] - 1), MAX_LIFT) for e in g.edges]


def port_point(kind: str, centre: tuple[float, float], port: str | None) -> tuple[float, float]:
    """Where an edge into a node ends: a head's q / k / v port (top to bottom on its left side), else the
    middle of the node's left side."""
    (x, y), (w, h) = centre, _size(kind)
    if port in PORTS and kind == "head":
        return x - w / 2, y + (PORTS.index(port) - 1) * h / 3
    return x - w / 2, y


def ends(g: Graph, xy: dict, kind: dict, e: Edge) -> list[float]:
    """An edge's end points: right side of its writer to its reader's port (flow right), or top of its writer
    to the bottom of its reader (flow up)."""
    (sx, sy), (tx, ty) = xy[e.src], xy[e.dst]
    if g.flow == "up":
        p = [sx, sy - UP_SIZE[1] / 2, tx, ty + UP_SIZE[1] / 2]
    else:
        p = [sx + _size(kind[e.src])[0] / 2, sy, *port_point(kind[e.dst], (tx, ty), e.port)]
    return [round(v, 1) for v in p]


def axes(g: Graph, xy: dict) -> tuple[list[dict], list[dict]]:
    """The labelled guides: columns (layers; flow up: token positions, labelled by `g.columns`) and rows (flow
    up: layers, labelled by their nodes' column labels)."""
    labels = dict(g.columns or []) | {n.column: n.column_label for n in g.nodes}
    if g.flow != "up":
        return [{"x": MARGIN + 40.0 + i * COL_GAP, "label": labels[c]} for i, c in enumerate(_columns(g))], []
    _, col_x, row_y = place_up(g)
    rows = {n.column[0]: n.column_label for n in sorted(g.nodes, key=lambda n: n.column, reverse=True)}
    tokens = dict(g.columns or [])
    columns = [{"x": round(x, 1), "label": tokens.get(p, f"pos {p}")} for p, x in col_x.items()]
    return columns, [{"y": round(row_y[r], 1), "label": lab} for r, lab in rows.items()]


def to_data(g: Graph, counts: dict | None = None) -> dict:
    """The JSON the view draws: finished coordinates, per-node strongest in / out edges, hidden counts."""
    xy = place(g)
    index = {n.id: i for i, n in enumerate(g.nodes)}
    kind = {n.id: n.kind for n in g.nodes}
    strength = np.zeros(len(g.nodes))
    edges = []
    for e, up in zip(g.edges, lifts(g)):
        for nid in (e.src, e.dst):
            strength[index[nid]] += abs(e.weight)
        edges.append(
            {
                "s": index[e.src],
                "t": index[e.dst],
                "port": e.port,
                "w": e.weight,
                "wb": e.weight_b,
                "status": e.status,
                "p": ends(g, xy, kind, e),
                "lift": up,
                "heads": e.heads,
                "check": e.check,
                "qk": e.qk,
            }
        )
    nodes = []
    for i, n in enumerate(g.nodes):
        w, h = _size(n.kind, g.flow)
        nodes.append(
            {
                **{k: v for k, v in asdict(n).items() if k not in ("column", "row")},
                "x": round(xy[n.id][0], 1),
                "y": round(xy[n.id][1], 1),
                "w": w,
                "h": h,
                "strength": float(strength[i]),
                "ports": list(PORTS) if n.kind == "head" and g.flow != "up" else [],
            }
        )
    columns, rows = axes(g, xy)
    width = max([c["x"] + 40.0 for c in columns] + [n["x"] + n["w"] / 2 for n in nodes] + [0.0]) + MARGIN
    height = max([n["y"] + n["h"] for n in nodes] + [120.0]) + MARGIN
    return {
        "title": g.title,
        "flow": g.flow,
        "nodes": nodes,
        "edges": edges,
        "hidden": list(g.hidden),
        "shown": g.shown,
        "counts": counts,
        "columns": columns,
        "rows": rows,
        "size": [round(width, 1), round(height, 1)],
    }


WIRE_DIGITS = 5  # significant digits of the weights sent to the browser (the view shows 3)
EDGE_COLUMNS = ("s", "t", "port", "w", "lift")  # always sent; a diff adds "wb" and "status"
OPTIONAL_COLUMNS = ("heads", "check", "qk")  # sent when any edge has one


def _sig(v: float | None) -> float | None:
    return None if v is None else float(f"{v:.{WIRE_DIGITS}g}")


def _heads(h: dict | None) -> list | None:
    """A link's heads as [[head, weight], ...] (the view lists them in this order: strongest first)."""
    return None if h is None else [[k, _sig(float(v))] for k, v in h.items()]


def wire(data: dict) -> dict:
    """`to_data` as the view receives it: the edges (most of the bytes) as columns, not one object each, their
    end points flat, weights to WIRE_DIGITS digits, diff-only columns only in a diff (heads, check verdicts and QK
    entries only in a graph that has them): a third of the JSON of a
    2,000-edge graph (graph.js rebuilds the edge objects)."""
    edges = data["edges"]
    names = EDGE_COLUMNS + (("wb", "status") if data["counts"] else ())
    names += tuple(k for k in OPTIONAL_COLUMNS if any(e[k] is not None for e in edges))
    cols = {
        k: [_sig(e[k]) if k in ("w", "wb") else _heads(e[k]) if k == "heads" else e[k] for e in edges] for k in names
    }
    cols["p"] = [v for e in edges for v in e["p"]]
    nodes = [{**n, "strength": _sig(n["strength"])} for n in data["nodes"]]
    return {**data, "nodes": nodes, "edges": cols}
