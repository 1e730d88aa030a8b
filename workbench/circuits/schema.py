"""Circuit files as data, without torch: the one place that knows every circuit format.

What it holds: the workbench format's name and version, format detection (workbench, EAP-IG/MIB,
circuit-tracer/Neuronpedia), the grammar of node and edge names (`a0.h1->a3.h2<q>`, `a3.kv0<k>`,
`m2`, `input`, `logits`), the model shape a circuit lives on (`GraphShape`: writers, readers and
edges in canonical order, numpy only), and one reader per format returning one record type
(`CircuitRecord`). Every reader of circuit files (`Circuit.from_dict`, `browse.open_circuit`, the
app's upload check) goes through `read`, which validates once: types and shapes, finite numbers,
token ids inside the vocabulary when it is known, size limits and nesting depth, each error naming
the field. Like circuit-tracer's frontend/graph_models.py, it is the typed schema between the
engine that makes graphs and the frontend that never imports the model.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from workbench.errors import DamagedFileError, MissingInputError

SCHEMA = "workbench.circuit"
FORMAT_VERSION = 1
FORMATS = {
    "workbench": f"workbench JSON (schema {SCHEMA} v{FORMAT_VERSION})",
    "mib": "EAP-IG / MIB JSON",
    "neuronpedia": "Neuronpedia / circuit-tracer graph JSON",
}
MAX_BYTES = 1 << 30  # a circuit file larger than this is refused before it is parsed
MAX_EDGES = 5_000_000  # edges a file may hold (GPT-2 small's graph: 32k)
MAX_POSITIONS = 8192  # prompt tokens a file may hold
MAX_FEATURE = 2**53  # a graph node's feature id is below this: the largest integer a browser (JavaScript) keeps exact


# ------------------------------------------------------------------ the name grammar

NODE_RE = re.compile(r"input|logits|m(?P<m>\d+)|a(?P<layer>\d+)\.(?P<group>h|kv)(?P<i>\d+)")
PORTS = ("q", "k", "v")


def head(layer: int, h: int) -> str:
    return f"a{layer}.h{h}"


def kv_group(layer: int, g: int) -> str:
    return f"a{layer}.kv{g}"


def mlp(layer: int) -> str:
    return f"m{layer}"


def reader(node: str, port: str | None = None) -> str:
    """A reader name: a head's query/key/value input `a3.h2<q>`, an MLP `m3`, `logits`."""
    return f"{node}<{port}>" if port else node


def edge(writer: str, reader_name: str) -> str:
    return f"{writer}->{reader_name}"


def split_edge(name: str) -> tuple[str, str]:
    """'a0.h1->a3.h2<q>' -> ('a0.h1', 'a3.h2<q>'), or DamagedFileError."""
    w, sep, r = name.partition("->") if isinstance(name, str) else ("", "", "")
    if not sep or not w or not r:
        raise DamagedFileError(f"edge name {name!r} is not WRITER->READER (e.g. 'a0.h1->a3.h2<q>')")
    return w, r


def parse_node(node: str) -> tuple[str, int | None, int | None]:
    """(kind, layer, index): ('input', None, None), ('head', 3, 2) for 'a3.h2', ('kv', 3, 0), ('mlp', 2, None)."""
    m = NODE_RE.fullmatch(node) if isinstance(node, str) else None
    if m is None:
        raise DamagedFileError(f"node name {node!r} is none of input, logits, m<layer>, a<layer>.h<head>")
    if node in ("input", "logits"):
        return node, None, None
    if m["m"] is not None:
        return "mlp", int(m["m"]), None
    return ("head" if m["group"] == "h" else "kv"), int(m["layer"]), int(m["i"])


def node_layer(node: str) -> int | None:
    return parse_node(node)[1]


def node_kind(node: str) -> str:
    """input | head | mlp | logits (a KV group counts as heads)."""
    kind = parse_node(node)[0]
    return "head" if kind == "kv" else kind


def parse_reader(name: str, n_heads: int, n_kv_heads: int) -> list[tuple[str, str]]:
    """A reader -> [(node, kind)] with kind q | k | v | mlp | logits | in (a head input of unknown port):
    'a3.h2<q>' -> [('a3.h2', 'q')]; a KV group 'a3.kv0<k>' -> one entry per head of the group."""
    base, lt, rest = name.partition("<")
    port = rest[:-1] if lt else None
    if lt and (not rest.endswith(">") or port not in PORTS):
        raise DamagedFileError(f"reader {name!r}: the port must be one of <q>, <k>, <v>")
    kind, layer, i = parse_node(base)
    if kind == "input" or (kind == "logits" and port) or (kind == "mlp" and port):
        raise DamagedFileError(f"{name!r} is not a reader (a head's <q>/<k>/<v>, an MLP m<layer>, or logits)")
    if kind in ("logits", "mlp"):
        return [(base, kind)]
    if kind == "head":
        return [(base, port or "in")]
    if port not in ("k", "v"):
        raise DamagedFileError(f"reader {name!r}: a key/value group is read only through <k> or <v>")
    per = n_heads // n_kv_heads
    return [(head(layer, i * per + j), port) for j in range(per)]


