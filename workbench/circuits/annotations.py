"""A researcher's marks on a circuit: pinned nodes, named supernode groups and free-text notes.

They travel in four places and must read back the same from each: the app's URL (`pinned=` comma-separated
node names, `groups=` and `notes=` as JSON), a Neuronpedia / circuit-tracer graph JSON, where pins are
`qParams.pinnedIds`, groups `qParams.supernodes` (`[name, node_id, ...]` lists, circuit-tracer's shape) and
a note is appended to the node's `clerp` after NOTE_MARK, and the workbench and MIB files, under FILE_KEY
in `as_dict`'s shape (both readers ignore keys they do not know, so a marked file is still a valid circuit).
Node names are the workbench's (`a0.h1`, `m2`, `input`, `logits`); a Neuronpedia graph has one node id per
(component, position), so `input` maps to every embedding node.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from dataclasses import dataclass, field

from workbench.circuits.neuronpedia import COMPONENT_TYPES
from workbench.circuits.schema import detect, loads
from workbench.errors import BadValueError, DamagedFileError

NOTE_MARK = " | note: "
FILE_KEY = "annotations"  # the workbench and MIB files' top-level key for the marks
MAX_NOTE = 2000  # characters per note: a URL has to hold them
# characters the marks may take in a page's link, URL-encoded: the app's server answers a request of about 128 KB
# or more with a bare HTTP 400 page (measured: 120 KB served, 149 KB refused), so a link stays well under that
MAX_LINK = 64_000
# the clerp the export writes for a component; anything else there is a label edited by a person
DEFAULT_CLERP = re.compile(r"(a\d+\.h\d+|m\d+) \((MLP|attention head), whole output\)")


@dataclass
class Annotations:
    pinned: list[str] = field(default_factory=list)
    groups: list[list[str]] = field(default_factory=list)  # [name, node, node, ...]
    notes: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.pinned or self.groups or self.notes)

    def as_dict(self) -> dict:
        return {"pinned": list(self.pinned), "groups": [list(g) for g in self.groups], "notes": dict(self.notes)}

    def restrict(self, nodes: set[str]) -> tuple[Annotations, list[str]]:
        """Only marks on `nodes`; the second value names what was dropped (never silently)."""
        dropped = [n for n in self.pinned if n not in nodes] + [n for n in self.notes if n not in nodes]
        groups = []
        for name, *members in self.groups:
            kept = [m for m in members if m in nodes]
            dropped += [m for m in members if m not in nodes]
            if kept:
                groups.append([name, *kept])
        out = Annotations(
            [n for n in self.pinned if n in nodes], groups, {k: v for k, v in self.notes.items() if k in nodes}
        )
        return out, sorted(set(dropped))


def from_dict(d) -> Annotations:
    """Annotations from a JSON-like dict (the view's state), each field checked; BadValueError names the bad one."""
    if not isinstance(d, dict):
        raise BadValueError(f"annotations must be an object with pinned, groups and notes, got {type(d).__name__}")
    return Annotations(_pins(d.get("pinned", [])), _groups(d.get("groups", [])), _notes(d.get("notes", {})))


def _pins(v) -> list[str]:
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
        raise BadValueError(f"pinned must be a list of node names, got {v!r}"[:200])
    return list(dict.fromkeys(v))


def _groups(v) -> list[list[str]]:
    ok = isinstance(v, list) and all(
        isinstance(g, list) and len(g) >= 2 and all(isinstance(x, str) and x for x in g) for g in v
    )
    if not ok:
        raise BadValueError(f"groups must be a list of [name, node, ...] lists, got {v!r}"[:200])
    return [list(g) for g in v]


def _notes(v) -> dict[str, str]:
    if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()):
        raise BadValueError(f"notes must map node names to text, got {v!r}"[:200])
    long = [k for k, x in v.items() if len(x) > MAX_NOTE]
    if long:
        raise BadValueError(f"the note on {long[0]} is longer than {MAX_NOTE} characters")
    return {k: x for k, x in v.items() if x.strip()}


# ------------------------------------------------------------------ the URL


def to_query(a: Annotations) -> dict[str, str]:
    """Query parameters (absent ones empty): pinned=a0.h1,m2 · groups=[["name","a0.h1","m2"]] · notes={...}."""
    return {
        "pinned": ",".join(a.pinned),
        "groups": json.dumps(a.groups, separators=(",", ":")) if a.groups else "",
        "notes": json.dumps(a.notes, separators=(",", ":"), ensure_ascii=False) if a.notes else "",
    }


def link_size(a: Annotations) -> int:
    """The characters the marks take in a page's link (to_query's parameters, URL-encoded)."""
    return len(urllib.parse.urlencode({k: v for k, v in to_query(a).items() if v}))


