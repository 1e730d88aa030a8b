"""app/figures without Streamlit: the three formats read back (through the schema), the subgraph matches the
engine's top-k and pruning, the display cap and every filter say what they hide, the figures carry what they claim."""

import xml.etree.ElementTree as ET

import numpy as np
import pytest
import torch

from app.figures import attention as patterns
from app.figures import circuit as cg
from workbench.circuits import schema
from workbench.circuits.component import export
from workbench.circuits.component.graph import Graph
from workbench.circuits.component.select import greedy, prune, topk
from workbench.circuits.component.types import Circuit
from workbench.circuits.metrics import MIB_GRID
from workbench.errors import DamagedFileError, UserError

PLAIN = Graph(3, 4, 4, 32)
GROUPED = Graph(3, 4, 2, 32)


def circuit(graph: Graph, seed: int = 0, k: int = 40) -> Circuit:
    """A real Circuit object (the finder's own type and JSON) with random scores; its members grown greedily
    from the logits (so the circuit is connected and not empty)."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(graph.n_edges, generator=g)
    tokens = list(range(1, 7))
    curve = {
        "fractions": list(MIB_GRID),
        "edges": [int(f * graph.n_edges) for f in MIB_GRID],
        "search_ndf": [min(1.0, 2 * f) for f in MIB_GRID],
        "topk_ndf": [min(1.0, f) for f in MIB_GRID],
        "search_cpr_f": list(MIB_GRID),
        "topk_cpr_f": list(MIB_GRID),
        "search_cpr": 0.5,
        "topk_cpr": 0.4,
        "search_cmd": 0.1,
        "topk_cmd": 0.2,
    }
    return Circuit(
        graph,
        greedy(graph, scores.abs(), k),
        scores,
        query={"prompt": "a b c", "tokens": tokens, "str_tokens": list("abcdef"), "answer": "x", "answer_id": 3},
        method={"name": "test"},
        model_id="m@1",
        faithfulness={"ndf": 0.9, "nfs": 0.95, "answer_prob": 0.5},
        curve=curve,
        per_position=torch.randn(len(tokens), graph.n_edges, generator=g),
    )


def read(d: dict, shape=None) -> cg.CircuitData:
    return cg.from_record(schema.read(d, shape=shape))


def graph_edges(cd, rows) -> set[int]:
    return set(cd.orig[rows].tolist())


@pytest.mark.parametrize("graph", [PLAIN, GROUPED])
def test_workbench_and_mib_files_give_the_same_circuit(graph):
    c = circuit(graph)
    a = read(c.to_dict())
    b = read(export.to_mib(c))
    assert a.n_graph_edges == graph.n_edges and a.n_circuit_edges == c.n_edges
    key = lambda cd: sorted(
        (s, d, k, round(float(v), 5)) for s, d, k, v, m in zip(cd.src, cd.dst, cd.kind, cd.score, cd.in_circuit) if m
    )
    assert key(a) == key(b)  # MIB names KV-group edges per head; the workbench file per group
    assert {"q", "k", "v", "mlp", "logits"} == set(a.kind)


@pytest.mark.parametrize("graph", [PLAIN, GROUPED])
def test_pruning_and_top_k_match_the_engine(graph):
    c = circuit(graph, seed=3)
    cd = read(c.to_dict())
    for k in (1, 5, 30, 200):
        engine = set(topk(graph, c.scores.abs(), k).nonzero().flatten().tolist())
        assert graph_edges(cd, cg.topk_rows(cd, k)) == engine
    rng = np.random.default_rng(0)
    for _ in range(5):
        m = torch.from_numpy(rng.random(graph.n_edges) < 0.05)
        mine = cg.prune(cd, m.numpy()[cd.orig])
        assert set(cd.orig[mine].tolist()) == set(prune(graph, m).nonzero().flatten().tolist())


def test_neuronpedia_graph_draws_the_circuit_s_nodes():
    c = circuit(PLAIN)
    cd = read(export.to_neuronpedia(c), PLAIN)
    assert c.n_edges > 0 and set(cd.src) | set(cd.dst) == set(c.nodes)
    assert cd.model_id == "m@1" and cd.query["str_tokens"] == list("abcdef")
    feature_graph = export.to_neuronpedia(c)
    feature_graph["nodes"][1]["feature_type"] = "cross layer transcoder"
    with pytest.raises(DamagedFileError, match="only component graphs"):
        read(feature_graph, PLAIN)


def test_choose_states_what_each_filter_hides():
    c = circuit(PLAIN, k=60)
    cd = read(c.to_dict())
    v = cg.choose(cd, None, max_edges=10)
    assert len(v.rows) == 10 and v.selected_edges == c.n_edges
    strongest = np.sort(np.abs(cd.score[cd.in_circuit]))[::-1][:10]
    np.testing.assert_allclose(np.sort(np.abs(cd.score[v.rows]))[::-1], strongest)
    text = " ".join(v.hidden)
    assert f"{PLAIN.n_edges - c.n_edges} graph edges outside the saved circuit" in text
    assert f"{c.n_edges - 10} selected edge inputs weaker than the 10 strongest" in text
    drawn = {cd.src[i] for i in v.rows} | {cd.dst[i] for i in v.rows}
    assert f"{len(PLAIN.nodes) - len(drawn)} of {len(PLAIN.nodes)} nodes" in text
    f = MIB_GRID[5]
    at = cg.choose(cd, f, max_edges=2000)
    k = int(f * PLAIN.n_edges)
    assert graph_edges(cd, at.rows) == set(topk(PLAIN, c.scores.abs(), k).nonzero().flatten().tolist())
    assert at.point == (f, c.curve["topk_ndf"][5]) and f"top {k} edges" in at.label
    assert cg.fraction_for_target(cd, 0.05) == 0.05 and cg.fraction_for_target(cd, 1.1) is None
    with pytest.raises(UserError, match="display cap"):
        cg.choose(cd, None, max_edges=0)


def test_graph_view_draws_each_row_once_into_its_port():
    """A key/value group's edge reaches every head of the group, each on its own k or v port (app/graph_view)."""
    from app.graph_view import layout

    c = circuit(GROUPED, k=80)
    cd = read(c.to_dict())
    v = cg.choose(cd, None, max_edges=50)
    data = layout.to_data(layout.from_view(cd, v))
    assert len(data["edges"]) == len(v.rows)
    for e, i in zip(data["edges"], v.rows):
        t = data["nodes"][e["t"]]
        assert t["id"] == cd.dst[i] and e["port"] == (cd.kind[i] if cd.kind[i] in ("q", "k", "v") else None)
        if e["port"]:
            assert e["p"][3] == pytest.approx(
                t["y"] + ("q", "k", "v").index(e["port"]) * t["h"] / 3 - t["h"] / 3, abs=0.11
            )


