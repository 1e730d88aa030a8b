"""A feature graph (circuit-tracer / Neuronpedia graph JSON, read by workbench.circuits.schema) as the graph view's
data: features, error nodes, embeddings and logits across token positions and up the layers (as circuit-tracer
draws them: readable at a 64-token prompt, not one tall column), bounded to the
most influential nodes, with one sentence per filter saying what it hides. Pure Python: no torch, no Streamlit.

circuit-tracer's node `influence` is the cumulative share of influence at the node's rank (smaller: more
influential), so the cap keeps the nodes with the smallest values; embeddings and logits are always kept.
"""

from __future__ import annotations

from app.graph_view import layout
from workbench.circuits import schema

KINDS = {
    "cross layer transcoder": "feature",
    "mlp reconstruction error": "error",
    "embedding": "input",
    "logit": "logits",
}
ALWAYS = ("input", "logits")


def _node(n: dict, n_layers: int) -> layout.Node:
    kind = KINDS.get(n["feature_type"], "feature")
    if kind == "input":
        column, label = (-1, 0), "embeddings"
    elif kind == "logits":
        column, label = (n_layers, 0), "logits"
    else:
        layer = int(n["layer"])
        column, label = (layer, 0 if kind == "feature" else 1), f"L{layer}"  # one layer row: features, then errors
    layer = int(n["layer"]) if str(n["layer"]).isdigit() else None
    return layout.Node(
        n["node_id"],
        kind,
        column,
        label,
        pos=int(n["ctx_idx"]),
        layer=layer if kind not in ALWAYS else None,
        label=n["clerp"],
        score=1.0 if n["influence"] is None else float(n["influence"]),  # null (circuit-tracer allows it): ranks last
        activation=float(n["activation"]) if kind == "feature" and n["activation"] is not None else None,
    )


def link_heads(fg: schema.FeatureGraph) -> dict[tuple[str, str], dict]:
    """(source, target) -> {head: weight} of the links that name the heads carrying them."""
    return {(lk["source"], lk["target"]): lk["heads"] for lk in fg.links if isinstance(lk.get("heads"), dict)}


def to_graph(fg: schema.FeatureGraph, cap: int = 120, title: str = "") -> layout.Graph:
    """The `cap` most influential features and error nodes (plus every embedding and logit) and the links
    between them; `hidden` says how many nodes, links and how much link weight the cap hides."""
    n_layers = fg.n_layers
    nodes = [_node(n, n_layers) for n in fg.nodes]
    inner = sorted((n for n in nodes if n.kind not in ALWAYS), key=lambda n: n.score)
    keep = {n.id for n in inner[:cap]} | {n.id for n in nodes if n.kind in ALWAYS}
    edges = [
        layout.Edge(lk["source"], lk["target"], None, float(lk["weight"]))
        for lk in fg.links
        if lk["source"] in keep and lk["target"] in keep
    ]
    hidden = []
    n_hidden = len(inner) - min(cap, len(inner))
    if n_hidden:
        total = sum(abs(float(lk["weight"])) for lk in fg.links) or 1.0
        lost = 1 - sum(abs(e.weight) for e in edges) / total
        errors = sum(n.kind == "error" for n in inner[cap:])
        hidden.append(
            f"the node cap ({cap}) hides {n_hidden} of {len(inner)} features and error nodes ({errors} error nodes), "
            f"the least influential, with {len(fg.links) - len(edges)} of {len(fg.links)} links ({lost:.1%} of the "
            "total |link weight|)"
        )
    tokens = layout.token_columns(fg.metadata.get("prompt_tokens") or [])
    return layout.Graph([n for n in nodes if n.id in keep], edges, hidden, title, tokens, flow="up")


def node_rows(fg: schema.FeatureGraph, node_id: str) -> list[dict]:
    """The links into and out of one node, strongest first, each with the heads that carry it."""
    heads = link_heads(fg)
    rows = []
    for lk in fg.links:
        if node_id in (lk["source"], lk["target"]):
            h = heads.get((lk["source"], lk["target"]), {})
            named = ", ".join(f"{k} {v:+.3g}" for k, v in h.items())
            rows.append({"source": lk["source"], "target": lk["target"], "weight": float(lk["weight"]), "heads": named})
    return sorted(rows, key=lambda r: -abs(r["weight"]))