# ------------------------------------------------------------------ the model shape


@dataclass(frozen=True)
class GraphShape:
    """The computational graph of a model, as names (docs/methods.md §6): writers `input`, heads, MLPs;
    readers each head's q, each KV group's k and v, each MLP, `logits`; an edge joins a writer to every
    later reader. `circuits.graph.Graph` adds the torch views the engine computes with."""

    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_model: int
    parallel_attn_mlp: bool = False
    attn_only: bool = False

    @classmethod
    def from_config(cls, cfg, where: str = "graph") -> GraphShape:
        """A shape from a file's dict, every field checked (errors name `where`.field)."""
        if not isinstance(cfg, dict):
            raise DamagedFileError(f"{where} is {_type(cfg)}, expected an object with n_layers, n_heads, d_model")
        n_heads = _int(cfg, "n_heads", where, 1)
        n_kv = _int(cfg, "n_kv_heads", where, 1, default=n_heads)
        if n_heads % n_kv:
            raise DamagedFileError(f"{where}.n_kv_heads={n_kv} does not divide {where}.n_heads={n_heads}")
        n_layers = _int(cfg, "n_layers", where, 1)
        if (1 + n_layers * (n_heads + 1)) * (n_layers * (n_heads + 2 * n_kv + 1) + 1) > 4 * MAX_EDGES:
            raise DamagedFileError(f"{where} describes a graph larger than this reader's limit of {MAX_EDGES} edges")
        return cls(
            n_layers,
            n_heads,
            n_kv,
            _int(cfg, "d_model", where, 1),
            _bool(cfg, "parallel_attn_mlp", where, False),
            _bool(cfg, "attn_only", where, False),
        )

    def config(self) -> dict:
        return dict(
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            n_kv_heads=self.n_kv_heads,
            d_model=self.d_model,
            parallel_attn_mlp=self.parallel_attn_mlp,
            attn_only=self.attn_only,
        )

    @property
    def grouped(self) -> bool:
        return self.n_kv_heads != self.n_heads

    def head(self, layer: int, h: int) -> str:
        return head(layer, h)

    def kv_name(self, layer: int, g: int) -> str:
        return kv_group(layer, g) if self.grouped else head(layer, g)

    @cached_property
    def writers(self) -> list[str]:
        """Source nodes in forward order: `input`, then per layer its heads then its MLP."""
        out = ["input"]
        for layer in range(self.n_layers):
            out += [head(layer, h) for h in range(self.n_heads)]
            if not self.attn_only:
                out.append(mlp(layer))
        return out

    @cached_property
    def readers(self) -> list[str]:
        """Destination inputs: per layer q (per head), k and v (per KV group), the MLP; then `logits`."""
        out = []
        for layer in range(self.n_layers):
            out += [reader(head(layer, h), "q") for h in range(self.n_heads)]
            out += [reader(self.kv_name(layer, g), "k") for g in range(self.n_kv_heads)]
            out += [reader(self.kv_name(layer, g), "v") for g in range(self.n_kv_heads)]
            if not self.attn_only:
                out.append(mlp(layer))
        return out + ["logits"]

    @cached_property
    def nodes(self) -> list[str]:
        return self.writers + ["logits"]

    def reader_node(self, name: str) -> list[str]:
        """The nodes a reader belongs to (a KV group belongs to each of its heads)."""
        return [n for n, _ in parse_reader(name, self.n_heads, self.n_kv_heads)]

    @cached_property
    def writer_codes(self) -> np.ndarray:
        """Per writer: 2*layer + slot (slot 0 = attention, 1 = MLP); input = -1."""
        return np.array([-1] + [2 * int(w[1:].split(".")[0]) + (w[0] == "m") for w in self.writers[1:]])

    @cached_property
    def reader_codes(self) -> np.ndarray:
        """Per reader, the same 2*layer+slot code as `writer_codes` (logits = 2*n_layers)."""
        codes = []
        for layer in range(self.n_layers):
            codes += [2 * layer] * (self.n_heads + 2 * self.n_kv_heads)
            if not self.attn_only:
                codes.append(2 * layer + 1)
        return np.array(codes + [2 * self.n_layers])

    @cached_property
    def edge_matrix(self) -> np.ndarray:
        """[n_writers, n_readers] bool: which writer reaches which reader (writes strictly before it)."""
        w, r = self.writer_codes[:, None], self.reader_codes[None, :]
        mask = w < r
        if self.parallel_attn_mlp:  # the MLP reads resid_pre, not the same layer's attention output
            mlp_reader = (r % 2 == 1) & (r < 2 * self.n_layers)
            mask &= ~(mlp_reader & (w == r - 1))
        return mask

    @cached_property
    def edge_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """(writer index, reader index) per edge, in canonical (row-major) order."""
        return np.nonzero(self.edge_matrix)

    @property
    def n_edges(self) -> int:
        return len(self.edge_pairs[0])

    @cached_property
    def edges(self) -> list[str]:
        src, dst = self.edge_pairs
        return [edge(self.writers[s], self.readers[d]) for s, d in zip(src.tolist(), dst.tolist())]

    @cached_property
    def edge_ids(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.edges)}

    def head_edges(self, name: str) -> list[str]:
        """An edge in MIB's per-head naming (a KV-group edge becomes one edge per head of the group)."""
        w, r = split_edge(name)
        if ".kv" not in r:
            return [name]
        return [edge(w, reader(n, k)) for n, k in parse_reader(r, self.n_heads, self.n_kv_heads)]


