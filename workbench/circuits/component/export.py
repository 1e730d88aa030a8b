"""Foreign circuit formats: EAP-IG/MIB and circuit-tracer / Neuronpedia graph JSON (docs/methods.md §8).
The workbench's own lossless JSON belongs to the Circuit (types.py: to_dict / save / load).

Neuronpedia graphs are feature graphs; a head/MLP circuit maps onto them with circuit-tracer's
conventions (circuit_tracer.frontend.graph_models): one `embedding` node per prompt token feeding
the circuit (`feature` = its position), one node per circuit head or MLP (node id
`{layer}_{head}_{pos}`, the MLP as head index n_heads; a head of type "attention head", an MLP of type
"mlp reconstruction error", the type circuit-tracer gives an MLP's undecomposed output), and one `logit` node for the answer
(layer n_layers + 1, clerp `Output "tok" (p=...)`). Links carry the signed edge scores (see
to_neuronpedia for positions). `activation` is a node's attribution mass (sum of |incident link
weights|) and `influence` the cumulative share of that mass at the node's rank.
"""

from __future__ import annotations

import torch

from workbench.atomic import write_json
from workbench.circuits import neuronpedia, schema
from workbench.circuits.component.graph import Graph
from workbench.circuits.component.types import Circuit, check_model, read_json
from workbench.circuits.neuronpedia import cantor
from workbench.errors import DamagedFileError

# ---------------------------------------------------------------- EAP-IG / MIB JSON


def to_mib(c: Circuit, path=None) -> dict:
    g = c.graph
    cfg = {"n_layers": g.n_layers, "n_heads": g.n_heads, "parallel_attn_mlp": g.parallel_attn_mlp, "d_model": g.d_model}
    if g.grouped:
        cfg["n_key_value_heads"] = g.n_kv_heads
    in_nodes = set(c.nodes)
    edges = {}
    for e, s, m in zip(g.edges, c.scores.tolist(), c.in_circuit.tolist()):
        for name in g.head_edges(e):
            edges[name] = {"score": float(s), "in_graph": bool(m)}
    d = {"cfg": cfg, "nodes": {n: {"in_graph": n in in_nodes} for n in g.nodes}, "edges": edges}
    if path is not None:
        write_json(path, d)
    return d


def from_mib(path_or_dict, model=None) -> Circuit:
    """Read an EAP-IG / MIB circuit JSON (scores and membership; no query or faithfulness in that format)."""
    d = read_json(path_or_dict)
    name = path_or_dict if not isinstance(path_or_dict, dict) else "the MIB dict"
    missing = {"cfg", "nodes", "edges"} - set(d)
    if missing:
        raise DamagedFileError(f"{name} is not an EAP-IG/MIB circuit file: missing keys {sorted(missing)}")
    rec = schema.read_mib(d)
    graph = Graph(**rec.shape.config())
    check_model(graph, "", model)
    index = dict(zip(rec.edges, range(len(rec.edges))))
    scores, member = torch.zeros(graph.n_edges), torch.zeros(graph.n_edges, dtype=torch.bool)
    for i, e in enumerate(graph.edges):
        heads = graph.head_edges(e)
        absent = [h for h in heads if h not in index]
        if absent:
            raise DamagedFileError(f"the MIB file lacks edge {absent[0]!r} of a model with config {d['cfg']}")
        scores[i] = float(rec.scores[index[heads[0]]])
        member[i] = bool(rec.in_circuit[[index[h] for h in heads]].any())
    return Circuit(graph, member, scores, method=rec.method)


def read_circuit(path, model=None) -> Circuit:
    """A workbench or EAP-IG/MIB circuit file (told apart by content, as the app's upload is), checked
    against `model` when given; a Neuronpedia graph is an export, not every edge, and is refused by name."""
    fmt = schema.detect(schema.load(path))
    if fmt == "neuronpedia":
        raise DamagedFileError(
            f"{path} is a Neuronpedia / circuit-tracer graph: it holds only the drawn links, not every edge's score; "
            "convert the workbench or EAP-IG/MIB circuit it came from"
        )
    return Circuit.load(path, model) if fmt == "workbench" else from_mib(path, model)


# ---------------------------------------------------------------- circuit-tracer / Neuronpedia graph JSON


def to_neuronpedia(
    c: Circuit, path=None, slug: str | None = None, node_threshold: float = 0.8, position_share: float = 0.01
) -> dict:
    """The circuit as a circuit-tracer graph (node and id conventions of circuit_tracer.frontend.graph_models).

    Each component sits at one position: where its outgoing attribution is largest, moved earlier
    when needed so that no link runs from a later position to an earlier one (information only
    flows forward). Input edges become one link per token position holding at least
    `position_share` of the edge's largest per-position score, at or before the target's position.
    Links joining the same two nodes (a head's q, k and v inputs) are one link with the summed weight.
    """
    tokens = c.query.get("tokens") or []
    str_toks = c.query.get("str_tokens") or [str(t) for t in tokens]
    idx = c.in_circuit.nonzero().flatten().tolist()
    ids = _NodeIds(c.graph, tokens, int(c.query.get("answer_id") or 0))
    links = _np_links(c, idx, _np_positions(c, idx, ids.last), ids, position_share)
    mass: dict[str, float] = {}
    for link in links:
        for k in ("source", "target"):
            mass[link[k]] = mass.get(link[k], 0.0) + abs(link["weight"])
    total = sum(mass.values()) or 1.0
    cum, influence = 0.0, {}
    for nid, m in sorted(mass.items(), key=lambda kv: -kv[1]):
        cum += m
        influence[nid] = cum / total
    nodes = [_np_node(c, ids, nid, mass[nid], influence[nid], str_toks) for nid in mass]
    d = {
        "metadata": {
            "slug": slug or f"workbench-circuit-{abs(hash(tuple(tokens))) % 10**8}",
            "scan": c.model_id,
            "transcoder_list": [],
            "prompt": c.query.get("prompt") or " ".join(str_toks),
            "prompt_tokens": str_toks,
            "node_threshold": node_threshold,
            "schema_version": 1,
            "info": {
                "creator_name": "workbench",
                "method": c.method.get("name"),
                "ndf": c.faithfulness.get("ndf"),
                "n_edges": c.n_edges,
            },
        },
        "qParams": {"pinnedIds": [], "supernodes": [], "linkType": "both", "clickedId": "", "sg_pos": ""},
        "nodes": nodes,
        "links": links,
    }
    neuronpedia.validate(d)
    if path is not None:
        write_json(path, d)
    return d


