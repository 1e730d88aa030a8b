"""The circuit graph view: a Streamlit v2 custom component (graph.js / graph.css beside this file, plain files
sent inline by Streamlit, no CDN and no build step) drawing what layout.py computes, with its pins, groups and
notes kept in the URL (`pinned=`, `groups=`, `notes=`: workbench.circuits.annotations), and how the view was left
(`links=`, `node_threshold=`, `edge_threshold=`, `collapsed=`: annotations.View).

Why a component and not Plotly: Plotly's Streamlit chart sends only selections back, re-sends the whole figure
on every change and places labels with no collision rule; pins, groups, notes and the pinned subgraph need
state in the browser that changes without a server round trip, and labels need to be placed by zoom level.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import streamlit as st
from streamlit.components.v2 import component

from app.graph_view import layout
from workbench.circuits import annotations as an
from workbench.errors import UserError

HERE = Path(__file__).parent
_VIEW = component(
    "workbench_graph_view", html=None, css=(HERE / "graph.css").read_text(), js=(HERE / "graph.js").read_text()
)


def url_annotations() -> an.Annotations:
    """The pins, groups and notes the URL holds; a malformed parameter raises BadValueError naming it."""
    return an.from_query(st.query_params)


def url_view() -> an.View:
    """How the view was left, as the URL holds it; a malformed parameter is a notice and the view's defaults."""
    try:
        return an.view_from_query(st.query_params)
    except UserError as e:
        st.warning(str(e).replace("[", "\\["))
        return an.View()


def write_url(a: an.Annotations | an.View) -> None:
    """Write the annotations (or the view's settings) into the URL: empty ones (defaults) are removed, so a
    plain link stays plain."""
    for name, value in (an.view_to_query(a) if isinstance(a, an.View) else an.to_query(a)).items():
        if value:
            st.query_params[name] = value
        elif name in st.query_params:
            del st.query_params[name]


MARKS = "_graph_marks"  # session key of marks_box


def marks_box() -> dict:
    """{"marks": the marks the URL holds now, "node": the page's selected node}, one object for the session: a download's deferred data reads it
    when clicked, so a pin made in the view's own rerun (a fragment, below) reaches the file."""
    return st.session_state.setdefault(MARKS, {"marks": an.Annotations(), "node": None, "view": an.View()})


def _changed(key: str, on_marks) -> None:
    """The view's annotations changed in the browser: into the URL before the view runs again, so the view
    gets what it already shows (a later Back restores the previous set); `on_marks` tells the page."""
    state = st.session_state[key]
    raw = state.get("annotations") if hasattr(state, "get") else getattr(state, "annotations", None)
    st.session_state[f"_{key}_seq"] = raw.get("seq", 0) if isinstance(raw, dict) else 0  # echoed: graph.js send
    try:
        a = an.from_dict(raw)
        an.check_link(a)  # a longer link would be refused by the server with a bare HTTP error page
        v = an.view_from_dict(raw.get("view") or {})
    except UserError as e:
        st.session_state[f"_{key}_error"] = str(e)
        return
    write_url(a)
    write_url(v)
    marks_box().update(marks=a, view=v)
    if on_marks is not None:
        on_marks()


def pending_click(key: str) -> str | None:
    """The node clicked in the view `key` since the page last ran (None: none), without taking it: a page reads
    it before its own widgets, so they show the clicked node in the same run."""
    return st.session_state.get(f"_{key}_clicked")


def _clicked(key: str) -> None:
    state = st.session_state[key]
    st.session_state[f"_{key}_clicked"] = state.get("clicked") if hasattr(state, "get") else state.clicked