# ------------------------------------------------------------------ the record every reader returns


@dataclass
class CircuitRecord:
    """One circuit file as validated data. `edges` are WRITER->READER names in the file's own naming
    (workbench: per KV group, in the graph's order; MIB: per head; Neuronpedia: node to node, a head's
    q/k/v merged into one reader without a port); `scores`, `in_circuit` and `per_position` align with them."""

    fmt: str
    edges: list[str]
    scores: np.ndarray  # float32 [n]
    in_circuit: np.ndarray  # bool [n]
    n_graph_edges: int  # edges of the model's whole graph (the denominator of edge fractions)
    shape: GraphShape | None = None
    per_position: np.ndarray | None = None  # float32 [n_positions, n]
    model_id: str = ""
    query: dict = field(default_factory=dict)
    method: dict = field(default_factory=dict)
    seed: int = 0
    faithfulness: dict = field(default_factory=dict)
    curve: dict | None = None
    effects: dict[str, float] | None = None  # measured effect of each kept edge (workbench files only)

    @property
    def n_circuit_edges(self) -> int:
        return int(self.in_circuit.sum())


def loads(raw: bytes | str, name: str = "the file", max_bytes: int = MAX_BYTES):
    """Parse JSON text with limits: size before parsing, nesting depth (a clear error, not RecursionError)."""
    if len(raw) > max_bytes:
        raise DamagedFileError(
            f"{name} is {len(raw) / 2**20:.1f} MiB; circuit files are limited to {max_bytes >> 20} MiB"
        )
    try:
        return json.loads(raw)
    except RecursionError:
        raise DamagedFileError(f"{name} nests JSON arrays or objects too deeply to be read") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DamagedFileError(f"{name} is not valid JSON: {e}") from None


def load(path: str | Path) -> dict:
    """A circuit file's top-level JSON object, with errors that name the file."""
    path = Path(path)
    if not path.is_file():
        raise MissingInputError(f"no circuit file at {path}")
    if path.stat().st_size > MAX_BYTES:
        raise DamagedFileError(f"{path} is larger than the {MAX_BYTES >> 20} MiB circuit files are limited to")
    d = loads(path.read_bytes(), str(path))
    if not isinstance(d, dict):
        raise DamagedFileError(
            f"{path} holds a JSON {type(d).__name__}, not a circuit object; valid formats: {'; '.join(FORMATS.values())}"
        )
    return d


def detect(d) -> str:
    """Which of FORMATS a parsed JSON value is, or DamagedFileError naming all three."""
    if isinstance(d, dict):
        if d.get("schema") == SCHEMA:
            return "workbench"
        if {"cfg", "nodes", "edges"} <= set(d):
            return "mib"
        if {"metadata", "nodes", "links"} <= set(d):
            return "neuronpedia"
    keys = sorted(map(str, d))[:6] if isinstance(d, dict) else _type(d)
    raise DamagedFileError(f"not a circuit file (top level {keys}); valid formats: {'; '.join(FORMATS.values())}")