def check_link(a: Annotations) -> None:
    """Marks that fit a page's link (MAX_LINK), or a BadValueError saying how big they are and the way out."""
    size = link_size(a)
    if size > MAX_LINK:
        raise BadValueError(
            f"these marks ({len(a.pinned)} pins, {len(a.groups)} groups, {len(a.notes)} notes) would take "
            f"{size / 1000:.0f} KB of the page's link, over the {MAX_LINK // 1000} KB a link holds, so the last "
            "change is not kept: remove some notes, or download the graph with its marks (a file holds any number)"
        )


def from_param(name: str, raw: str):
    """One of to_query's parameters back (pinned, groups or notes; "" is none). JSON is read as an uploaded file
    is (schema.loads: its size and nesting-depth limits); a malformed value is a BadValueError naming the
    parameter, with an example."""
    if len(raw) > MAX_LINK:
        raise BadValueError(
            f"{name}= is {len(raw) / 1000:.0f} KB, over the {MAX_LINK // 1000} KB of marks a link holds; open the "
            "graph from a file that carries its marks instead"
        )
    if name == "pinned":
        return _pins([p for p in raw.split(",") if p])
    try:
        value = loads(raw, f"query parameter {name}={raw[:80]!r}") if raw else ([] if name == "groups" else {})
    except DamagedFileError as e:
        raise BadValueError(f"{e} (e.g. {name}={to_query(EXAMPLE)[name]})") from None
    return _groups(value) if name == "groups" else _notes(value)


def from_query(params) -> Annotations:
    """The reverse of to_query; a malformed value is a BadValueError naming the parameter."""
    return Annotations(*(from_param(name, params.get(name) or "") for name in ("pinned", "groups", "notes")))


EXAMPLE = Annotations(["a0.h1", "m2"], [["movers", "a0.h1", "m2"]], {"m2": "copies the name"})


# ------------------------------------------------------------------ how the view was left

VIEW_KEY = "workbench_view"  # a feature graph's qParams field for what circuit-tracer's qParams has no field for


@dataclass
class View:
    """How the graph view was left: the links drawn at rest, the node and edge influence thresholds
    (circuit-tracer's pruning, in (0, 1]) and the groups collapsed into supernodes; None: the view's default."""

    link_cap: int | None = None
    node_threshold: float | None = None
    edge_threshold: float | None = None
    collapsed: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {**self.__dict__, "collapsed": list(self.collapsed)}

    def changed(self) -> dict:
        """The fields set away from the view's defaults (what a file needs to carry)."""
        return {k: x for k, x in self.as_dict().items() if x not in (None, [])}


VIEW_PARAMS = {"link_cap": "links", "node_threshold": "node_threshold", "edge_threshold": "edge_threshold"}
VIEW_PARAMS["collapsed"] = "collapsed"  # the URL's name of each View field
_VIEW_READ = {"link_cap": int, "node_threshold": float, "edge_threshold": float}  # collapsed: JSON


def view_from_dict(d) -> View:
    """A View from the graph view's state (or a file's); BadValueError names the bad field and its valid range."""
    if not isinstance(d, dict):
        raise BadValueError(f"the view's settings must be an object, got {type(d).__name__}")
    cap, collapsed = d.get("link_cap"), d.get("collapsed") or []
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 0):
        raise BadValueError(f"link_cap must be a whole number of links, 0 or more, got {cap!r}"[:200])
    if not isinstance(collapsed, list) or not all(isinstance(x, str) and x for x in collapsed):
        raise BadValueError(f"collapsed must be a list of group names, got {collapsed!r}"[:200])
    out = {}
    for name in ("node_threshold", "edge_threshold"):
        t = d.get(name)
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t <= 1):
            raise BadValueError(f"{name} must be a number in (0, 1], got {t!r}"[:200])
        out[name] = None if t is None else float(t)
    return View(cap, out["node_threshold"], out["edge_threshold"], list(dict.fromkeys(collapsed)))


def view_to_query(v: View) -> dict[str, str]:
    """Query parameters (defaults empty): links=300 · node_threshold=0.8 · edge_threshold=0.9 · collapsed=["movers"]."""
    d = v.as_dict()
    return {
        VIEW_PARAMS[k]: ("" if x in (None, []) else json.dumps(x, ensure_ascii=False) if k == "collapsed" else str(x))
        for k, x in d.items()
    }


EXAMPLE_VIEW_QUERY = view_to_query(View(300, 0.8, 0.9, ["movers"]))


def view_from_query(params) -> View:
    """The reverse of view_to_query; a malformed value is a BadValueError naming the parameter."""
    d = {}
    for k, name in VIEW_PARAMS.items():
        raw = params.get(name) or ""
        try:
            d[k] = (loads(raw, name) if k == "collapsed" else _VIEW_READ[k](raw)) if raw else None
        except (ValueError, DamagedFileError):
            raise BadValueError(
                f"query parameter {name}={raw[:80]!r} is malformed (e.g. {EXAMPLE_VIEW_QUERY[name]})"
            ) from None
    try:
        return view_from_dict(d)
    except BadValueError as e:
        raise BadValueError(f"query parameter: {e}") from None


