"""A feature graph (circuit-tracer / Neuronpedia graph JSON, read by workbench.circuits.neuronpedia) as the graph view's
data: features, error nodes, embeddings and logits across token positions and up the layers (as circuit-tracer
draws them: readable at a 64-token prompt, not one tall column), bounded to the
most influential nodes, with one sentence per filter saying what it hides. Pure Python: no torch, no Streamlit.

circuit-tracer's node `influence` is the cumulative share of influence at the node's rank (smaller: more
influential), so the cap keeps the nodes with the smallest values; embeddings and logits are always kept.
"""

from __future__ import annotations

from app.graph_view import layout
from workbench.circuits import neuronpedia

KINDS = {
    "cross layer transcoder": "feature",
    "mlp reconstruction error": "error",
    "attention head": "head",
    "embedding": "input",
    "logit": "logits",
}
ALWAYS = ("input", "logits")


def verdict(r: dict) -> str:
    """A check row's verdict word: its `verdict` (schema version 2: confirmed, under-predicted, over-predicted,
    sign-flipped, absent, or a word a later version adds, which the view draws in a neutral "checked" style), else
    (version 1) confirmed | failed from its `confirmed` flag."""
    word = r.get("verdict")
    return str(word) if word else ("confirmed" if r.get("confirmed") else "failed")


def verdicts(fg: neuronpedia.FeatureGraph) -> tuple[dict, dict]:
    """The intervention check's verdicts (workbench circuit check, neuronpedia.GRAPH_CHECK): node id -> its verdict
    word (verdict()), and (source, target) -> the same; both empty for a graph never checked."""
    c = fg.check or {}
    nodes = {r["node_id"]: verdict(r) for r in c.get("nodes", []) if "node_id" in r}
    edges = {(r["source"], r["target"]): verdict(r) for r in c.get("edges", []) if "source" in r}
    return nodes, edges


def token(fg: neuronpedia.FeatureGraph, pos: int) -> str:
    tokens = fg.metadata.get("prompt_tokens") or []
    return str(tokens[pos]) if 0 <= pos < len(tokens) else f"pos {pos}"


def names(fg: neuronpedia.FeatureGraph) -> dict[str, str]:
    """node id -> the node as a researcher reads it: its label and the token it sits on (`L1 latent 5 @ ' Mary'`)."""
    return {n["node_id"]: f"{n['clerp'] or n['node_id']} @ {token(fg, int(n['ctx_idx']))!r}" for n in fg.nodes}


def _node(n: dict, n_layers: int, tokens: list, check: dict) -> layout.Node:
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
        token=str(tokens[n["ctx_idx"]]) if 0 <= n["ctx_idx"] < len(tokens) else "",
        influence=None if kind in ALWAYS or n["influence"] is None else float(n["influence"]),
        prob=float(n.get("token_prob") or 0.0) if kind == "logits" else None,
        check=check.get(n["node_id"]),
    )


def link_heads(fg: neuronpedia.FeatureGraph) -> dict[tuple[str, str], dict]:
    """(source, target) -> {head: weight} of the links that name the heads carrying them."""
    return {(lk["source"], lk["target"]): lk["heads"] for lk in fg.links if isinstance(lk.get("heads"), dict)}


def link_qk(fg: neuronpedia.FeatureGraph) -> dict[tuple[str, str], list]:
    """(source, target) -> why the heads carrying the link attend where they do (a graph built with --qk, docs/
    methods.md §11): per head, {"head", "query", "key" (positions), "query_token", "key_token", "score",
    "query_sources", "key_sources"}, each source [its name (names(); a pruned node by id), part, the check's
    verdict word or None]."""
    name, c = names(fg), fg.check or {}
    checked = {(r["source"], r["head"], r["query"], r["key"], r["side"]): verdict(r) for r in c.get("qk", [])}
    out = {}
    for lk in fg.links:
        entries = []
        for e in lk.get("qk") or ():
            at = (e["head"], e["query"], e["key"])
            sides = {
                f"{side}_sources": [
                    [name.get(src, src), float(part), checked.get((src, *at, side))]
                    for src, part in e[f"{side}_sources"]
                ]
                for side in ("query", "key")
            }
            tokens = {f"{k}_token": token(fg, int(e[k])) for k in ("query", "key")}
            entries.append(
                {"head": e["head"], "query": e["query"], "key": e["key"], "score": e["score"]} | tokens | sides
            )
        if entries:
            out[lk["source"], lk["target"]] = entries
    return out


def qk_rows(fg: neuronpedia.FeatureGraph, node_id: str) -> list[dict]:
    """The QK sources of the links into one node (link_qk), one row per source, largest |part| first per entry."""
    name, rows = names(fg), []
    for (src, tgt), entries in link_qk(fg).items():
        if tgt != node_id:
            continue
        for e in entries:
            where = f"{e['head']} at query {e['query']} {e['query_token']!r}, key {e['key']} {e['key_token']!r}"
            for side in ("query", "key"):
                for source, part, word in e[f"{side}_sources"]:
                    row = {"link from": name.get(src, src), "head, entry": where, "side": side, "source": source}
                    rows.append(row | {"part": part, "check": word or "not checked"})
    return rows


