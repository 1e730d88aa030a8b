"""An attribution graph as circuit-tracer / Neuronpedia graph JSON (circuit_tracer.frontend.graph_models and
create_graph_files' conventions, as export.py writes component circuits): the pruned graph's nodes (features as
'cross layer transcoder' nodes, error nodes, embeddings, logits) and its kept edges as links; a link that crosses
attention also names the heads carrying it ("heads": head -> weight, largest first, and "direct") and, with QK
attribution (graph_qk.py), why each of them attends ("qk", docs/methods.md §11): fields circuit-tracer's schema
ignores.

circuit-tracer names an error node '0_{layer}_{pos}', which can equal a layer-0 feature's id; error nodes are
named 'err_{layer}_{pos}' here so every node id is unique (the frontend maps nodes by id).

A model with absolute positions (AttributionGraph.positions) has two embedding nodes per position, both of
circuit-tracer's feature_type 'embedding' (its frontend draws them in the embedding row): the token
('E_{token}_{pos}', clerp "Emb: 'tok'") and the position ('P_{pos}_{pos}', clerp 'pos 7'), told apart by an
"embedding" field ('token' / 'position') circuit-tracer ignores; each embedding link is split into the two
parts, which sum to its weight. A rotary model's graph has one node per position and no such field.
"""

from __future__ import annotations

from workbench.atomic import write_json
from workbench.circuits import neuronpedia
from workbench.circuits.feature.graph_config import HEAD_SHARE
from workbench.circuits.neuronpedia import cantor


def _embedding_nodes(g, node: int, influence: float) -> list[dict]:
    """The JSON node(s) of embedding column `node`: the token's, and with absolute positions the position's."""
    pos = node - g.n_features - g.n_errors
    tok = g.tokens[pos]
    base = {"token_prob": 0.0, "is_target_logit": False, "influence": influence, "feature": pos, "layer": "E"}
    token = {
        **base,
        "node_id": f"E_{tok}_{pos}",
        "ctx_idx": pos,
        "feature_type": "embedding",
        "jsNodeId": f"E_{tok}-{pos}",
        "clerp": f"Emb: {g.str_tokens[pos]!r}",
        "activation": 0.0,
    }
    if g.positions is None:
        return [token]
    position = {**token, "node_id": f"P_{pos}_{pos}", "jsNodeId": f"P_{pos}-{pos}", "clerp": f"pos {pos}"}
    return [{**token, "embedding": "token"}, {**position, "embedding": "position"}]


def _node(g, node: int, influence: float, labels: dict) -> dict:
    n_f, n_e, L = g.n_features, g.n_errors, g.n_layers
    base = {"token_prob": 0.0, "is_target_logit": False, "influence": influence}
    if node < n_f:
        layer, pos, latent = g.features[node].tolist()
        return {
            **base,
            "node_id": f"{layer}_{latent}_{pos}",
            "feature": cantor(layer, latent),
            "layer": str(layer),
            "ctx_idx": pos,
            "feature_type": "cross layer transcoder",
            "jsNodeId": f"{layer}_{latent}-0",
            "clerp": labels.get((layer, latent), f"L{layer} latent {latent}"),
            "activation": float(g.activations[node]),
        }
    if node < n_f + n_e:
        layer, pos = divmod(node - n_f, g.n_pos)
        return {
            **base,
            "node_id": f"err_{layer}_{pos}",
            "feature": -1,
            "layer": str(layer),
            "ctx_idx": pos,
            "feature_type": "mlp reconstruction error",
            "jsNodeId": f"{layer}_{pos}-0",
            "clerp": f"error of layer {layer}'s transcoder",
            "activation": 0.0,
        }
    if node < g.n_sources:
        return _embedding_nodes(g, node, influence)[0]
    i = node - g.n_sources
    tok, p = g.logit_tokens[i], float(g.logit_probs[i])
    return {
        **base,
        "node_id": f"{L + 1}_{tok}_{g.n_pos - 1}",
        "feature": tok,
        "layer": str(L + 1),
        "ctx_idx": g.n_pos - 1,
        "feature_type": "logit",
        "token_prob": p,
        "is_target_logit": i == 0,
        "jsNodeId": f"L_{tok}-{g.n_pos - 1}",
        "clerp": f'Output "{g.logit_strs[i]}" (p={p:.3f})',
        "activation": 0.0,
    }