def test_curve_marks_the_drawn_point_and_the_grid_table_lists_both_lines():
    cd = read(circuit(PLAIN).to_dict())
    fig = ET.fromstring(cg.curve_figure(cd, (0.02, 0.5)))
    legend = [t.text for t in fig.iter("{http://www.w3.org/2000/svg}text")]
    assert all(name in legend for name in ["NDF search", "NDF top-k", "NFS search", "NFS top-k"])
    assert fig.get("data-mark") == "2" and any("CPR search 0.500" in (t or "") for t in legend)
    rows = cg.grid_rows(cd)
    assert len(rows) == len(MIB_GRID) and rows[4]["NDF search"] == pytest.approx(0.04)
    assert cg.edges_at_ndf(cd, 0.5) == int(0.5 * PLAIN.n_edges)  # search NDF 2f: first reaches 0.5 at f = 0.5
    assert cg.edges_at_ndf(cd, 0.6, "topk_ndf") == PLAIN.n_edges and cg.edges_at_ndf(cd, 1.5) is None


def test_attention_heatmap_blanks_future_keys_and_labels_positions():
    a = np.tril(np.full((3, 3), 0.5))
    fig = patterns.attention_heatmap(a, ["x", "x", "y"], "t")
    z = np.array(fig.data[0].z, dtype=float)
    assert np.isnan(z[0, 1]) and z[1, 0] == 0.5 and list(fig.data[0].x) == ["0:x", "1:x", "2:y"]
    fig = patterns.open_fraction_heatmap([[0.1, 0.2]], [0.15], [[1.0, 2.0]])
    assert fig.data[0].y == ("layer 0 (15.0%)",) and "2.00 keys" in fig.data[0].text[0][1]