def beyond_cap(fg: neuronpedia.FeatureGraph, cap: int, marked) -> frozenset:
    """The marked node ids (pinned, grouped, noted, selected) of this graph that its node cap would leave out:
    to_graph draws them anyway, so a mark never vanishes under the cap."""
    inner = sorted((n for n in fg.nodes if KINDS.get(n["feature_type"], "feature") not in ALWAYS), key=_rank)
    capped = {n["node_id"] for n in inner[cap:]}
    return frozenset(m for m in marked if m in capped)


def _rank(n: dict) -> float:
    return 1.0 if n["influence"] is None else float(n["influence"])  # as _node's score


def to_graph(
    fg: neuronpedia.FeatureGraph, cap: int = 120, title: str = "", keep: frozenset = frozenset()
) -> layout.Graph:
    """The `cap` most influential features and error nodes (plus every embedding and logit, and the marked nodes
    `keep` beyond the cap) and the links between them; `hidden` says how many nodes, links and how much link
    weight the cap hides."""
    n_layers, tokens = fg.n_layers, fg.metadata.get("prompt_tokens") or []
    node_check, edge_check = verdicts(fg)
    nodes = [_node(n, n_layers, tokens, node_check) for n in fg.nodes]
    inner = sorted((n for n in nodes if n.kind not in ALWAYS), key=lambda n: n.score)
    extra = {n.id for n in inner[cap:] if n.id in keep}
    keep = {n.id for n in inner[:cap]} | {n.id for n in nodes if n.kind in ALWAYS} | extra
    heads, qk = link_heads(fg), link_qk(fg)
    edges = [
        layout.Edge(
            lk["source"],
            lk["target"],
            None,
            float(lk["weight"]),
            heads=heads.get((lk["source"], lk["target"])),
            check=edge_check.get((lk["source"], lk["target"])),
            qk=qk.get((lk["source"], lk["target"])),
        )
        for lk in fg.links
        if lk["source"] in keep and lk["target"] in keep
    ]
    hidden = []
    n_hidden = len(inner) - min(cap, len(inner)) - len(extra)
    if n_hidden:
        total = sum(abs(float(lk["weight"])) for lk in fg.links) or 1.0
        lost = 1 - sum(abs(e.weight) for e in edges) / total
        errors = sum(n.kind == "error" and n.id not in extra for n in inner[cap:])
        hidden.append(
            f"the node cap ({cap}) hides {n_hidden} of {len(inner)} features and error nodes ({errors} error nodes), "
            f"the least influential, with {len(fg.links) - len(edges)} of {len(fg.links)} links ({lost:.1%} of the "
            "total |link weight|)" + (f"; {len(extra)} marked nodes beyond it are drawn" if extra else "")
        )
    tokens = layout.token_columns(fg.metadata.get("prompt_tokens") or [])
    return layout.Graph([n for n in nodes if n.id in keep], edges, hidden, title, tokens, flow="up")


def node_rows(fg: neuronpedia.FeatureGraph, node_id: str) -> list[dict]:
    """The links into and out of one node, strongest first, each named by label and token (name), with the heads
    that carry it and its intervention check verdict when the graph was checked."""
    heads, (_, checked), name = link_heads(fg), verdicts(fg), names(fg)
    rows = []
    for lk in fg.links:
        if node_id in (lk["source"], lk["target"]):
            key = (lk["source"], lk["target"])
            named = ", ".join(f"{k} {v:+.3g}" for k, v in heads.get(key, {}).items())
            row = {"source": name[key[0]], "target": name[key[1]], "weight": float(lk["weight"]), "heads": named}
            rows.append({**row, "check": checked.get(key, "not checked")} if checked else row)
    return sorted(rows, key=lambda r: -abs(r["weight"]))


def circuit_id(n: dict) -> str:
    """The graph node id of a feature circuit's node (feature_circuit.json's rows; graph_json's ids)."""
    if n["kind"] == "feature":
        return f"{n['layer']}_{n['latent']}_{n['pos']}"
    return f"err_{n['layer']}_{n['pos']}" if n["kind"] == "error" else f"E_{n['pos']}"


def not_drawn(fg: neuronpedia.FeatureGraph, circuit: dict, drawn: set[str]) -> list[dict]:
    """The feature circuit's nodes the graph view does not show, each with the reason: a feature silent on the
    prompt fires only on the counterfactual (the attribution graph holds the prompt's active features), others
    were pruned from the graph, or lie below the view's node cap."""
    in_graph = {n["node_id"] for n in fg.nodes}
    embeddings = {  # a circuit's embedding node is the token's (a position node, absolute positions, is apart)
        f"E_{n['ctx_idx']}": n["node_id"]
        for n in fg.nodes
        if n["feature_type"] == "embedding" and n.get("embedding") != "position"
    }
    rows = []
    for n in circuit.get("nodes", []):
        nid = circuit_id(n)
        nid = embeddings.get(nid, nid)
        if nid in drawn:
            continue
        if nid in in_graph:
            why = "below the node cap (raise 'most influential nodes drawn')"
        elif n["kind"] == "feature" and not n.get("clean"):
            why = (
                "fires only on the counterfactual prompt (activation 0 on the prompt, so not in its attribution graph)"
            )
        else:
            why = "pruned from the attribution graph (below its node or edge influence threshold)"
        rows.append({"node": n["name"], "token": str(n.get("token", "")), "effect": n.get("effect"), "why": why})
    return rows