def read(d, *, shape: GraphShape | None = None, d_vocab: int | None = None) -> CircuitRecord:
    """The record of a parsed circuit file of any format, validated. `shape` is needed for Neuronpedia
    graphs (they name no model shape) and checked against the file otherwise; `d_vocab` bounds token ids."""
    fmt = detect(d)
    if fmt == "workbench":
        rec = read_workbench(d)
    elif fmt == "mib":
        rec = read_mib(d)
    else:
        if shape is None:
            raise DamagedFileError("a Neuronpedia graph names no model shape: read it with the model it was made on")
        rec = read_neuronpedia(d, shape)
    if shape is not None and rec.shape is not None and rec.shape != shape:
        raise DamagedFileError(f"the file's graph {rec.shape.config()} is not this model's {shape.config()}")
    if d_vocab is not None:
        check_tokens(rec.query, d_vocab)
    return rec


def read_workbench(d: dict) -> CircuitRecord:
    """The workbench format v1 (Circuit.to_dict): the graph, every edge with score and membership, the query."""
    if d.get("schema_version") != FORMAT_VERSION:
        raise DamagedFileError(
            f"circuit file schema version {d.get('schema_version')!r} is not supported; "
            f"this workbench reads version {FORMAT_VERSION}"
        )
    shape = GraphShape.from_config(d.get("graph"), "graph")
    edges = _list(d, "edges", MAX_EDGES)
    if len(edges) != shape.n_edges:
        raise DamagedFileError(f"edges holds {len(edges)} entries but the graph {shape.config()} has {shape.n_edges}")
    names, scores, member, pp, effects = [], [], [], [], {}
    has_pp = bool(edges) and isinstance(edges[0], dict) and "per_position" in edges[0]
    for i, e in enumerate(edges):
        where = f"edges[{i}]"
        if not isinstance(e, dict):
            raise DamagedFileError(f"{where} is {_type(e)}, expected an object with name, score, in_circuit")
        names.append(_field(e, "name", str, where))
        scores.append(_number(e, "score", f"{where} ({names[-1]})"))  # a bad score names its edge too
        member.append(_field(e, "in_circuit", bool, where))
        if "effect" in e:
            effects[names[-1]] = _number(e, "effect", where)
        if has_pp:
            pp.append(_numbers(e.get("per_position"), f"{where}.per_position", MAX_POSITIONS))
    if names != shape.edges:
        bad = next(i for i, (a, b) in enumerate(zip(names, shape.edges)) if a != b)
        raise DamagedFileError(f"edges[{bad}].name is {names[bad]!r}; the graph's edge there is {shape.edges[bad]!r}")
    per_position = None
    if has_pp:
        if len({len(p) for p in pp}) > 1:
            raise DamagedFileError("edges[*].per_position lists differ in length")
        per_position = np.asarray(pp, dtype=np.float32).T
    return CircuitRecord(
        "workbench",
        names,
        np.asarray(scores, dtype=np.float32),
        np.asarray(member, dtype=bool),
        shape.n_edges,
        shape,
        per_position,
        model_id=_field(d, "model_id", str, "", default=""),
        query=_query(d.get("query")),
        method=_field(d, "method", dict, "", default={}) or {},
        seed=_field(d, "seed", int, "", default=0),
        faithfulness=_faithfulness(d.get("faithfulness")),
        curve=_curve(d.get("curve")),
        effects=effects or None,
    )


def read_mib(d: dict) -> CircuitRecord:
    """An EAP-IG / MIB file: cfg, nodes, and edges as {per-head name: {score, in_graph}}."""
    cfg = d["cfg"]
    if not isinstance(cfg, dict):
        raise DamagedFileError(f"cfg is {_type(cfg)}, expected an object with n_layers, n_heads, d_model")
    fields = ("n_layers", "n_heads", "d_model", "parallel_attn_mlp", "attn_only")
    shape = GraphShape.from_config(
        {**{k: cfg.get(k) for k in fields}, "n_kv_heads": cfg.get("n_key_value_heads")}, "cfg"
    )
    edges = d["edges"]
    if not isinstance(edges, dict):
        raise DamagedFileError(f"edges is {_type(edges)}, expected an object mapping edge names to {{score, in_graph}}")
    if not isinstance(d["nodes"], dict):
        raise DamagedFileError(f"nodes is {_type(d['nodes'])}, expected an object mapping node names to {{in_graph}}")
    if len(edges) > MAX_EDGES:
        raise DamagedFileError(f"edges holds {len(edges)} entries; the limit is {MAX_EDGES}")
    names, scores, member = [], [], []
    for name, e in edges.items():
        where = f"edges[{name!r}]"
        check_edge(name, shape, where)
        if not isinstance(e, dict):
            raise DamagedFileError(f"{where} is {_type(e)}, expected an object with score and in_graph")
        names.append(name)
        scores.append(_number(e, "score", where))
        member.append(_field(e, "in_graph", bool, where))
    return CircuitRecord(
        "mib",
        names,
        np.asarray(scores, dtype=np.float32),
        np.asarray(member, dtype=bool),
        len(names),
        shape,
        method={"name": "imported from MIB"},
    )