@st.fragment
def _mount(key: str, graph: bytes, view: dict, nodes: frozenset, on_marks) -> None:
    """The view in a fragment: a pin, group or note reruns only this (the URL and marks_box follow at once),
    which re-sends the graph's cached bytes and the marks, nothing rebuilt; a click reruns the page, whose node
    details follow the clicked node."""
    if st.session_state.get(f"_{key}_clicked") is not None:
        st.rerun(scope="app")
    a, v = (an.Annotations(), an.View()) if view["readonly"] else (url_annotations(), url_view())
    if not view["readonly"]:
        marks_box().update(marks=a, view=v)
    seq = st.session_state.get(f"_{key}_seq", 0)
    head = json.dumps(
        {**view, "annotations": a.as_dict(), "settings": v.as_dict(), "seq": seq}
    )  # from the URL: a fragment rerun reuses the last args
    _VIEW(
        key=key,
        data=b'{"view":' + head.encode() + b',"graph":' + graph + b"}",  # bytes: Streamlit sends them as they are
        default={"annotations": a.as_dict()},
        on_annotations_change=lambda: _changed(key, on_marks),
        on_clicked_change=lambda: _clicked(key),
        height="content",
    )
    err = st.session_state.pop(f"_{key}_error", None)
    if err:
        st.error(err.replace("[", "\\[").replace("<", "\\<"))
    dropped = a.restrict(nodes)[1]
    if dropped:
        st.caption(f"marked but not drawn here (kept in the URL): {', '.join(dropped)}")


def encode(graph: layout.Graph, counts: dict | None, names: tuple[str, str] | None, keep: frozenset) -> tuple:
    """(the view's graph JSON as bytes, its node ids): bounded (layout.bound: the marked nodes first), in the
    compact wire form (layout.wire), with a key that changes with its content (the view redraws on a new key)."""
    g = layout.bound(graph, keep=keep)
    data = {**layout.wire(layout.to_data(g, counts)), "names": list(names) if names else None}
    raw = json.dumps(data, separators=(",", ":"))
    key = hashlib.blake2b(raw.encode(), digest_size=8).hexdigest()
    return raw[:-1].encode() + f',"key":"{key}"}}'.encode(), frozenset(n.id for n in g.nodes)


@st.cache_resource(show_spinner=False, max_entries=16)
def _graph(ident: tuple, _make) -> layout.Graph:
    return _make()


@st.cache_resource(show_spinner=False, max_entries=32)
def _encoded(ident: tuple, keep: frozenset, _graph: layout.Graph, _counts, _names) -> tuple:
    return encode(_graph, _counts, _names, keep)


def payload(graph, ident, counts, names, keep: frozenset) -> tuple:
    """encode(), cached per `ident` when one is given (a page rerun then rebuilds nothing). The marks matter
    only to a graph that `bound` cuts, so only then are they part of the key."""
    if ident is None:
        return encode(graph() if callable(graph) else graph, counts, names, keep)
    g = _graph(ident, graph if callable(graph) else lambda: graph)
    cut = len(g.nodes) > layout.MAX_NODES
    return _encoded(ident, keep & {n.id for n in g.nodes} if cut else frozenset(), g, counts, names)


def draw(
    graph,
    key: str,
    *,
    ident: tuple | None = None,
    counts: dict | None = None,
    names: tuple[str, str] | None = None,
    selected: str | None = None,
    height: int = 560,
    marks: an.Annotations | None = None,
    on_marks=None,
    panel: str = "side",
) -> str | None:
    """Mount the view on `graph` (a layout.Graph, or a function making one) with `marks` (the URL's pins, groups
    and notes; None: a view without marks, such as a diff), bounded to what a browser draws at once
    (layout.bound: the marked nodes first, the cut stated in the view); `ident` (hashable: what the graph is
    drawn from, e.g. a file version and a cap) caches its layout and JSON; `on_marks` is called when the view
    changes the marks; `panel` places the view's details panel: "side" (beside the stage) or "below" (under it, when
    the page shows its own details beside the view). Returns the node clicked since the last page run (None: no
    click)."""
    a = marks or an.Annotations()
    keep = frozenset(a.pinned) | {m for _, *ms in a.groups for m in ms} | set(a.notes) | ({selected} - {None})
    raw, nodes = payload(graph, ident, counts, names, keep)
    view = {"selected": selected, "height": height, "readonly": marks is None, "panel": panel}
    clicked = st.session_state.pop(f"_{key}_clicked", None)
    _mount(key, raw, view, nodes, on_marks)
    return clicked
