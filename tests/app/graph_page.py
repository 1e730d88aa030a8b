"""A page with only the graph view, for the view's own browser test: GRAPH_CIRCUIT names a circuit file,
GRAPH_DIFF (optional) a second one to diff it with, GRAPH_CAP the display cap."""

import os

import streamlit as st

from app import graph_view
from app.figures import circuit as cg
from app.graph_view import layout
from workbench import browse

st.set_page_config(layout="wide")


def graph(path: str, cap: int) -> layout.Graph:
    cd = cg.from_record(browse.open_circuit(path))
    return layout.from_view(cd, cg.choose(cd, None if cap == 0 else 1.0, max(cap, 1) if cap else cg.MAX_EDGES))


cap = int(os.environ.get("GRAPH_CAP", "0"))
g = graph(os.environ["GRAPH_CIRCUIT"], cap)
if os.environ.get("GRAPH_DIFF"):
    g, counts = layout.diff(g, graph(os.environ["GRAPH_DIFF"], cap), ("base", "sparse"))
    clicked = graph_view.draw(g, "graph", counts=counts, names=("base", "sparse"), editable=False)
else:
    clicked = graph_view.draw(g, "graph")
st.write(f"clicked: {clicked}")
st.write(f"pinned in the URL: {st.query_params.get('pinned', '')}")