def read_neuronpedia(d: dict, shape: GraphShape) -> CircuitRecord:
    """A component graph as the workbench exports it: embeddings -> `input`, `{layer}_{head}_{pos}` -> a head
    or (head index n_heads) the MLP, the target logit -> `logits`; links node to node, summed over positions."""
    validate_neuronpedia(d)
    names = {}
    for n in d["nodes"]:
        t, nid = n["feature_type"], n["node_id"]
        if t == "embedding":
            names[nid] = "input"
        elif t == "logit":
            names[nid] = "logits"
        elif t in NP_COMPONENT_TYPES:
            layer, feat, _ = (nid.split("_") + ["", "", ""])[:3]
            if not (layer.isdigit() and feat.isdigit()):
                raise DamagedFileError(f"node {nid!r}: a component's node_id must be LAYER_HEAD_POSITION")
            names[nid] = mlp(int(layer)) if int(feat) == shape.n_heads else head(int(layer), int(feat))
            node_in_shape(names[nid], shape, f"node {nid!r}")
        else:
            raise DamagedFileError(
                f"node {nid!r} has type {t!r}: only component graphs (the workbench's Neuronpedia export) can be "
                "read here, not feature graphs"
            )
    rows: dict[tuple[str, str], float] = {}
    for link in d["links"]:
        key = (names[link["source"]], names[link["target"]])
        rows[key] = rows.get(key, 0.0) + float(link["weight"])
    meta = d["metadata"]
    info = meta.get("info") if isinstance(meta.get("info"), dict) else {}
    return CircuitRecord(
        "neuronpedia",
        [edge(s, t) for s, t in rows],
        np.asarray(list(rows.values()), dtype=np.float32),
        np.ones(len(rows), dtype=bool),
        shape.n_edges,
        shape,
        model_id=meta["scan"],
        query={"prompt": meta["prompt"], "str_tokens": meta["prompt_tokens"]},
        faithfulness=_faithfulness({"ndf": info.get("ndf")}),
        method={"name": info.get("method") or "imported from Neuronpedia"},
    )


def check_edge(name: str, shape: GraphShape, where: str) -> None:
    """An edge name in the grammar whose nodes exist in the shape (MIB names every reader per head)."""
    w, r = split_edge(name)
    if parse_node(w)[0] not in ("input", "head", "mlp"):
        raise DamagedFileError(f"{where}: {w!r} is not a writer (input, a head a<layer>.h<head>, an MLP m<layer>)")
    for n in [w] + [n for n, _ in parse_reader(r, shape.n_heads, shape.n_heads)]:
        node_in_shape(n, shape, where)


def node_in_shape(node: str, shape: GraphShape, where: str) -> None:
    kind, layer, i = parse_node(node)
    if layer is not None and layer >= shape.n_layers:
        raise DamagedFileError(f"{where}: {node!r} names layer {layer}; the model has {shape.n_layers} layers")
    if kind == "head" and i >= shape.n_heads:
        raise DamagedFileError(f"{where}: {node!r} names head {i}; the model has {shape.n_heads} heads per layer")


def check_tokens(query: dict, d_vocab: int) -> None:
    """Every token id of a query lies in [0, d_vocab), or DamagedFileError naming the field."""
    for k in ("answer_id", "wrong_id"):
        v = query.get(k)
        if v is not None and not 0 <= v < d_vocab:
            raise DamagedFileError(f"query.{k}={v} is outside the model's vocabulary of {d_vocab} tokens")
    for k in ("tokens", "counterfactual_tokens"):
        for i, t in enumerate(query.get(k) or []):
            if not 0 <= t < d_vocab:
                raise DamagedFileError(f"query.{k}[{i}]={t} is outside the model's vocabulary of {d_vocab} tokens")


# ------------------------------------------------------------------ circuit-tracer / Neuronpedia graph JSON


def cantor(x: int, y: int) -> int:
    """circuit-tracer's feature index of (layer, index): unique across layers, so per-feature labels stay apart."""
    return (x + y) * (x + y + 1) // 2 + y