# ------------------------------------------------------------------ Neuronpedia graph JSON


def _component(n: dict) -> str | None:
    """The workbench node a Neuronpedia node stands for (None: a node type this graph does not map)."""
    t, nid = n.get("feature_type"), str(n.get("node_id"))
    if t == "embedding":
        return "input"
    if t == "logit":
        return "logits"
    if t not in COMPONENT_TYPES:
        return None
    layer, feat = nid.split("_")[:2]
    return None if not (layer.isdigit() and feat.isdigit()) else (layer, int(feat))


def _names(d: dict, n_heads: int) -> dict[str, str]:
    """node_id -> workbench node name of every node of an exported component graph."""
    out = {}
    for n in d.get("nodes", []):
        c = _component(n)
        if isinstance(c, tuple):
            c = f"m{c[0]}" if c[1] == n_heads else f"a{c[0]}.h{c[1]}"
        if c is not None:
            out[str(n["node_id"])] = c
    return out


def apply_neuronpedia(d: dict, a: Annotations, n_heads: int, selected: str | None = None) -> dict:
    """A copy of an exported graph carrying `a`: pins and groups in qParams, notes appended to the clerps, the
    selected node as qParams.clickedId (its first node id)."""
    return _apply(d, a, _names(d, n_heads), selected)


def _ids(d: dict) -> dict[str, str]:
    """node_id -> itself: a feature graph's marks name its nodes by id."""
    return {str(n["node_id"]): str(n["node_id"]) for n in d.get("nodes", []) if isinstance(n, dict)}


def apply_feature_graph(d: dict, a: Annotations, clicked: str | None = None, view: View | None = None) -> dict:
    """A copy of a feature graph (circuit-tracer graph JSON) carrying `a` as apply_neuronpedia does, the
    selected node as qParams.clickedId (circuit-tracer's own field for it) and how the view was left (`view`)."""
    return _with_view(_apply(d, a, _ids(d), clicked), view)


def _with_view(d: dict, view: View | None) -> dict:
    """A graph JSON whose qParams carry `view`: the node threshold as qParams.pruningThreshold (circuit-tracer's),
    the rest under qParams[VIEW_KEY] (its frontend ignores keys it does not know)."""
    q = {k: x for k, x in d["qParams"].items() if k not in ("pruningThreshold", VIEW_KEY)}
    v = view or View()
    if v.node_threshold is not None:
        q["pruningThreshold"] = v.node_threshold
    rest = {k: x for k, x in v.changed().items() if k != "node_threshold"}
    return {**d, "qParams": {**q, VIEW_KEY: rest} if rest else q}


def read_feature_graph(d: dict) -> tuple[Annotations, str | None]:
    """(pins, groups and notes, the selected node) of a feature graph: the reverse of apply_feature_graph."""
    q = d.get("qParams") if isinstance(d.get("qParams"), dict) else {}
    clicked = str(q.get("clickedId") or "")
    return _read(d, _ids(d), lambda n, clerp: False), clicked if clicked in _ids(d) else None


def read_feature_view(d: dict) -> View:
    """How a graph JSON's view was left (_with_view's `view`); DamagedFileError names a bad field."""
    q = d.get("qParams") if isinstance(d.get("qParams"), dict) else {}
    rest = q.get(VIEW_KEY) or {}
    if not isinstance(rest, dict):
        raise DamagedFileError(f"qParams.{VIEW_KEY} must be an object, got {rest!r}"[:200])
    threshold = q.get("pruningThreshold")  # circuit-tracer's frontend keeps it as the text of its slider
    try:
        return view_from_dict({**rest, "node_threshold": None if threshold in (None, "") else float(threshold)})
    except (BadValueError, TypeError, ValueError) as e:
        raise DamagedFileError(f"qParams: {e}") from None


def without_notes(d: dict) -> dict:
    """A copy of a graph whose clerps no longer carry the notes apply_* appended (they are read as notes)."""
    return {**d, "nodes": [{**n, "clerp": str(n.get("clerp", "")).split(NOTE_MARK)[0]} for n in d["nodes"]]}


