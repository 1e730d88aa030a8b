"""circuit-tracer / Neuronpedia graph JSON, read and checked without torch: the format's fields as circuit-tracer
0.5.0's pydantic models define them (frontend/graph_models.py), the node types its frontend draws, and the graph as
the app draws it (`FeatureGraph`), with the two fields the workbench adds inside that schema: `qParams.supernodes`
(groups) and `workbench_check` (its nodes and edges measured by interventions). The workbench writes such graphs
for component circuits (component/export.py) and attribution graphs (feature/graph_json.py); schema.py reads a
component graph into a CircuitRecord through `validate`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

from workbench.circuits.fields import MAX_EDGES, get_bool, get_list, get_number, get_typed, is_a, type_name
from workbench.errors import DamagedFileError

TOP_KEYS = {"metadata", "nodes", "links"}  # the keys that make a JSON object a graph of this format
MAX_FEATURE = 2**53  # a graph node's feature id is below this: the largest integer a browser (JavaScript) keeps exact


def cantor(x: int, y: int) -> int:
    """circuit-tracer's feature index of (layer, index): unique across layers, so per-feature labels stay apart."""
    return (x + y) * (x + y + 1) // 2 + y


# circuit-tracer 0.5.0's graph schema (circuit_tracer.frontend.graph_models): required fields, then the
# optional ones with the default its pydantic models fill in; NULLABLE ones may also be null
NODE_FIELDS = {"node_id": str, "feature": int, "layer": str, "ctx_idx": int, "feature_type": str}
NODE_OPTIONAL = {
    "token_prob": (float, 0.0),
    "is_target_logit": (bool, False),
    "run_idx": (int, 0),
    "reverse_ctx_idx": (int, 0),
    "jsNodeId": (str, None),  # defaults to the node_id
    "clerp": (str, ""),
    "influence": (float, None),
    "activation": (float, None),
}
METADATA_FIELDS = {"slug": str, "scan": str, "transcoder_list": list, "prompt": str, "prompt_tokens": list}
METADATA_OPTIONAL = {"node_threshold": (float, None), "schema_version": (int, 1)}
NULLABLE = {"influence", "activation", "node_threshold", "schema_version"}
QPARAMS_FIELDS = ("pinnedIds", "supernodes", "linkType", "clickedId", "sg_pos")
# circuit-tracer's frontend knows four node types (embedding, logit, cross layer transcoder, mlp reconstruction
# error) and draws any other as a feature: a head is written as what it is, an MLP taken whole (its output not
# split into features) as what circuit-tracer calls an MLP's undecomposed output. Files written before heads had
# their own type hold heads as the MLP type: both read as components (the head index says which)
HEAD_TYPE, MLP_TYPE = "attention head", "mlp reconstruction error"
COMPONENT_TYPES = (HEAD_TYPE, MLP_TYPE)