# circuit-tracer 0.5.0's graph schema (circuit_tracer.frontend.graph_models): required fields, then the
# optional ones with the default its pydantic models fill in; NP_NULLABLE ones may also be null
NP_NODE_FIELDS = {"node_id": str, "feature": int, "layer": str, "ctx_idx": int, "feature_type": str}
NP_NODE_OPTIONAL = {
    "token_prob": (float, 0.0),
    "is_target_logit": (bool, False),
    "run_idx": (int, 0),
    "reverse_ctx_idx": (int, 0),
    "jsNodeId": (str, None),  # defaults to the node_id
    "clerp": (str, ""),
    "influence": (float, None),
    "activation": (float, None),
}
NP_METADATA_FIELDS = {"slug": str, "scan": str, "transcoder_list": list, "prompt": str, "prompt_tokens": list}
NP_METADATA_OPTIONAL = {"node_threshold": (float, None), "schema_version": (int, 1)}
NP_NULLABLE = {"influence", "activation", "node_threshold", "schema_version"}
NP_QPARAMS_FIELDS = ("pinnedIds", "supernodes", "linkType", "clickedId", "sg_pos")
# circuit-tracer's frontend knows four node types (embedding, logit, cross layer transcoder, mlp reconstruction
# error) and draws any other as a feature: a head is written as what it is, an MLP taken whole (its output not
# split into features) as what circuit-tracer calls an MLP's undecomposed output. Files written before heads had
# their own type hold heads as the MLP type: both read as components (the head index says which)
NP_HEAD_TYPE, NP_MLP_TYPE = "attention head", "mlp reconstruction error"
NP_COMPONENT_TYPES = (NP_HEAD_TYPE, NP_MLP_TYPE)


def validate_neuronpedia(d: dict) -> None:
    """Check the fields docs/methods.md §8 lists (types included) and that links are unique, finite and run
    forward in position; raise DamagedFileError naming every problem (the first ten)."""
    problems = [f"missing top-level key {k!r}" for k in ("metadata", "qParams", "nodes", "links") if k not in d]
    if not problems:
        problems += [
            f"{k} is {_type(d[k])}, expected an object" for k in ("metadata", "qParams") if not isinstance(d[k], dict)
        ]
        problems += [f"{k} is {_type(d[k])}, expected a list" for k in ("nodes", "links") if not isinstance(d[k], list)]
    if problems:
        raise DamagedFileError("invalid Neuronpedia graph: " + "; ".join(problems))
    meta = d["metadata"]
    problems += _np_fields(meta, NP_METADATA_FIELDS, NP_METADATA_OPTIONAL, "metadata.{k}", "metadata lacks {k!r}")
    if meta.get("schema_version") not in (1, None):
        problems.append(f"metadata.schema_version is {meta.get('schema_version')!r}, expected 1")
    problems += [f"qParams lacks {k!r}" for k in NP_QPARAMS_FIELDS if k not in d["qParams"]]
    if len(d["nodes"]) + len(d["links"]) > MAX_EDGES:
        problems.append(f"{len(d['nodes'])} nodes and {len(d['links'])} links exceed the limit of {MAX_EDGES}")
    ctx, top = {}, _logit_layer(d["nodes"][:MAX_EDGES])
    for i, n in enumerate(d["nodes"][:MAX_EDGES]):
        if not isinstance(n, dict):
            problems.append(f"nodes[{i}] is {_type(n)}, expected an object")
            continue
        where = f"node {n.get('node_id')!r}"
        problems += _np_fields(n, NP_NODE_FIELDS, NP_NODE_OPTIONAL, where + " field {k!r}", where + " lacks {k!r}")
        if n.get("feature_type") == "logit" and n.get("clerp") and "(p=" not in str(n["clerp"]):
            problems.append(f"logit node {n.get('node_id')!r} clerp {n.get('clerp')!r} lacks '(p=...)'")
        problems += _np_indices(n, top, len(meta.get("prompt_tokens") or []), where)
        ctx[n.get("node_id")] = n["ctx_idx"] if _is(n.get("ctx_idx"), int) else 0  # a bad one is named above
    seen = set()
    for i, link in enumerate(d["links"][:MAX_EDGES]):
        if not isinstance(link, dict) or not {"source", "target", "weight"} <= set(link):
            problems.append(f"links[{i}] needs source, target and weight")
        elif not _is(link["weight"], float) or not math.isfinite(link["weight"]):
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


def _np_indices(n: dict, top: int | None, n_pos: int, where: str) -> list[str]:
    """Problems of a node's indices: its feature id a JavaScript-exact integer >= -1, its position inside the
    prompt, its layer 'E' (an embedding) or a decimal integer below the logits' layer, and a transcoder feature's
    node_id 'layer_latent_position' agreeing with its fields (the check and the app read the latent from it)."""
    out, feature, layer, pos = [], n.get("feature"), n.get("layer"), n.get("ctx_idx")
    if _is(feature, int) and not -1 <= feature < MAX_FEATURE:
        out.append(f"{where} feature {feature} is outside [-1, 2**53)")
    if _is(pos, int) and n_pos and not 0 <= pos < n_pos:
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


