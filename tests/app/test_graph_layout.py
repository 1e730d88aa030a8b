"""The graph view's layout (app/graph_view/layout.py): every edge ends on its reader's port or node, nodes never
overlap, columns run in layer order, position bands stack, filters and diffs are counted."""

from pathlib import Path

import numpy as np
import pytest

from app.figures import circuit as cg
from app.graph_view import layout
from workbench import browse
from workbench.circuits import schema

OLD = Path(__file__).parents[1] / "circuits" / "old_files" / "circuit.json"  # a 7-edge circuit of a 2-layer model


def big(n_layers=12, n_heads=12, seed=0) -> cg.CircuitData:
    """A GPT-2-small-shaped graph with random scores (32k edges): the size the 2,000-edge cap is for."""
    shape = schema.GraphShape(n_layers, n_heads, n_heads, 768)
    scores = np.random.default_rng(seed).standard_normal(shape.n_edges).astype(np.float32)
    rec = schema.CircuitRecord("workbench", shape.edges, scores, np.abs(scores) > 1.5, shape.n_edges, shape)
    return cg.from_record(rec)


def check_geometry(data: dict) -> None:
    nodes = data["nodes"]
    for e in data["edges"]:
        s, t = nodes[e["s"]], nodes[e["t"]]
        x0, y0, x1, y1 = e["p"]
        if data["flow"] == "up":  # leaves its writer's top, ends on its reader's bottom
            assert (x0, y0, x1, y1) == pytest.approx(
                (s["x"], s["y"] - s["h"] / 2, t["x"], t["y"] + t["h"] / 2), abs=0.11
            )
            continue
        assert (x0, y0) == pytest.approx((s["x"] + s["w"] / 2, s["y"]), abs=0.11)  # leaves its writer's right side
        assert x1 == pytest.approx(t["x"] - t["w"] / 2, abs=0.11)  # ends on the reader's left side
        if e["port"]:  # on the q / k / v port: top, middle, bottom third of the head
            assert t["kind"] == "head"
            assert y1 == pytest.approx(t["y"] + ("q", "k", "v").index(e["port"]) * t["h"] / 3 - t["h"] / 3, abs=0.11)
        else:
            assert y1 == pytest.approx(t["y"], abs=0.11)
    boxes = sorted((n["x"] - n["w"] / 2, n["y"] - n["h"] / 2, n["x"] + n["w"] / 2, n["y"] + n["h"] / 2) for n in nodes)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not (a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]), (a, b)
    assert all(0 < n["x"] < data["size"][0] and 0 < n["y"] < data["size"][1] for n in nodes)


def test_small_circuit_edges_end_on_ports():
    cd = cg.from_record(browse.open_circuit(OLD))
    data = layout.to_data(layout.from_view(cd, cg.choose(cd)))
    check_geometry(data)
    assert len(data["edges"]) == sum(1 for _ in cg.choose(cd).rows)
    drawn_ports = {cd.kind[i] for i in cg.choose(cd).rows} & {"q", "k", "v"}
    assert drawn_ports and {e["port"] for e in data["edges"]} - {None} == drawn_ports
    labels = [c["label"] for c in data["columns"]]
    assert labels[0] == "input" and labels[-1] == "logits"
    assert any("outside the saved circuit" in h for h in data["hidden"])


@pytest.mark.parametrize("cap", [300, 2000])
def test_big_circuit_at_the_caps(cap):
    cd = big()
    v = cg.choose(cd, None, cap)
    data = layout.to_data(layout.from_view(cd, v))
    assert len(data["edges"]) == cap
    check_geometry(data)
    assert any(f"weaker than the {cap} strongest" in h for h in data["hidden"])
    order = [label for _, label in layout.component_columns(12)]
    drawn = [c["label"] for c in sorted(data["columns"], key=lambda c: c["x"])]
    assert drawn == [label for label in order if label in drawn] and len(drawn) > 12  # layer order, empty ones left out
    skip = [
        e for e in data["edges"] if data["nodes"][e["s"]]["id"] == "input" and data["nodes"][e["t"]]["id"] == "logits"
    ]
    assert all(e["lift"] == layout.MAX_LIFT for e in skip)  # a long edge arcs over the columns between
    assert min(n["y"] - n["h"] / 2 for n in data["nodes"]) >= 0.75 * max(e["lift"] for e in data["edges"])


def test_positions_make_bands():
    nodes = [
        layout.Node("f1", "feature", (0, 0), "L0", pos=0),
        layout.Node("f2", "feature", (0, 0), "L0", pos=0),
        layout.Node("f3", "feature", (1, 0), "L1", pos=1),
        layout.Node("f4", "feature", (1, 0), "L1", pos=0),
    ]
    g = layout.Graph(nodes, [layout.Edge("f1", "f3", None, 1.0), layout.Edge("f2", "f4", None, -0.5)])
    xy = layout.place(g)
    assert xy["f1"][1] < xy["f2"][1] < xy["f3"][1]  # stacked in band 0, band 1 below
    assert xy["f4"][1] == xy["f1"][1]
    check_geometry(layout.to_data(g))


def test_diff_marks_and_counts():
    cd = big(2, 2)
    a = layout.from_view(cd, cg.choose(cd, 1.0, 20))
    b = layout.from_view(cd, cg.choose(cd, 1.0, 12))
    g, counts = layout.diff(a, b, ("base", "sparse"))
    assert counts["edges_both"] == 12 and counts["edges_a"] == 8 and counts["edges_b"] == 0
    assert counts["nodes_both"] + counts["nodes_a"] + counts["nodes_b"] == len(g.nodes)
    assert all(h.startswith(("base: ", "sparse: ")) for h in g.hidden)
    both = [e for e in g.edges if e.status == "both"]
    assert all(e.weight_b == e.weight for e in both)
    check_geometry(layout.to_data(g, counts))


