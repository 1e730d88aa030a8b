"""A page with only the graph view, for the view's own browser test and the docs screenshots: GRAPH_CIRCUIT
names a circuit file (workbench or MIB), GRAPH_DIFF (optional) a second one to diff it with, GRAPH_CAP the
display cap, GRAPH_FRACTION / GRAPH_DIFF_FRACTION a budget to draw instead of the saved circuit."""

import os

import streamlit as st

from app import graph_view
from app.figures import circuit as cg
from app.graph_view import layout
from workbench.circuits import schema

st.set_page_config(layout="wide")


def graph(path: str, fraction: str | None) -> layout.Graph:
    cd = cg.from_record(schema.read(schema.load(path)))
    return layout.from_view(cd, cg.choose(cd, float(fraction) if fraction else None, cap))


cap = int(os.environ.get("GRAPH_CAP", str(cg.MAX_EDGES)))
g = graph(os.environ["GRAPH_CIRCUIT"], os.environ.get("GRAPH_FRACTION"))
if os.environ.get("GRAPH_DIFF"):
    names = (os.environ.get("GRAPH_NAME_A", "base"), os.environ.get("GRAPH_NAME_B", "sparse"))
    g, counts = layout.diff(g, graph(os.environ["GRAPH_DIFF"], os.environ.get("GRAPH_DIFF_FRACTION")), names)
    clicked = graph_view.draw(g, "graph", counts=counts, names=names)
else:
    clicked = graph_view.draw(g, "graph", marks=graph_view.url_annotations())
st.write(f"clicked: {clicked}")
st.write(f"pinned in the URL: {st.query_params.get('pinned', '')}")