def _np_fields(d: dict, required: dict, optional: dict, where: str, lacks: str) -> list[str]:
    """Problems of one circuit-tracer object: a required field missing, or any field of the wrong type (null
    only where circuit-tracer's schema allows it)."""
    problems = [lacks.format(k=k) for k in required if k not in d]
    types = {**required, **{k: t for k, (t, _) in optional.items()}}
    for k, t in types.items():
        if k in d and not _is(d[k], t) and not (d[k] is None and k in NP_NULLABLE):
            problems.append(f"{where.format(k=k)} is {_type(d[k])}, expected {t.__name__}")
    return problems


def np_defaults(n: dict) -> dict:
    """A circuit-tracer node with the defaults its schema fills in for the optional fields it lacks."""
    filled = {k: default for k, (_, default) in NP_NODE_OPTIONAL.items()} | {"jsNodeId": n.get("node_id")}
    return filled | n


# ------------------------------------------------------------------ field checks (errors name the field)

QUERY_INTS = ("answer_id", "wrong_id")
QUERY_STRS = ("prompt", "answer", "wrong", "counterfactual")
CURVE_LISTS = ("fractions", "edges", "search_ndf", "topk_ndf", "search_cpr_f", "topk_cpr_f")
CURVE_NUMBERS = ("search_cpr", "topk_cpr", "search_cmd", "topk_cmd")


def _query(q) -> dict:
    if q is None:
        return {}
    if not isinstance(q, dict):
        raise DamagedFileError(f"query is {_type(q)}, expected an object")
    for k in QUERY_INTS:
        _field(q, k, int, "query", default=None)
    for k in QUERY_STRS:
        _field(q, k, str, "query", default=None)
    for k, t in (("tokens", int), ("str_tokens", str), ("counterfactual_tokens", int)):
        v = q.get(k)
        if v is None:
            continue
        if not isinstance(v, list) or len(v) > MAX_POSITIONS or not all(_is(x, t) for x in v):
            raise DamagedFileError(f"query.{k} must be a list of at most {MAX_POSITIONS} {t.__name__}s")
    return q


def _faithfulness(f) -> dict:
    """Measurements as stored, a non-finite number read as null: the finder writes NaN for a statistic over
    no samples (the mean NDF of zero resampled counterfactuals), which means 'not measured'."""
    if f is None:
        return {}
    if not isinstance(f, dict):
        raise DamagedFileError(f"faithfulness is {_type(f)}, expected an object")
    return _finite_or_null(f)


def _finite_or_null(v):
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _finite_or_null(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite_or_null(x) for x in v]
    return v


def _curve(c) -> dict | None:
    if c is None:
        return None
    if not isinstance(c, dict):
        raise DamagedFileError(f"curve is {_type(c)}, expected an object")
    n = None
    for k in CURVE_LISTS:
        v = c.get(k)
        if not isinstance(v, list) or len(v) > 10_000 or not all(x is None or _is(x, float) for x in v):
            raise DamagedFileError(f"curve.{k} must be a list of at most 10000 numbers, got {_type(v)}")
        if n is not None and len(v) != n:
            raise DamagedFileError(f"curve.{k} has {len(v)} points, curve.fractions has {n}")
        n = len(v)
    for k in CURVE_NUMBERS:
        _field(c, k, float, "curve", default=None)
    return _finite_or_null(c)  # an NDF over a zero gap is NaN: not measured, drawn as a gap


def _type(v) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an int"}.get(
        type(v), "null" if v is None else f"a {type(v).__name__}"
    )


def _is(v, t) -> bool:
    """isinstance where bool is not an int and an int counts as a float (JSON writes 1.0 as 1 in some tools)."""
    if t in (int, float) and isinstance(v, bool):
        return False
    return isinstance(v, (int, float)) if t is float else isinstance(v, t)


def _field(d: dict, key: str, t, where: str, default=...):
    name = f"{where}.{key}" if where else key
    if key not in d or d[key] is None:
        if default is ...:
            raise DamagedFileError(f"{name} is missing")
        return default
    if not _is(d[key], t):
        raise DamagedFileError(f"{name} is {_type(d[key])}, expected {t.__name__}")
    return d[key]


def _int(d: dict, key: str, where: str, lo: int, default=...) -> int:
    v = _field(d, key, int, where, default)
    if v < lo:
        raise DamagedFileError(f"{where}.{key}={v} must be at least {lo}")
    return v


