"""The circuit graph view: a Streamlit v2 custom component (graph.js / graph.css beside this file, plain files
sent inline by Streamlit, no CDN and no build step) drawing what layout.py computes, with its pins, groups and
notes kept in the URL (`pinned=`, `groups=`, `notes=`: workbench.circuits.annotations).

Why a component and not Plotly: Plotly's Streamlit chart sends only selections back, re-sends the whole figure
on every change and places labels with no collision rule; pins, groups, notes and the pinned subgraph need
state in the browser that changes without a server round trip, and labels need to be placed by zoom level.
"""

from __future__ import annotations

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
PARAMS = ("pinned", "groups", "notes")


def url_annotations() -> an.Annotations:
    """The pins, groups and notes the URL holds; a malformed parameter raises BadValueError naming it."""
    return an.from_query(st.query_params)


def write_url(a: an.Annotations) -> None:
    """Write the annotations into the URL: empty ones are removed, so a plain link stays plain."""
    for name, value in an.to_query(a).items():
        if value:
            st.query_params[name] = value
        elif name in st.query_params:
            del st.query_params[name]


def _changed(key: str) -> None:
    """The view's annotations changed in the browser: into the URL before the page runs again, so the page
    hands the view what it already shows (a later Back restores the previous set)."""
    state = st.session_state[key]
    raw = state.get("annotations") if hasattr(state, "get") else getattr(state, "annotations", None)
    try:
        write_url(an.from_dict(raw))
    except UserError as e:
        st.session_state[f"_{key}_error"] = str(e)


def draw(
    graph: layout.Graph,
    key: str,
    *,
    counts: dict | None = None,
    names: tuple[str, str] | None = None,
    selected: str | None = None,
    height: int = 560,
    marks: an.Annotations | None = None,
) -> str | None:
    """Mount the view on `graph` with `marks` (the URL's pins, groups and notes; None: a view without marks,
    such as a diff), bounded to what a browser draws at once (layout.bound: the marked nodes first, the cut
    stated in the view); returns the node clicked in this run (None: no click)."""
    a = marks or an.Annotations()
    graph = layout.bound(graph, keep=frozenset(a.pinned) | {m for _, *ms in a.groups for m in ms})
    data = {
        **layout.to_data(graph, counts),
        "names": list(names) if names else None,
        "annotations": a.as_dict(),
        "selected": selected,
        "height": height,
        "readonly": marks is None,
    }
    res = _VIEW(
        key=key,
        data=data,
        default={"annotations": a.as_dict()},
        on_annotations_change=lambda: _changed(key),
        on_clicked_change=lambda: None,
        height="content",
    )
    err = st.session_state.pop(f"_{key}_error", None)
    if err:
        st.error(err.replace("[", "\\[").replace("<", "\\<"))
    dropped = a.restrict({n.id for n in graph.nodes})[1]
    if dropped:
        st.caption(f"marked but not drawn here (kept in the URL): {', '.join(dropped)}")
    return getattr(res, "clicked", None)
