"""Foreign circuit formats: EAP-IG/MIB and circuit-tracer / Neuronpedia graph JSON (docs/methods.md §8).
The workbench's own lossless JSON belongs to the Circuit (types.py: to_dict / save / load).

Neuronpedia graphs are feature graphs; a head/MLP circuit maps onto them as follows: one
`embedding` node per prompt token feeding the circuit, one node per circuit head (`attention
head`, feature = head index) or MLP (`mlp`, feature = n_heads) placed at the token position where
its outgoing attribution is largest, and one `logit` node for the answer. Links carry the signed
edge scores (input edges split per token position when per-position scores exist; an edge into a
KV group links to every head of the group). `activation` is a node's attribution mass (sum of
|incident link weights|) and `influence` the cumulative share of that mass at the node's rank.
"""

from __future__ import annotations

import torch

from workbench.atomic import write_json
from workbench.circuits.graph import Graph
from workbench.circuits.types import Circuit, CircuitFileError, check_model, read_json

# ---------------------------------------------------------------- EAP-IG / MIB JSON

def _head_edges(graph: Graph, edge: str) -> list[str]:
    """An edge in MIB's per-head naming (a KV-group edge becomes one edge per head of the group)."""
    src, dst = edge.split("->")
    if ".kv" not in dst:
        return [edge]
    kind = dst[dst.index("<"):]
    return [f"{src}->{h}{kind}" for h in graph.reader_node(dst)]


def to_mib(c: Circuit, path=None) -> dict:
    g = c.graph
    cfg = {"n_layers": g.n_layers, "n_heads": g.n_heads, "parallel_attn_mlp": g.parallel_attn_mlp, "d_model": g.d_model}
    if g.grouped:
        cfg["n_key_value_heads"] = g.n_kv_heads
    in_nodes = set(c.nodes)
    edges = {}
    for e, s, m in zip(g.edges, c.scores.tolist(), c.in_circuit.tolist()):
        for name in _head_edges(g, e):
            edges[name] = {"score": float(s), "in_graph": bool(m)}
    d = {"cfg": cfg, "nodes": {n: {"in_graph": n in in_nodes} for n in g.nodes}, "edges": edges}
    if path is not None:
        write_json(path, d)
    return d


def from_mib(path_or_dict, model=None) -> Circuit:
    """Read an EAP-IG / MIB circuit JSON (scores and membership; no query or faithfulness in that format)."""
    d = read_json(path_or_dict)
    missing = {"cfg", "nodes", "edges"} - set(d)
    if missing:
        raise CircuitFileError(f"not an EAP-IG/MIB circuit file: missing keys {sorted(missing)}")
    cfg = d["cfg"]
    graph = Graph(cfg["n_layers"], cfg["n_heads"], cfg.get("n_key_value_heads", cfg["n_heads"]), cfg["d_model"],
                  bool(cfg.get("parallel_attn_mlp", False)), bool(cfg.get("attn_only", False)))
    check_model(graph, "", model)
    scores, member = torch.zeros(graph.n_edges), torch.zeros(graph.n_edges, dtype=torch.bool)
    for i, e in enumerate(graph.edges):
        heads = _head_edges(graph, e)
        absent = [h for h in heads if h not in d["edges"]]
        if absent:
            raise CircuitFileError(f"the MIB file lacks edge {absent[0]!r} of a model with config {cfg}")
        scores[i] = d["edges"][heads[0]]["score"]
        member[i] = any(d["edges"][h]["in_graph"] for h in heads)
    return Circuit(graph, member, scores, method={"name": "imported from MIB"})


# ---------------------------------------------------------------- circuit-tracer / Neuronpedia graph JSON

NP_NODE_FIELDS = {"node_id": str, "feature": int, "layer": str, "ctx_idx": int, "feature_type": str,
                  "token_prob": float, "is_target_logit": bool, "jsNodeId": str, "clerp": str,
                  "influence": float, "activation": float}
NP_METADATA_FIELDS = ("slug", "scan", "prompt", "prompt_tokens", "node_threshold", "schema_version")
NP_QPARAMS_FIELDS = ("pinnedIds", "supernodes", "linkType", "clickedId", "sg_pos")