def _heads(g) -> dict:
    """(row, col) -> {head: weight} of the heads carrying at least HEAD_SHARE of each split edge."""
    if not g.heads:
        return {}
    out = {}
    names = g.heads["names"]
    for (r, c), w in zip(g.heads["edges"].tolist(), g.heads["weights"]):
        keep = (w.abs() >= HEAD_SHARE * w.abs().sum()).nonzero().flatten()
        keep = keep[w[keep].abs().argsort(descending=True)]
        out[r, c] = {names[k]: float(w[k]) for k in keep.tolist()}
    return out


def _top(row, n: int, name) -> list:
    """[[source node id, part], ...] of the n largest |parts| of a row over the graph's sources."""
    top = row.abs().argsort(descending=True)[:n]
    return [[name(c), float(row[c])] for c in top.tolist() if row[c] != 0]


def _qk(g) -> dict:
    """(row, col) -> the link's "qk" list (docs/methods.md §11): per head carrying it and attention entry it uses,
    {"head", "query", "key", "score", "query_sources", "key_sources"}, sources as [node id, part] pairs."""
    if not g.qk or not g.heads:
        return {}
    n, ids, names = g.config.get("qk_sources", 10), {}, g.heads["names"]

    def name(c: int) -> str:
        if c not in ids:
            ids[c] = _node(g, c, 0.0, {})["node_id"]
        return ids[c]

    entries = {}
    for i, (layer, head, q, k) in enumerate(g.qk["pairs"].tolist()):
        entries[i] = {
            "head": names[layer * g.n_heads + head],
            "query": q,
            "key": k,
            "score": float(g.qk["score"][i]),
            "query_sources": _top(g.qk["query"][i], n, name),
            "key_sources": _top(g.qk["key"][i], n, name),
        }
    out = {}
    edges = g.heads["edges"].tolist()
    for e, i in g.qk["uses"].tolist():
        out.setdefault(tuple(edges[e]), []).append(entries[i])
    return out


def to_neuronpedia(
    g,
    path=None,
    slug: str = "workbench-graph",
    labels: dict | None = None,
    circuit=None,
    pinned: bool = False,
    members: dict | None = None,
    dictionary_id: str | None = None,
) -> dict:
    """The pruned graph as a Neuronpedia graph dict (written to `path` if given); labels: (layer, latent) -> clerp.
    circuit (a feature_circuit.FeatureCircuit of this graph): its nodes and the edges between them instead, each
    link naming its heads; pinned: the circuit's nodes pinned (qParams.pinnedIds) in the whole pruned graph.
    dictionary_id (provenance.dictionary_id of the transcoders) goes into metadata.info, as the model's id is its scan,
    so a check with another dictionary is refused even where the graph file travels without its manifest."""
    node_mask, edge_mask, cumulative = g.pruned
    only = circuit is not None and not pinned
    if only:
        from workbench.circuits.feature.feature_circuit import circuit_edges

        node_mask, edge_mask = circuit.graph_nodes, circuit_edges(g, circuit.graph_nodes)
    kept = node_mask.nonzero().flatten().tolist()
    nodes = _nodes(g, kept, cumulative, labels or {})
    heads = _heads(g) if not only else {(e["source"], e["target"]): e["heads"] for e in circuit.edges}
    links = _links(g, edge_mask, nodes, heads, _qk(g) if not only else {}, only)
    pins = []
    if circuit is not None:
        on = circuit.graph_nodes[: g.n_sources].nonzero().flatten().tolist()
        pins = [m["node_id"] for n in on if n in nodes for m in nodes[n]]
    d = {
        "metadata": {
            "slug": slug,
            "scan": g.model_id,
            "transcoder_list": [],
            "prompt": g.prompt or "".join(g.str_tokens),
            "prompt_tokens": g.str_tokens,
            "node_threshold": g.config["node_threshold"],
            "schema_version": 1,
            "info": {
                "creator_name": "workbench",
                "edge_threshold": g.config["edge_threshold"],
                **g.scores,
                **({"transcoder_members": members} if members else {}),
                **({"dictionary_id": dictionary_id} if dictionary_id else {}),
            },
        },
        "qParams": {"pinnedIds": pins, "supernodes": [], "linkType": "both", "clickedId": "", "sg_pos": ""},
        "nodes": [m for ms in nodes.values() for m in ms],
        "links": links,
    }
    neuronpedia.validate(d)
    if path is not None:
        write_json(path, d)
    return d


