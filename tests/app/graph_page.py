"""A page with only the graph view, for the view's own browser tests, the docs screenshots and bench/app/app_bench.py:
GRAPH_CIRCUIT names a circuit file (workbench or MIB) or a circuit-tracer / Neuronpedia feature graph JSON,
GRAPH_DIFF (optional) a second circuit to diff it with, GRAPH_CAP the display cap, GRAPH_FRACTION /
GRAPH_DIFF_FRACTION a budget to draw instead of the saved circuit. A graph JSON uploaded on the page replaces
GRAPH_CIRCUIT (the view bounds what it draws, saying what it hides)."""

import os

import streamlit as st

from app import graph_view
from app.figures import circuit as cg
from app.graph_view import layout
from workbench.circuits import schema
from workbench.errors import UserError

st.set_page_config(layout="wide")


@st.cache_data(show_spinner=False)
def circuit(path: str) -> cg.CircuitData:
    """Read once, as the app's pages do (app.state.circuit): a rerun measures the view, not the file parser."""
    return cg.from_record(schema.read(schema.load(path)))


@st.cache_data(show_spinner=False)
def feature_graph(raw: bytes, name: str) -> layout.Graph:
    return layout.from_neuronpedia(schema.loads(raw, name), title=name)


def graph(path: str, fraction: str | None) -> layout.Graph:
    if path.endswith(".graph.json"):
        return feature_graph(open(path, "rb").read(), os.path.basename(path))
    cd = circuit(path)
    return layout.from_view(cd, cg.choose(cd, float(fraction) if fraction else None, cap))


cap = int(os.environ.get("GRAPH_CAP", str(cg.MAX_EDGES)))
up = st.file_uploader("graph JSON (circuit-tracer / Neuronpedia)", type=["json"])
try:
    g = (
        feature_graph(up.getvalue(), up.name)
        if up
        else graph(os.environ["GRAPH_CIRCUIT"], os.environ.get("GRAPH_FRACTION"))
    )
except UserError as e:
    st.error(str(e))
    st.stop()
if os.environ.get("GRAPH_DIFF"):
    names = (os.environ.get("GRAPH_NAME_A", "base"), os.environ.get("GRAPH_NAME_B", "sparse"))
    g, counts = layout.diff(g, graph(os.environ["GRAPH_DIFF"], os.environ.get("GRAPH_DIFF_FRACTION")), names)
    clicked = graph_view.draw(g, "graph", counts=counts, names=names)
else:
    clicked = graph_view.draw(g, "graph", marks=graph_view.url_annotations())
st.write(f"clicked: {clicked}")