def test_a_feature_graph_reads_across_positions_and_up_the_layers():
    from bench.app.app_bench import feature_graph

    d = feature_graph(300, n_layers=3, n_pos=4)
    g = layout.from_neuronpedia(d)
    assert len(g.nodes) == 300 and len(g.edges) == len(d["links"]) and g.flow == "up"
    kinds = {n.kind for n in g.nodes}
    assert kinds == {"embedding", "error", "feature", "logit"}
    data = layout.to_data(g)
    assert [c["label"] for c in sorted(data["columns"], key=lambda c: c["x"])] == d["metadata"]["prompt_tokens"]
    assert [r["label"] for r in sorted(data["rows"], key=lambda r: -r["y"])] == [
        "embeddings",
        "L0",
        "L1",
        "L2",
        "logits",
    ]
    check_geometry(data)
    check_geometry(layout.to_data(layout.bound(g, 120)))
    with pytest.raises(schema.DamagedFileError, match="lacks 'ctx_idx'"):
        layout.from_neuronpedia({**d, "nodes": [{k: v for k, v in d["nodes"][0].items() if k != "ctx_idx"}]})


def upward_order(data: dict, d: dict) -> None:
    """x grows with the token position, y falls as the layer rises (embeddings low, logits high), whatever is drawn."""
    rank = {n["node_id"]: (n["ctx_idx"], -1 if n["layer"] == "E" else int(n["layer"])) for n in d["nodes"]}
    nodes = sorted(data["nodes"], key=lambda n: rank[n["id"]])
    for a, b in zip(nodes, nodes[1:]):
        if rank[a["id"]][0] < rank[b["id"]][0]:
            assert a["x"] + a["w"] / 2 < b["x"] - b["w"] / 2  # every node of a position left of the next position's
    by_layer = sorted(data["nodes"], key=lambda n: rank[n["id"]][1])
    for a, b in zip(by_layer, by_layer[1:]):
        if rank[a["id"]][1] < rank[b["id"]][1]:
            assert a["y"] - a["h"] / 2 > b["y"] + b["h"] / 2  # a higher layer's row lies wholly above


def test_a_64_token_feature_graph_is_wide_not_tall():
    from bench.app.app_bench import feature_graph

    d = feature_graph(400, n_layers=4, n_pos=64)
    data = layout.to_data(layout.from_neuronpedia(d))
    upward_order(data, d)
    check_geometry(data)
    width, height = data["size"]
    assert height <= 560  # a row per layer (+ embeddings, logits), crowded cells' lines: within the view's height
    assert width > 8 * height and len(data["columns"]) == 64


def test_bound_keeps_pins_and_the_strongest_and_says_what_it_hides():
    from bench.app.app_bench import feature_graph

    g = layout.from_neuronpedia(feature_graph(5000))
    assert layout.bound(g, 5000, 10**6) is g  # nothing to cut: the same graph, no sentence
    strength = dict.fromkeys((n.id for n in g.nodes), 0.0)
    for e in g.edges:
        strength[e.src] += abs(e.weight)
        strength[e.dst] += abs(e.weight)
    weakest = min(strength, key=strength.get)
    b = layout.bound(g, 400, 300, keep=frozenset({weakest}))
    ids = {n.id for n in b.nodes}
    assert len(ids) == 400 and weakest in ids and len(b.edges) == 300
    assert all(e.src in ids and e.dst in ids for e in b.edges)
    between = [e for e in g.edges if e.src in ids and e.dst in ids]
    assert b.shown.startswith("showing 400 of 5,000 nodes; 4,600 hidden")
    assert f"300 of {len(g.edges):,} edges; {len(g.edges) - 300:,} hidden" in b.shown
    assert f"{len(g.edges) - len(between):,} touch a hidden node" in b.shown
    assert f"{len(between) - 300:,} weaker than the 300 strongest" in b.shown
    cut = max(strength[n.id] for n in g.nodes if n.id not in ids)
    assert cut <= min(strength[n] for n in ids - {weakest})  # the strongest are the ones kept
    drawn = {id(e) for e in b.edges}
    assert min(abs(e.weight) for e in b.edges) >= max(abs(e.weight) for e in between if id(e) not in drawn)
    assert layout.to_data(b)["shown"] == b.shown


def test_a_crowded_cell_wraps_inside_its_layer_row():
    """Twelve features of one layer at one position wrap onto lines of layout.WRAP inside the layer's row (the row
    grows), never overlapping, and the position's column stays WRAP nodes wide."""
    nodes = [layout.Node(f"f{i}", "feature", (1, 0), "L1", pos=3) for i in range(12)]
    nodes += [
        layout.Node("e", "embedding", (-1, 0), "embeddings", pos=3),
        layout.Node("x", "feature", (2, 0), "L2", pos=4),
    ]
    data = layout.to_data(layout.Graph(nodes, [], flow="up"))
    check_geometry(data)
    boxes = {
        n["id"]: (n["x"] - n["w"] / 2, n["y"] - n["h"] / 2, n["x"] + n["w"] / 2, n["y"] + n["h"] / 2)
        for n in data["nodes"]
    }
    cell = [boxes[f"f{i}"] for i in range(12)]
    assert (
        len({round(b[1]) for b in cell}) == -(-12 // layout.WRAP)
        and max(b[2] for b in cell) - min(b[0] for b in cell) < layout.WRAP * 40
    )
    for i, a in enumerate(cell):
        for b in cell[i + 1 :]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]
    assert boxes["x"][3] < min(b[1] for b in cell) and boxes["e"][1] > max(b[3] for b in cell)