def validate(d: dict) -> None:
    """Check the fields docs/methods.md §8 lists (types included) and that links are unique, finite and run
    forward in position; raise DamagedFileError naming every problem (the first ten)."""
    problems = [f"missing top-level key {k!r}" for k in ("metadata", "qParams", "nodes", "links") if k not in d]
    if not problems:
        problems += [
            f"{k} is {type_name(d[k])}, expected an object"
            for k in ("metadata", "qParams")
            if not isinstance(d[k], dict)
        ]
        problems += [
            f"{k} is {type_name(d[k])}, expected a list" for k in ("nodes", "links") if not isinstance(d[k], list)
        ]
    if problems:
        raise DamagedFileError("invalid Neuronpedia graph: " + "; ".join(problems))
    meta = d["metadata"]
    problems += _object_fields(meta, METADATA_FIELDS, METADATA_OPTIONAL, "metadata.{k}", "metadata lacks {k!r}")
    if meta.get("schema_version") not in (1, None):
        problems.append(f"metadata.schema_version is {meta.get('schema_version')!r}, expected 1")
    problems += [f"qParams lacks {k!r}" for k in QPARAMS_FIELDS if k not in d["qParams"]]
    if len(d["nodes"]) + len(d["links"]) > MAX_EDGES:
        problems.append(f"{len(d['nodes'])} nodes and {len(d['links'])} links exceed the limit of {MAX_EDGES}")
    ctx, top = {}, _logit_layer(d["nodes"][:MAX_EDGES])
    for i, n in enumerate(d["nodes"][:MAX_EDGES]):
        if not isinstance(n, dict):
            problems.append(f"nodes[{i}] is {type_name(n)}, expected an object")
            continue
        where = f"node {n.get('node_id')!r}"
        problems += _object_fields(n, NODE_FIELDS, NODE_OPTIONAL, where + " field {k!r}", where + " lacks {k!r}")
        if n.get("feature_type") == "logit" and n.get("clerp") and "(p=" not in str(n["clerp"]):
            problems.append(f"logit node {n.get('node_id')!r} clerp {n.get('clerp')!r} lacks '(p=...)'")
        problems += _node_indices(n, top, len(meta.get("prompt_tokens") or []), where)
        ctx[n.get("node_id")] = n["ctx_idx"] if is_a(n.get("ctx_idx"), int) else 0  # a bad one is named above
    seen = set()
    for i, link in enumerate(d["links"][:MAX_EDGES]):
        if not isinstance(link, dict) or not {"source", "target", "weight"} <= set(link):
            problems.append(f"links[{i}] needs source, target and weight")
        elif not is_a(link["weight"], float) or not math.isfinite(link["weight"]):
            problems.append(f"links[{i}].weight is {link['weight']!r}, expected a finite float")
        elif link["source"] not in ctx or link["target"] not in ctx:
            problems.append(f"link {link['source']} -> {link['target']} refers to a missing node")
        elif (link["source"], link["target"]) in seen:
            problems.append(f"link {link['source']} -> {link['target']} appears twice")
        elif ctx[link["source"]] > ctx[link["target"]]:
            problems.append(f"link {link['source']} -> {link['target']} runs from a later position to an earlier one")
        else:
            seen.add((link["source"], link["target"]))
    if problems:
        raise DamagedFileError(f"invalid Neuronpedia graph ({len(problems)} problems): " + "; ".join(problems[:10]))


def _logit_layer(nodes: list) -> int | None:
    """The layer the graph's logit nodes sit at (circuit-tracer: the model's layer count + 1), None if none names one."""
    layers = [n.get("layer") for n in nodes if isinstance(n, dict) and n.get("feature_type") == "logit"]
    layers = [int(x) for x in layers if isinstance(x, str) and x.isdecimal()]
    return max(layers) if layers else None


def _node_indices(n: dict, top: int | None, n_pos: int, where: str) -> list[str]:
    """Problems of a node's indices: its feature id a JavaScript-exact integer >= -1, its position inside the
    prompt, its layer 'E' (an embedding) or a decimal integer below the logits' layer, and a transcoder feature's
    node_id 'layer_latent_position' agreeing with its fields (the check and the app read the latent from it)."""
    out, feature, layer, pos = [], n.get("feature"), n.get("layer"), n.get("ctx_idx")
    if is_a(feature, int) and not -1 <= feature < MAX_FEATURE:
        out.append(f"{where} feature {feature} is outside [-1, 2**53)")
    if is_a(pos, int) and n_pos and not 0 <= pos < n_pos:
        out.append(f"{where} ctx_idx {pos} is outside the prompt's {n_pos} positions")
    if not isinstance(layer, str) or n.get("feature_type") == "embedding":
        return out
    if not layer.isdecimal() or not layer.isascii():
        return [*out, f"{where} layer {layer!r} is not a layer number"]
    if top is not None and n.get("feature_type") != "logit" and int(layer) >= top - 1:
        out.append(f"{where} layer {layer} is outside the graph's layers 0..{top - 2} (its logits sit at {top})")
    if n.get("feature_type") == "cross layer transcoder":
        parts = str(n.get("node_id")).split("_")
        if len(parts) != 3 or not all(p.isdecimal() for p in parts) or (parts[0], parts[2]) != (layer, str(pos)):
            out.append(f"{where} is not named layer_latent_position ({layer}_<latent>_{pos})")
    return out


def _object_fields(d: dict, required: dict, optional: dict, where: str, lacks: str) -> list[str]:
    """Problems of one circuit-tracer object: a required field missing, or any field of the wrong type (null
    only where circuit-tracer's schema allows it)."""
    problems = [lacks.format(k=k) for k in required if k not in d]
    types = {**required, **{k: t for k, (t, _) in optional.items()}}
    for k, t in types.items():
        if k in d and not is_a(d[k], t) and not (d[k] is None and k in NULLABLE):
            problems.append(f"{where.format(k=k)} is {type_name(d[k])}, expected {t.__name__}")
    return problems


def with_defaults(n: dict) -> dict:
    """A circuit-tracer node with the defaults its schema fills in for the optional fields it lacks."""
    filled = {k: default for k, (_, default) in NODE_OPTIONAL.items()} | {"jsNodeId": n.get("node_id")}
    return filled | n