def to_neuronpedia(c: Circuit, path=None, slug: str | None = None, node_threshold: float = 0.8,
                   position_share: float = 0.01) -> dict:
    g = c.graph
    tokens = c.query.get("tokens") or []
    str_toks = c.query.get("str_tokens") or [str(t) for t in tokens]
    last = max(len(tokens) - 1, 0)
    pp = c.per_position
    idx = c.in_circuit.nonzero().flatten().tolist()

    def main_pos(node: str) -> int:
        if pp is None or node == "logits":
            return last
        out = [i for i in idx if g.edges[i].split("->")[0] == node]
        return int(pp[:, out].abs().sum(1).argmax()) if out else last

    def node_id(node: str, ctx: int) -> str:
        if node == "logits":
            return f"{g.n_layers}_{c.query.get('answer_id', 0)}_{ctx}"
        if node == "input":
            return f"E_{tokens[ctx] if ctx < len(tokens) else 0}_{ctx}"
        layer, feat = _layer_feature(g, node)
        return f"{layer}_{feat}_{ctx}"

    pos = {n: main_pos(n) for n in c.nodes}
    links = []
    for i in idx:
        src, dst = g.edges[i].split("->")
        targets = ["logits"] if dst == "logits" else g.reader_node(dst)
        if src == "input" and pp is not None:
            col = pp[:, i]
            keep = (col.abs() >= position_share * col.abs().max()).nonzero().flatten().tolist()
            sources = [(node_id("input", p), float(col[p])) for p in keep]
        else:
            sources = [(node_id(src, pos.get(src, last)), float(c.scores[i]))]
        for t in targets:
            for sid, w in sources:
                links.append({"source": sid, "target": node_id(t, pos.get(t, last)), "weight": w})
    mass: dict[str, float] = {}
    for link in links:
        for k in ("source", "target"):
            mass[link[k]] = mass.get(link[k], 0.0) + abs(link["weight"])
    total = sum(mass.values()) or 1.0
    cum, influence = 0.0, {}
    for nid, m in sorted(mass.items(), key=lambda kv: -kv[1]):
        cum += m
        influence[nid] = cum / total
    prob = float(c.faithfulness.get("answer_prob", 0.0) or 0.0)
    nodes = []
    for nid in mass:
        layer, feature, ctx = nid.rsplit("_", 2)
        is_logit = layer == str(g.n_layers) and nid == node_id("logits", last)
        ftype = "embedding" if layer == "E" else "logit" if is_logit else \
            ("mlp" if int(feature) == g.n_heads else "attention head")
        if layer == "E":
            clerp = f"Emb: {str_toks[int(ctx)]!r}" if int(ctx) < len(str_toks) else "Emb"
        elif is_logit:
            clerp = f"Output: {c.query.get('answer')!r}"
        else:
            clerp = f"m{layer}" if ftype == "mlp" else f"a{layer}.h{feature}"
        nodes.append({"node_id": nid, "feature": int(feature), "layer": layer, "ctx_idx": int(ctx),
                      "feature_type": ftype, "token_prob": prob if is_logit else 0.0, "is_target_logit": is_logit,
                      "jsNodeId": f"{layer}_{feature}-{ctx}", "clerp": clerp, "influence": influence[nid],
                      "activation": mass[nid]})
    d = {
        "metadata": {"slug": slug or f"workbench-circuit-{abs(hash(tuple(tokens))) % 10**8}",
                     "scan": c.model_id, "prompt": c.query.get("prompt") or " ".join(str_toks),
                     "prompt_tokens": str_toks, "node_threshold": node_threshold, "schema_version": 1,
                     "info": {"creator_name": "workbench", "method": c.method.get("name"),
                              "ndf": c.faithfulness.get("ndf"), "n_edges": c.n_edges}},
        "qParams": {"pinnedIds": [], "supernodes": [], "linkType": "both", "clickedId": "", "sg_pos": ""},
        "nodes": nodes, "links": links,
    }
    validate_neuronpedia(d)
    if path is not None:
        write_json(path, d)
    return d


def _layer_feature(g: Graph, node: str) -> tuple[int, int]:
    if node.startswith("m"):
        return int(node[1:]), g.n_heads
    layer, head = node[1:].split(".h")
    return int(layer), int(head)


def validate_neuronpedia(d: dict) -> None:
    """Check the Neuronpedia graph fields (docs/methods.md §8), types included; raise CircuitFileError naming every problem."""
    problems = []
    for key in ("metadata", "qParams", "nodes", "links"):
        if key not in d:
            problems.append(f"missing top-level key {key!r}")
    if problems:
        raise CircuitFileError("; ".join(problems))
    problems += [f"metadata lacks {k!r}" for k in NP_METADATA_FIELDS if k not in d["metadata"]]
    if d["metadata"].get("schema_version") != 1:
        problems.append(f"metadata.schema_version is {d['metadata'].get('schema_version')!r}, expected 1")
    problems += [f"qParams lacks {k!r}" for k in NP_QPARAMS_FIELDS if k not in d["qParams"]]
    ids = set()
    for n in d["nodes"]:
        for k, t in NP_NODE_FIELDS.items():
            if k not in n:
                problems.append(f"node {n.get('node_id')!r} lacks {k!r}")
            elif not isinstance(n[k], t) or (t is int and isinstance(n[k], bool)):
                problems.append(f"node {n.get('node_id')!r} field {k!r} is {type(n[k]).__name__}, expected {t.__name__}")
        ids.add(n.get("node_id"))
    for link in d["links"]:
        if set(link) < {"source", "target", "weight"} or not isinstance(link.get("weight"), float):
            problems.append(f"link {link} needs source, target and a float weight")
        elif link["source"] not in ids or link["target"] not in ids:
            problems.append(f"link {link['source']} -> {link['target']} refers to a missing node")
    if problems:
        raise CircuitFileError(f"invalid Neuronpedia graph ({len(problems)} problems): " + "; ".join(problems[:10]))
