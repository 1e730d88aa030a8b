"""Circuit files as data, without torch: the one place every circuit file is read through.

What it holds: the workbench format's name and version, format detection (workbench, EAP-IG/MIB,
circuit-tracer/Neuronpedia, whose graph JSON neuronpedia.py checks), the grammar of node and edge names (`a0.h1->a3.h2<q>`, `a3.kv0<k>`,
`m2`, `input`, `logits`), the model shape a circuit lives on (`GraphShape`: writers, readers and
edges in canonical order, numpy only), and one reader per format returning one record type
(`CircuitRecord`). Every reader of circuit files (`Circuit.from_dict`, `browse.open_circuit`, the
app's upload check) goes through `read`, which validates once: types and shapes, finite numbers,
token ids inside the vocabulary when it is known, size limits and nesting depth, each error naming
the field (fields.py). Like circuit-tracer's frontend/graph_models.py, it is the typed schema between the
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

from workbench.circuits import neuronpedia
from workbench.circuits.fields import (
    MAX_EDGES,
    MAX_POSITIONS,
    check_numbers,
    finite_or_null,
    get_bool,
    get_int,
    get_list,
    get_number,
    get_typed,
    is_a,
    type_name,
)
from workbench.errors import DamagedFileError, MissingInputError

SCHEMA = "workbench.circuit"
FORMAT_VERSION = 1
FORMATS = {
    "workbench": f"workbench JSON (schema {SCHEMA} v{FORMAT_VERSION})",
    "mib": "EAP-IG / MIB JSON",
    "neuronpedia": "Neuronpedia / circuit-tracer graph JSON",
}
MAX_BYTES = 1 << 30  # a circuit file larger than this is refused before it is parsed


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
            raise DamagedFileError(f"{where} is {type_name(cfg)}, expected an object with n_layers, n_heads, d_model")
        n_heads = get_int(cfg, "n_heads", where, 1)
        n_kv = get_int(cfg, "n_kv_heads", where, 1, default=n_heads)
        if n_heads % n_kv:
            raise DamagedFileError(f"{where}.n_kv_heads={n_kv} does not divide {where}.n_heads={n_heads}")
        n_layers = get_int(cfg, "n_layers", where, 1)
        if (1 + n_layers * (n_heads + 1)) * (n_layers * (n_heads + 2 * n_kv + 1) + 1) > 4 * MAX_EDGES:
            raise DamagedFileError(f"{where} describes a graph larger than this reader's limit of {MAX_EDGES} edges")
        return cls(
            n_layers,
            n_heads,
            n_kv,
            get_int(cfg, "d_model", where, 1),
            get_bool(cfg, "parallel_attn_mlp", where, False),
            get_bool(cfg, "attn_only", where, False),
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
        if neuronpedia.TOP_KEYS <= set(d):
            return "neuronpedia"
    keys = sorted(map(str, d))[:6] if isinstance(d, dict) else type_name(d)
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
    edges = get_list(d, "edges", MAX_EDGES)
    if len(edges) != shape.n_edges:
        raise DamagedFileError(f"edges holds {len(edges)} entries but the graph {shape.config()} has {shape.n_edges}")
    names, scores, member, pp, effects = [], [], [], [], {}
    has_pp = bool(edges) and isinstance(edges[0], dict) and "per_position" in edges[0]
    for i, e in enumerate(edges):
        where = f"edges[{i}]"
        if not isinstance(e, dict):
            raise DamagedFileError(f"{where} is {type_name(e)}, expected an object with name, score, in_circuit")
        names.append(get_typed(e, "name", str, where))
        scores.append(get_number(e, "score", f"{where} ({names[-1]})"))  # a bad score names its edge too
        member.append(get_typed(e, "in_circuit", bool, where))
        if "effect" in e:
            effects[names[-1]] = get_number(e, "effect", where)
        if has_pp:
            pp.append(check_numbers(e.get("per_position"), f"{where}.per_position", MAX_POSITIONS))
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
        model_id=get_typed(d, "model_id", str, "", default=""),
        query=_query(d.get("query")),
        method=get_typed(d, "method", dict, "", default={}) or {},
        seed=get_typed(d, "seed", int, "", default=0),
        faithfulness=_faithfulness(d.get("faithfulness")),
        curve=_curve(d.get("curve")),
        effects=effects or None,
    )


def read_mib(d: dict) -> CircuitRecord:
    """An EAP-IG / MIB file: cfg, nodes, and edges as {per-head name: {score, in_graph}}."""
    cfg = d["cfg"]
    if not isinstance(cfg, dict):
        raise DamagedFileError(f"cfg is {type_name(cfg)}, expected an object with n_layers, n_heads, d_model")
    fields = ("n_layers", "n_heads", "d_model", "parallel_attn_mlp", "attn_only")
    shape = GraphShape.from_config(
        {**{k: cfg.get(k) for k in fields}, "n_kv_heads": cfg.get("n_key_value_heads")}, "cfg"
    )
    edges = d["edges"]
    if not isinstance(edges, dict):
        raise DamagedFileError(
            f"edges is {type_name(edges)}, expected an object mapping edge names to {{score, in_graph}}"
        )
    if not isinstance(d["nodes"], dict):
        raise DamagedFileError(
            f"nodes is {type_name(d['nodes'])}, expected an object mapping node names to {{in_graph}}"
        )
    if len(edges) > MAX_EDGES:
        raise DamagedFileError(f"edges holds {len(edges)} entries; the limit is {MAX_EDGES}")
    names, scores, member = [], [], []
    for name, e in edges.items():
        where = f"edges[{name!r}]"
        check_edge(name, shape, where)
        if not isinstance(e, dict):
            raise DamagedFileError(f"{where} is {type_name(e)}, expected an object with score and in_graph")
        names.append(name)
        scores.append(get_number(e, "score", where))
        member.append(get_typed(e, "in_graph", bool, where))
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
    neuronpedia.validate(d)
    names = {}
    for n in d["nodes"]:
        t, nid = n["feature_type"], n["node_id"]
        if t == "embedding":
            names[nid] = "input"
        elif t == "logit":
            names[nid] = "logits"
        elif t in neuronpedia.COMPONENT_TYPES:
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


# ------------------------------------------------------------------ field checks (errors name the field)

QUERY_INTS = ("answer_id", "wrong_id")
QUERY_STRS = ("prompt", "answer", "wrong", "counterfactual")
CURVE_LISTS = ("fractions", "edges", "search_ndf", "topk_ndf", "search_cpr_f", "topk_cpr_f")
CURVE_NUMBERS = ("search_cpr", "topk_cpr", "search_cmd", "topk_cmd")


def _query(q) -> dict:
    if q is None:
        return {}
    if not isinstance(q, dict):
        raise DamagedFileError(f"query is {type_name(q)}, expected an object")
    for k in QUERY_INTS:
        get_typed(q, k, int, "query", default=None)
    for k in QUERY_STRS:
        get_typed(q, k, str, "query", default=None)
    for k, t in (("tokens", int), ("str_tokens", str), ("counterfactual_tokens", int)):
        v = q.get(k)
        if v is None:
            continue
        if not isinstance(v, list) or len(v) > MAX_POSITIONS or not all(is_a(x, t) for x in v):
            raise DamagedFileError(f"query.{k} must be a list of at most {MAX_POSITIONS} {t.__name__}s")
    return q


def _faithfulness(f) -> dict:
    """Measurements as stored, a non-finite number read as null: the finder writes NaN for a statistic over
    no samples (the mean NDF of zero resampled counterfactuals), which means 'not measured'."""
    if f is None:
        return {}
    if not isinstance(f, dict):
        raise DamagedFileError(f"faithfulness is {type_name(f)}, expected an object")
    return finite_or_null(f)


def _curve(c) -> dict | None:
    if c is None:
        return None
    if not isinstance(c, dict):
        raise DamagedFileError(f"curve is {type_name(c)}, expected an object")
    n = None
    for k in CURVE_LISTS:
        v = c.get(k)
        if not isinstance(v, list) or len(v) > 10_000 or not all(x is None or is_a(x, float) for x in v):
            raise DamagedFileError(f"curve.{k} must be a list of at most 10000 numbers, got {type_name(v)}")
        if n is not None and len(v) != n:
            raise DamagedFileError(f"curve.{k} has {len(v)} points, curve.fractions has {n}")
        n = len(v)
    for k in CURVE_NUMBERS:
        get_typed(c, k, float, "curve", default=None)
    return finite_or_null(c)  # an NDF over a zero gap is NaN: not measured, drawn as a gap


# ------------------------------------------------------------------ feature circuits and feature graphs

FEATURE_SCHEMA = ("workbench.feature_circuit", 1)  # feature_circuit.FeatureCircuit.to_dict
FEATURE_CIRCUIT_KEYS = {"nodes": list, "edges": list, "universe": dict, "query": dict, "method": dict}
NODE_KINDS = ("feature", "error", "embedding")


def read_feature_circuit(d: dict) -> dict:
    """A feature circuit file (schema workbench.feature_circuit v1), checked: its schema and version, its parts'
    types, each node's kind and each number finite; DamagedFileError naming the first problem."""
    if not isinstance(d, dict) or d.get("schema") != FEATURE_SCHEMA[0]:
        got = d.get("schema") if isinstance(d, dict) else type_name(d)
        raise DamagedFileError(f"not a feature circuit file: schema {got!r}, expected {FEATURE_SCHEMA[0]!r}")
    if d.get("schema_version") != FEATURE_SCHEMA[1]:
        raise DamagedFileError(
            f"feature circuit schema_version {d.get('schema_version')!r} is not the version this workbench reads "
            f"({FEATURE_SCHEMA[1]})"
        )
    for key, t in FEATURE_CIRCUIT_KEYS.items():
        get_typed(d, key, t, "feature circuit")
    for n in get_list(d, "nodes", MAX_EDGES):
        if not isinstance(n, dict) or n.get("kind") not in NODE_KINDS:
            raise DamagedFileError(f"feature circuit node {n!r} has no kind among {', '.join(NODE_KINDS)}")
    for e in get_list(d, "edges", MAX_EDGES):
        if not isinstance(e, dict) or not is_a(e.get("weight"), float) or not math.isfinite(e["weight"]):
            raise DamagedFileError(f"feature circuit edge {e!r} needs a finite weight")
    _faithfulness(d.get("faithfulness"))
    return d
