"""circuit-tracer / Neuronpedia graph JSON without torch: graphs made by circuit-tracer's own models open, nulls and
absent optional fields included, and every out-of-range index of a node is refused with one line naming it."""

import json

import pytest

from workbench.circuits import neuronpedia
from workbench.errors import DamagedFileError


def _tracer_graph() -> dict:
    """A graph made by circuit-tracer's own models, with every field its schema lets be null or absent so."""
    from circuit_tracer.frontend.graph_models import Metadata, Model, Node, QParams

    nodes = [
        Node.token_node(0, 5),
        Node.token_node(1, 7, influence=None),
        Node.feature_node(0, 1, 3, influence=0.4, activation=None),
        Node.feature_node(1, 1, 2, influence=None, activation=1.5),
        Node.error_node(0, 1),
        Node.logit_node(1, 9, "x", num_layers=2, target_logit=True, token_prob=0.5),
    ]
    links = [
        {"source": nodes[i].node_id, "target": nodes[j].node_id, "weight": 0.5} for i, j in ((0, 2), (2, 3), (3, 5))
    ]
    meta = Metadata(slug="s", scan="m", transcoder_list=[], prompt_tokens=["a", "b"], prompt="a b")
    q = QParams(pinnedIds=[], supernodes=[], linkType="both", clickedId="", sg_pos="")
    d = json.loads(Model(metadata=meta, qParams=q, nodes=nodes, links=links).model_dump_json())
    d["metadata"]["schema_version"] = None  # nullable there too
    for n in d["nodes"][:2]:
        for k in ("clerp", "token_prob", "run_idx", "reverse_ctx_idx", "jsNodeId", "is_target_logit"):
            n.pop(k)  # optional in circuit-tracer's schema: absent is valid
    return d


def test_circuit_tracer_graphs_with_nulls_open(tmp_path):
    from circuit_tracer.frontend.graph_models import Model

    from app.figures import feature_graph
    from app.graph_view import layout
    from workbench import browse

    d = _tracer_graph()
    Model(**d)  # circuit-tracer's own schema accepts it
    assert any(n["activation"] is None for n in d["nodes"]) and d["metadata"]["node_threshold"] is None
    path = tmp_path / "graph.json"
    path.write_text(json.dumps(d))
    fg = browse.open_feature_graph(path)
    assert fg.nodes[0]["clerp"] == "" and fg.nodes[0]["jsNodeId"] == d["nodes"][0]["node_id"]
    drawn = feature_graph.to_graph(fg)
    assert {n.id for n in drawn.nodes} == {n["node_id"] for n in d["nodes"]} and len(drawn.edges) == 3
    assert len(layout.from_neuronpedia(d).nodes) == len(d["nodes"])
    for bad, match in ((("activation", "x"), "field 'activation' is a string"), (("ctx_idx", None), "ctx_idx")):
        broken = json.loads(json.dumps(d))
        broken["nodes"][2][bad[0]] = bad[1]
        with pytest.raises(DamagedFileError, match=match):
            neuronpedia.read_feature_graph(broken)


@pytest.mark.parametrize(
    "node, change, message",
    [
        (2, {"feature": 10**18}, "feature 1000000000000000000 is outside [-1, 2**53)"),
        (2, {"feature": -5}, "feature -5 is outside [-1, 2**53)"),
        (2, {"layer": "99"}, "layer 99 is outside the graph's layers 0..1 (its logits sit at 3)"),
        (4, {"layer": "2"}, "layer 2 is outside the graph's layers 0..1 (its logits sit at 3)"),
        (2, {"layer": "x"}, "layer 'x' is not a layer number"),
        (2, {"layer": "-1"}, "layer '-1' is not a layer number"),
        (2, {"ctx_idx": 7}, "ctx_idx 7 is outside the prompt's 2 positions"),
        (3, {"node_id": "0_2_1"}, "is not named layer_latent_position (1_<latent>_1)"),
    ],
)
def test_a_graph_node_index_out_of_range_is_refused_naming_it(node, change, message):
    """Feature ids, layers and positions of a graph's nodes are bounded where the graph is read: within the graph's
    own layers and prompt, the feature id an integer a browser keeps exact, a feature's node id agreeing with them."""
    d = _tracer_graph()
    neuronpedia.read_feature_graph(d)  # valid as made
    d["nodes"][node].update(change)
    with pytest.raises(DamagedFileError) as e:
        neuronpedia.read_feature_graph(d)
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)