# ------------------------------------------------------------------ the graph as the app draws it


@dataclass
class FeatureGraph:
    """A circuit-tracer / Neuronpedia feature graph as the app draws it: nodes by layer ('E' embeddings, logits at
    n_layers + 1) and position, links with their weight (and the heads carrying them where the workbench made it)."""

    nodes: list[dict]
    links: list[dict]
    pinned: list[str]
    metadata: dict
    check: dict | None = None  # GRAPH_CHECK: its nodes and edges measured by interventions (None: never checked)
    groups: list[list[str]] = field(default_factory=list)  # qParams.supernodes: [name, node_id, ...] each

    @cached_property
    def n_layers(self) -> int:
        layers = [int(n["layer"]) for n in self.nodes if str(n["layer"]).isdigit()]
        return max(layers, default=1) - 1


def read_feature_graph(d) -> FeatureGraph:
    """A graph JSON in circuit-tracer's schema (metadata.schema_version 1), validated (`validate`)."""
    if not isinstance(d, dict) or not TOP_KEYS <= set(d):
        raise DamagedFileError("not a circuit-tracer / Neuronpedia graph JSON (it needs metadata, nodes and links)")
    validate(d)
    check = read_graph_check(d[GRAPH_CHECK[0]]) if GRAPH_CHECK[0] in d else None
    nodes = [with_defaults(n) for n in d["nodes"]]
    pinned = list(d["qParams"].get("pinnedIds") or [])
    return FeatureGraph(nodes, d["links"], pinned, d["metadata"], check, supernodes(d))


def supernodes(d: dict) -> list[list[str]]:
    """A graph's qParams.supernodes (groups made by hand, or accepted by `workbench circuit group --accept`) as
    [name, node_id, ...] lists; DamagedFileError names an entry that is not one of this graph's nodes."""
    ids = {str(n["node_id"]) for n in d["nodes"]}
    out = []
    for g in d["qParams"].get("supernodes") or []:
        if not isinstance(g, list) or len(g) < 2 or any(str(x) not in ids for x in g[1:]):
            raise DamagedFileError(f"qParams.supernodes entry {str(g)[:120]} is not [name, node_id, ...] of this graph")
        out.append([str(g[0]), *dict.fromkeys(str(x) for x in g[1:])])
    return out


GRAPH_CHECK = ("workbench_check", "workbench.graph_check", 2)  # the key in a graph JSON, its schema and version
CHECK_VERDICTS = ("confirmed", "under-predicted", "over-predicted", "sign-flipped", "absent")  # check.VERDICTS


def read_graph_check(c) -> dict:
    """A graph's check record (workbench.interventions.check), an optional field of the graph JSON: its schema and
    version (1: one reading per row; 2: frozen and live readings, verdict words, the rank validation), each checked
    node, edge and QK part with finite predicted and measured effects and a verdict."""
    if not isinstance(c, dict) or c.get("schema") != GRAPH_CHECK[1]:
        raise DamagedFileError(f"{GRAPH_CHECK[0]} is not a graph check record (schema {GRAPH_CHECK[1]!r})")
    if c.get("schema_version") not in (1, GRAPH_CHECK[2]):
        raise DamagedFileError(
            f"{GRAPH_CHECK[0]} schema_version {c.get('schema_version')!r} is not a version this workbench reads "
            f"(1, {GRAPH_CHECK[2]})"
        )
    get_typed(c, "summary", dict, GRAPH_CHECK[0])
    v2 = c["schema_version"] == GRAPH_CHECK[2]
    if v2:
        get_typed(c, "spearman", dict, GRAPH_CHECK[0])
    for key in ("nodes", "edges", *(("qk",) if "qk" in c else ())):  # qk: the QK parts checked (optional)
        for r in get_list(c, key, MAX_EDGES):
            where = f"{GRAPH_CHECK[0]}.{key}"
            if not isinstance(r, dict):
                raise DamagedFileError(f"{where} holds {type_name(r)}, expected objects")
            for k in ("predicted", "measured", *(("measured_frozen", "measured_live") if v2 else ())):
                get_number(r, k, where)
            get_bool(r, "confirmed", where, False)
            for k in ("verdict", "verdict_frozen", "verdict_live") if v2 else ():
                if r.get(k) not in CHECK_VERDICTS:
                    raise DamagedFileError(f"{where}.{k} is {r.get(k)!r}; a verdict is one of {list(CHECK_VERDICTS)}")
    return c