def _apply(d: dict, a: Annotations, names: dict[str, str], selected: str | None) -> dict:
    ids: dict[str, list[str]] = {}
    for nid, name in names.items():
        ids.setdefault(name, []).append(nid)
    nodes = []
    for n in d["nodes"]:
        base = str(n.get("clerp", "")).split(NOTE_MARK)[0]
        note = a.notes.get(names.get(str(n["node_id"]), ""))
        nodes.append({**n, "clerp": base + NOTE_MARK + note if note else base})
    q = dict(d["qParams"])
    q["pinnedIds"] = [nid for p in a.pinned for nid in ids.get(p, [])]
    q["supernodes"] = [[name, *(nid for m in members for nid in ids.get(m, []))] for name, *members in a.groups]
    q["clickedId"] = ids.get(selected, [""])[0] if selected else ""
    return {**d, "qParams": q, "nodes": nodes}


def read_neuronpedia(d: dict, n_heads: int) -> Annotations:
    """Pins, groups and notes of an uploaded graph (the reverse of apply_neuronpedia). A clerp without
    NOTE_MARK that is not the export's own text is a label someone edited: it reads back as the note."""
    return _read(d, _names(d, n_heads), _edited)


def _edited(n: dict, clerp: str) -> bool:
    """A component's clerp that is not the export's own text: a label a person edited."""
    return n.get("feature_type") in COMPONENT_TYPES and bool(clerp) and not DEFAULT_CLERP.fullmatch(clerp)


def _read(d: dict, names: dict[str, str], edited) -> Annotations:
    """Pins (qParams.pinnedIds), groups (qParams.supernodes) and notes (after NOTE_MARK in a clerp, or a clerp
    `edited(node, clerp)` says a person wrote) of a graph whose node ids map to mark names by `names`."""
    q = d.get("qParams") if isinstance(d.get("qParams"), dict) else {}
    unknown = [p for p in q.get("pinnedIds") or [] if str(p) not in names]
    if unknown:
        raise DamagedFileError(f"qParams.pinnedIds names {unknown[0]!r}, which is no node of this graph")
    pinned = list(dict.fromkeys(names[str(p)] for p in q.get("pinnedIds") or []))
    groups = []
    for g in q.get("supernodes") or []:
        if not isinstance(g, list) or len(g) < 2 or any(str(x) not in names for x in g[1:]):
            raise DamagedFileError(f"qParams.supernodes entry {g!r} is not [name, node_id, ...] of this graph")
        groups.append([str(g[0]), *dict.fromkeys(names[str(x)] for x in g[1:])])
    notes = {}
    for n in d.get("nodes", []):
        name, clerp = names.get(str(n.get("node_id"))), str(n.get("clerp", ""))
        if name is None:
            continue
        if NOTE_MARK in clerp:
            notes[name] = clerp.split(NOTE_MARK, 1)[1]
        elif edited(n, clerp):
            notes[name] = clerp
    return from_dict({"pinned": pinned, "groups": groups, "notes": notes})


# ------------------------------------------------------------------ any circuit file


def apply(d: dict, a: Annotations, n_heads: int, selected: str | None = None, view: View | None = None) -> dict:
    """A copy of a circuit file of any format carrying `a`, the selected node and how the view was left (none of
    them: the file without marks; workbench and MIB files keep the node and view under FILE_KEY's `selected` and
    `view`, a Neuronpedia graph in its qParams as apply_feature_graph does)."""
    if detect(d) == "neuronpedia":
        return _with_view(apply_neuronpedia(d, a, n_heads, selected), view)
    out = {k: v for k, v in d.items() if k != FILE_KEY}
    shown = (view or View()).changed()
    marks = {**a.as_dict(), "selected": selected, **({"view": shown} if shown else {})}
    return {**out, FILE_KEY: marks} if a or selected or shown else out


def read_view(d: dict) -> View:
    """How the view was left, as a circuit file of any format carries it (apply's `view`); DamagedFileError names
    a bad field; the view's defaults when the file has none."""
    if detect(d) == "neuronpedia":
        return read_feature_view(d)
    marks = d.get(FILE_KEY)
    try:
        return view_from_dict((marks.get("view") if isinstance(marks, dict) else None) or {})
    except BadValueError as e:
        raise DamagedFileError(f"{FILE_KEY}.view: {e}") from None


def read_selected(d: dict, n_heads: int) -> str | None:
    """The selected node a circuit file of any format carries (apply's `selected`), None when it names none."""
    if detect(d) == "neuronpedia":
        q = d.get("qParams") if isinstance(d.get("qParams"), dict) else {}
        return _names(d, n_heads).get(str(q.get("clickedId") or ""))
    marks = d.get(FILE_KEY)
    selected = marks.get("selected") if isinstance(marks, dict) else None
    return selected if isinstance(selected, str) and selected else None


def read(d: dict, n_heads: int) -> Annotations:
    """The marks a circuit file of any format carries (the reverse of apply); DamagedFileError names a bad one."""
    if detect(d) == "neuronpedia":
        return read_neuronpedia(d, n_heads)
    try:
        return from_dict(d.get(FILE_KEY, {}))
    except BadValueError as e:
        raise DamagedFileError(f"{FILE_KEY}: {e}") from None