def _nodes(g, kept: list[int], cumulative, labels: dict) -> dict:
    """graph node -> its JSON nodes: one, or for an embedding with absolute positions the token's and the
    position's, each with its share of the embedding's influence ("embedding_share", influence.split_columns)."""
    first, parts = g.n_features + g.n_errors, g.embedding_parts()
    out = {}
    for n in kept:
        if not first <= n < g.n_sources:
            out[n] = [_node(g, n, float(cumulative[n]), labels)]
            continue
        out[n] = _embedding_nodes(g, n, float(cumulative[n]))
        if parts is not None:
            split = {k: float(v[n - first]) for k, v in parts["influence"].items()}
            total = sum(split.values())
            for m in out[n]:
                m["embedding_share"] = split[m["embedding"]] / total if total else 0.0
    return out


def _links(g, edge_mask, nodes: dict, heads: dict, qk: dict, only: bool) -> list[dict]:
    """The kept edges between kept nodes as links (heads and QK named where split); an embedding's edge with
    absolute positions as two links, its token's part and its position's (AttributionGraph.positions), which sum
    to its weight; a part that is exactly zero is left out. The head split is of the whole embedding's edge, so
    the two parts' links carry none; its QK entries (why the heads attend where the edge goes) are both parts'."""
    first, links = g.n_features + g.n_errors, []
    for r, c in edge_mask.nonzero().tolist():
        target = g.row_node(r)
        if target not in nodes or c not in nodes:
            continue
        tgt, w = nodes[target][0]["node_id"], float(g.adjacency[r, c])
        if g.positions is not None and first <= c < g.n_sources:
            at = float(g.positions[r, c - first])
            pairs = [(m["node_id"], v) for m, v in zip(nodes[c], (w - at, at)) if v != 0]
            qk_parts = {"qk": qk[r, c]} if (r, c) in qk else {}
            links += [{"source": src, "target": tgt, "weight": v, **qk_parts} for src, v in pairs]
            continue
        link = {"source": nodes[c][0]["node_id"], "target": tgt, "weight": w}
        key = (g.node_name(c), g.node_name(target)) if only else (r, c)
        if key in heads:
            link["heads"] = heads[key]
        if (r, c) in qk:
            link["qk"] = qk[r, c]
        links.append(link)
    return links


def set_labels(transcoders, member: int | str = 0) -> dict:
    """(layer, latent) -> clerp, from the feature stores of a transcoder set's members: the short form of a latent's
    explanation (`workbench features explain`, marked as template text) where its store has one, else its best
    ground-truth label (highest F1 over the label kinds) with its precision; members without a store give none."""

    from workbench.circuits.feature.transcoders import Transcoders, open_set
    from workbench.features.explanations import short_labels
    from workbench.features.store import FeatureStore

    if isinstance(transcoders, Transcoders):
        transcoders = transcoders.source
    if transcoders is None or isinstance(transcoders, list):
        return {}
    out = {}
    for layer, folder in open_set(transcoders).member_folders(member).items():
        if not (folder / "features").is_dir():
            continue
        store = FeatureStore(folder)
        out |= {(layer, u): label for u, label in _ground_truth(store.units).items()}
        out |= {(layer, u): label for u, label in short_labels(store).items()}
    return out


def _ground_truth(df) -> dict[int, str]:
    """latent -> its best ground-truth label with its precision (latents that fired and match a label)."""
    kinds = [c[: -len("_f1")] for c in df.columns if c.endswith("_f1")]
    if not kinds:
        return {}
    out = {}
    best = df[[f"{k}_f1" for k in kinds]].to_numpy().argmax(1)
    for u, k in enumerate(best):
        kind = kinds[k]
        if df["count"].iat[u] > 0 and df[f"{kind}_f1"].iat[u] > 0:
            out[u] = f"{kind}={df[f'{kind}_label'].iat[u]} (precision {df[f'{kind}_precision'].iat[u]:.2f})"
    return out
