"""What the graph view (app/graph_view) sends the browser: the compact wire form holds every edge of to_data (to
WIRE_DIGITS digits), and the encoded graph is cached per `ident`, so a pin (a change of marks) rebuilds nothing
unless the view's bound cuts the graph, where the marked nodes must stay drawn."""

import json

import pytest

from app import graph_view
from app.figures import circuit as cg
from app.graph_view import layout
from tests.app.test_graph_layout import big


def edges_of(wire: dict) -> list[dict]:
    """The wire's edge columns back into one dict each (as graph.js's edgeRows)."""
    cols = wire["edges"]
    return [
        {**{k: cols[k][j] for k in cols if k != "p"}, "p": cols["p"][4 * j : 4 * j + 4]} for j in range(len(cols["s"]))
    ]


def test_the_wire_form_holds_every_edge_to_its_digits():
    cd = big()
    data = layout.to_data(layout.from_view(cd, cg.choose(cd, None, 2000)))
    wire = json.loads(json.dumps(layout.wire(data)))
    assert len(json.dumps(wire)) < 0.5 * len(json.dumps(data))
    for e, w in zip(data["edges"], edges_of(wire), strict=True):
        assert {k: w[k] for k in ("s", "t", "port", "p", "lift")} == {k: e[k] for k in ("s", "t", "port", "p", "lift")}
        assert w["w"] == pytest.approx(e["w"], rel=10 ** (1 - layout.WIRE_DIGITS))
        assert "wb" not in w and "status" not in w  # diff columns only in a diff
    a, b = layout.from_view(cd, cg.choose(cd, None, 300)), layout.from_view(cd, cg.choose(cd, None, 200))
    g, counts = layout.diff(a, b)
    rows = edges_of(layout.wire(layout.to_data(g, counts)))
    assert [r["status"] for r in rows] == [e.status for e in g.edges]


def test_a_change_of_marks_rebuilds_nothing_unless_the_bound_cuts():
    from bench.app.app_bench import feature_graph

    cd = big()
    v = cg.choose(cd, None, 2000)
    made = []

    def make():
        made.append(1)
        return layout.from_view(cd, v)

    raw, nodes = graph_view.payload(make, ("test", "big"), None, None, frozenset())
    again, _ = graph_view.payload(make, ("test", "big"), None, None, frozenset({"a0.h1"}))
    assert again is raw and made == [1]  # the same bytes: nothing laid out or serialised again
    sent = json.loads(raw)
    assert len(sent["edges"]["s"]) == 2000 and {n["id"] for n in sent["nodes"]} == nodes

    g = layout.from_neuronpedia(feature_graph(1000))  # more nodes than the view draws: the marks choose some
    weak = min(g.nodes, key=lambda n: sum(abs(e.weight) for e in g.edges if n.id in (e.src, e.dst))).id
    plain, drawn = graph_view.payload(g, ("test", "features"), None, None, frozenset())
    pinned, with_pin = graph_view.payload(g, ("test", "features"), None, None, frozenset({weak}))
    assert weak not in drawn and weak in with_pin and pinned != plain