def _bool(d: dict, key: str, where: str, default: bool) -> bool:
    return _field(d, key, bool, where, default)


def _number(d: dict, key: str, where: str) -> float:
    v = _field(d, key, float, where)
    if not math.isfinite(v):
        raise DamagedFileError(f"{where}.{key} is {v!r}; scores must be finite numbers")
    return float(v)


def _list(d: dict, key: str, limit: int) -> list:
    v = d.get(key)
    if not isinstance(v, list):
        raise DamagedFileError(f"{key} is {_type(v)}, expected a list")
    if len(v) > limit:
        raise DamagedFileError(f"{key} holds {len(v)} entries; the limit is {limit}")
    return v


def _numbers(v, where: str, limit: int) -> list:
    if not isinstance(v, list) or len(v) > limit:
        raise DamagedFileError(f"{where} must be a list of at most {limit} numbers, got {_type(v)}")
    for i, x in enumerate(v):
        if not _is(x, float) or not math.isfinite(x):
            raise DamagedFileError(f"{where}[{i}] is {x!r}; expected a finite number")
    return v


# ------------------------------------------------------------------ feature circuits and feature graphs

FEATURE_SCHEMA = ("workbench.feature_circuit", 1)  # feature_circuit.FeatureCircuit.to_dict
FEATURE_CIRCUIT_KEYS = {"nodes": list, "edges": list, "universe": dict, "query": dict, "method": dict}
NODE_KINDS = ("feature", "error", "embedding")


def read_feature_circuit(d: dict) -> dict:
    """A feature circuit file (schema workbench.feature_circuit v1), checked: its schema and version, its parts'
    types, each node's kind and each number finite; DamagedFileError naming the first problem."""
    if not isinstance(d, dict) or d.get("schema") != FEATURE_SCHEMA[0]:
        got = d.get("schema") if isinstance(d, dict) else _type(d)
        raise DamagedFileError(f"not a feature circuit file: schema {got!r}, expected {FEATURE_SCHEMA[0]!r}")
    if d.get("schema_version") != FEATURE_SCHEMA[1]:
        raise DamagedFileError(
            f"feature circuit schema_version {d.get('schema_version')!r} is not the version this workbench reads "
            f"({FEATURE_SCHEMA[1]})"
        )
    for key, t in FEATURE_CIRCUIT_KEYS.items():
        _field(d, key, t, "feature circuit")
    for n in _list(d, "nodes", MAX_EDGES):
        if not isinstance(n, dict) or n.get("kind") not in NODE_KINDS:
            raise DamagedFileError(f"feature circuit node {n!r} has no kind among {', '.join(NODE_KINDS)}")
    for e in _list(d, "edges", MAX_EDGES):
        if not isinstance(e, dict) or not _is(e.get("weight"), float) or not math.isfinite(e["weight"]):
            raise DamagedFileError(f"feature circuit edge {e!r} needs a finite weight")
    _faithfulness(d.get("faithfulness"))
    return d


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
    """A graph JSON in circuit-tracer's schema (metadata.schema_version 1), validated (validate_neuronpedia)."""
    if not isinstance(d, dict) or detect(d) != "neuronpedia":
        raise DamagedFileError("not a circuit-tracer / Neuronpedia graph JSON (it needs metadata, nodes and links)")
    validate_neuronpedia(d)
    check = read_graph_check(d[GRAPH_CHECK[0]]) if GRAPH_CHECK[0] in d else None
    nodes = [np_defaults(n) for n in d["nodes"]]
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
    _field(c, "summary", dict, GRAPH_CHECK[0])
    v2 = c["schema_version"] == GRAPH_CHECK[2]
    if v2:
        _field(c, "spearman", dict, GRAPH_CHECK[0])
    for key in ("nodes", "edges", *(("qk",) if "qk" in c else ())):  # qk: the QK parts checked (optional)
        for r in _list(c, key, MAX_EDGES):
            where = f"{GRAPH_CHECK[0]}.{key}"
            if not isinstance(r, dict):
                raise DamagedFileError(f"{where} holds {_type(r)}, expected objects")
            for k in ("predicted", "measured", *(("measured_frozen", "measured_live") if v2 else ())):
                _number(r, k, where)
            _bool(r, "confirmed", where, False)
            for k in ("verdict", "verdict_frozen", "verdict_live") if v2 else ():
                if r.get(k) not in CHECK_VERDICTS:
                    raise DamagedFileError(f"{where}.{k} is {r.get(k)!r}; a verdict is one of {list(CHECK_VERDICTS)}")
    return c