class _NodeIds:
    """circuit-tracer node ids of a circuit's components at a position: `E_{token}_{pos}` for the input,
    `{layer}_{head}_{pos}` for a head or MLP (the MLP as head n_heads), `{n_layers + 1}_{answer}_{pos}` for the logit."""

    def __init__(self, g: Graph, tokens: list, answer_id: int):
        self.g, self.tokens, self.answer_id = g, tokens, answer_id
        self.last = max(len(tokens) - 1, 0)

    def __call__(self, node: str, ctx: int) -> str:
        if node == "logits":
            return f"{self.g.n_layers + 1}_{self.answer_id}_{ctx}"
        if node == "input":
            return f"E_{self.tokens[ctx] if ctx < len(self.tokens) else 0}_{ctx}"
        layer, feat = _layer_feature(self.g, node)
        return f"{layer}_{feat}_{ctx}"


def _np_positions(c: Circuit, idx: list[int], last: int) -> dict[str, int]:
    """Each component's position: where its outgoing attribution is largest, but no later than any of its
    targets' (so links run forward)."""
    g = c.graph
    targets: dict[str, set[str]] = {}
    for i in idx:
        src, dst = g.edges[i].split("->")
        targets.setdefault(src, set()).update(["logits"] if dst == "logits" else g.reader_node(dst))
    pos = {"logits": last}
    placed = set(targets) | {t for ts in targets.values() for t in ts}
    for node in reversed(g.writers[1:]):  # later components first: their positions bound their sources'
        if node in placed:
            pos[node] = min([_main_pos(c, idx, node, last)] + [pos[t] for t in targets.get(node, ())])
    return pos


def _main_pos(c: Circuit, idx: list[int], node: str, last: int) -> int:
    """The position where `node`'s outgoing edges in the circuit carry the most attribution."""
    if c.per_position is None:
        return last
    out = [i for i in idx if c.graph.edges[i].split("->")[0] == node]
    return int(c.per_position[:, out].abs().sum(1).argmax()) if out else last


def _np_links(c: Circuit, idx: list[int], pos: dict[str, int], ids: _NodeIds, position_share: float) -> list[dict]:
    """One link per (source node, target node), weights summed; an input edge splits over token positions."""
    g, pp = c.graph, c.per_position
    weights: dict[tuple[str, str], float] = {}
    for i in idx:
        src, dst = g.edges[i].split("->")
        for t in ["logits"] if dst == "logits" else g.reader_node(dst):
            tid = ids(t, pos[t])
            if src == "input" and pp is not None:
                col = pp[: pos[t] + 1, i]
                keep = (col.abs() >= position_share * pp[:, i].abs().max()).nonzero().flatten().tolist()
                sources = [(ids("input", p), float(col[p])) for p in keep]
            else:
                sources = [(ids(src, pos.get(src, ids.last)), float(c.scores[i]))]
            for sid, w in sources:
                weights[sid, tid] = weights.get((sid, tid), 0.0) + w
    return [{"source": s, "target": t, "weight": w} for (s, t), w in weights.items()]


def _np_node(c: Circuit, ids: _NodeIds, nid: str, mass: float, influence: float, str_toks: list[str]) -> dict:
    """One graph node: an embedding, the answer's logit, or a component taken whole."""
    layer, feature, ctx = nid.rsplit("_", 2)
    ctx = int(ctx)
    node = {
        "node_id": nid,
        "layer": layer,
        "ctx_idx": ctx,
        "token_prob": 0.0,
        "is_target_logit": False,
        "influence": influence,
        "activation": mass,
    }
    if layer == "E":
        node.update(
            feature=ctx,
            feature_type="embedding",
            jsNodeId=f"E_{feature}-{ctx}",
            clerp=f"Emb: {str_toks[ctx]!r}" if ctx < len(str_toks) else "Emb",
        )
    elif nid == ids("logits", ids.last):
        prob = float(c.faithfulness.get("answer_prob", 0.0) or 0.0)
        node.update(
            feature=ids.answer_id,
            feature_type="logit",
            jsNodeId=f"L_{ids.answer_id}-{ctx}",
            token_prob=prob,
            is_target_logit=True,
            clerp=f'Output "{c.query.get("answer")}" (p={prob:.3f})',
        )
    else:
        name = f"m{layer}" if int(feature) == c.graph.n_heads else f"a{layer}.h{feature}"
        node.update(
            feature=cantor(int(layer), int(feature)),
            feature_type=neuronpedia.MLP_TYPE if name[0] == "m" else neuronpedia.HEAD_TYPE,
            jsNodeId=f"{layer}_{feature}-{ctx}",
            clerp=f"{name} ({'MLP' if name[0] == 'm' else 'attention head'}, whole output)",
        )
    return node


def _layer_feature(g: Graph, node: str) -> tuple[int, int]:
    if node.startswith("m"):
        return int(node[1:]), g.n_heads
    layer, head = node[1:].split(".h")
    return int(layer), int(head)
