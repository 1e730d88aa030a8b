"""The circuit schema without torch: the name grammar, the shape's edges, one record per format, and every
malformed file refused with one line naming the field. old_files/ holds files written before the schema
existed (by commit 37717e0's Circuit.save, export.to_mib and export.to_neuronpedia): they must still load."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from workbench.circuits import schema
from workbench.circuits.component import export
from workbench.circuits.component.graph import Graph
from workbench.circuits.component.types import Circuit
from workbench.circuits.schema import GraphShape
from workbench.errors import DamagedFileError

OLD = Path(__file__).parent / "old_files"


def old(name: str) -> dict:
    return json.loads((OLD / name).read_text())


@pytest.mark.parametrize(
    "shape",
    [
        GraphShape(3, 4, 4, 32),
        GraphShape(3, 4, 2, 32),
        GraphShape(2, 2, 2, 8, parallel_attn_mlp=True),
        GraphShape(2, 3, 3, 8, attn_only=True),
    ],
)
def test_shape_edges_are_the_engine_graph_s(shape):
    g = Graph(**shape.config())
    assert shape.edges == g.edges and shape.n_edges == g.n_edges
    assert torch.equal(g.edge_mask, torch.from_numpy(shape.edge_matrix))
    for e in shape.edges:
        w, r = schema.split_edge(e)
        assert schema.parse_node(w)[0] in ("input", "head", "mlp") and schema.parse_reader(
            r, shape.n_heads, shape.n_kv_heads
        )


def test_reader_grammar():
    assert schema.parse_reader("a3.h2<q>", 4, 4) == [("a3.h2", "q")]
    assert schema.parse_reader("a3.kv1<k>", 4, 2) == [("a3.h2", "k"), ("a3.h3", "k")]
    assert schema.parse_reader("m2", 4, 4) == [("m2", "mlp")] and schema.parse_reader("logits", 4, 4) == [
        ("logits", "logits")
    ]
    assert schema.parse_reader("a1.h0", 4, 4) == [("a1.h0", "in")]  # Neuronpedia links merge q/k/v
    for bad in ("a3.h2<x>", "input", "m2<q>", "a3.kv0<q>", "b1", "a1h2<q>"):
        with pytest.raises(DamagedFileError):
            schema.parse_reader(bad, 4, 2)
    with pytest.raises(DamagedFileError, match="not WRITER->READER"):
        schema.split_edge("a0.h1")


def test_old_files_still_load():
    wb, mib, np_ = old("circuit.json"), old("mib.json"), old("neuronpedia.json")
    rec = schema.read(wb)
    assert rec.fmt == "workbench" and rec.shape == GraphShape(2, 2, 1, 8) and rec.n_graph_edges == 36
    assert rec.n_circuit_edges == 7 and rec.per_position.shape == (4, 36) and rec.query["answer_id"] == 7
    assert rec.curve["search_cpr"] == 0.5 and rec.seed == 3 and rec.model_id == "fixture@1"
    c = Circuit.from_dict(wb)
    assert (
        c.n_edges == 7
        and c.graph == Graph(2, 2, 1, 8)
        and c.edges == [e for e, m in zip(rec.edges, rec.in_circuit) if m]
    )
    m = export.from_mib(mib)
    assert torch.equal(m.in_circuit, c.in_circuit) and torch.allclose(m.scores, c.scores)
    mrec = schema.read(mib)
    assert mrec.fmt == "mib" and len(mrec.edges) > rec.n_graph_edges  # MIB names each KV-group edge per head
    nrec = schema.read(np_, shape=rec.shape)
    assert nrec.fmt == "neuronpedia" and nrec.model_id == "fixture@1" and nrec.n_graph_edges == 36
    nodes = {n for e in nrec.edges for n in schema.split_edge(e)}
    assert nodes == set(c.nodes)


def _wb() -> dict:
    return old("circuit.json")


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda d: d["edges"][3].update(score=float("nan")), r"edges\[3\] \(\S+\)\.score is nan"),
        (lambda d: d["edges"][0].update(score=float("inf")), r"edges\[0\] \(input->a0\.h0<q>\)\.score is inf"),
        (lambda d: d["edges"][1].update(score="1"), r"edges\[1\] \(\S+\)\.score is a string, expected float"),
        (lambda d: d["edges"][2].update(in_circuit=1), r"edges\[2\].in_circuit is an int, expected bool"),
        (lambda d: d["edges"][2].update(name="a0.h0->a9.h0<q>"), r"edges\[2\].name is 'a0.h0->a9.h0<q>'"),
        (lambda d: d["edges"].pop(), "edges holds 35 entries but the graph"),
        (lambda d: d["edges"][5]["per_position"].append(1e400), r"edges\[5\].per_position\[4\] is inf"),
        (lambda d: d.update(edges={}), "edges is an object, expected a list"),
        (lambda d: d["graph"].update(n_kv_heads=3), "n_kv_heads=3 does not divide"),
        (lambda d: d["graph"].update(n_layers=10**9), "larger than this reader's limit"),
        (lambda d: d["query"].update(tokens=[1, "x"]), "query.tokens must be a list"),
        (lambda d: d["curve"].update(edges=[1, 2]), "curve.edges has 2 points"),
    ],
)
def test_damaged_workbench_files_name_the_field(change, match):
    d = _wb()
    change(d)
    with pytest.raises(DamagedFileError, match=match):
        schema.read(d)
    with pytest.raises(DamagedFileError, match=match):
        Circuit.from_dict(d)


@pytest.mark.parametrize(
    "tokens, field", [([1, 10**9], r"query.tokens\[1\]=1000000000"), ([-5], r"query.tokens\[0\]=-5")]
)
def test_token_ids_outside_the_vocabulary(tokens, field):
    d = _wb()
    d["query"]["tokens"] = tokens
    schema.read(d)  # the vocabulary is not known without a model
    with pytest.raises(DamagedFileError, match=field + " is outside the model's vocabulary of 64"):
        schema.read(d, d_vocab=64)
    d = _wb()
    d["query"]["answer_id"] = 64
    with pytest.raises(DamagedFileError, match="query.answer_id=64"):
        schema.read(d, d_vocab=64)


def test_not_measured_statistics_read_as_null():
    d = _wb()
    d["faithfulness"]["ndf_resampled_mean"] = float("nan")  # what the finder writes for zero resamples
    d["curve"]["topk_ndf"][0] = float("nan")
    rec = schema.read(json.loads(json.dumps(d)))
    assert rec.faithfulness["ndf_resampled_mean"] is None and rec.curve["topk_ndf"][0] is None


def test_mib_and_neuronpedia_damage_names_the_field():
    d = old("mib.json")
    with pytest.raises(DamagedFileError, match="edges is a list, expected an object mapping edge names"):
        schema.read({**d, "edges": list(d["edges"])})
    name = next(iter(d["edges"]))
    d["edges"][name]["score"] = float("-inf")
    with pytest.raises(DamagedFileError, match=rf"edges\['{name}'\].score is -inf"):
        schema.read(d)
    d = old("mib.json")
    d["edges"]["a0.h7->logits"] = {"score": 1.0, "in_graph": True}
    with pytest.raises(DamagedFileError, match="names head 7; the model has 2 heads"):
        schema.read(d)
    n = old("neuronpedia.json")
    with pytest.raises(DamagedFileError, match="names no model shape"):
        schema.read(n)
    n["links"][0]["weight"] = math.nan
    with pytest.raises(DamagedFileError, match=r"links\[0\].weight is nan"):
        schema.read(n, shape=GraphShape(2, 2, 1, 8))
    with pytest.raises(DamagedFileError, match="is not this model's"):
        schema.read(old("circuit.json"), shape=GraphShape(2, 2, 2, 8))


def test_limits_nesting_and_foreign_json():
    with pytest.raises(DamagedFileError, match="nests JSON arrays or objects too deeply"):
        schema.loads("[" * 200_000 + "]" * 200_000, "deep.json")
    with pytest.raises(DamagedFileError, match="deep.json is 0.0 MiB; circuit files are limited to 0 MiB"):
        schema.loads("[1]", "deep.json", max_bytes=2)
    with pytest.raises(DamagedFileError, match="not valid JSON"):
        schema.loads("{", "x.json")
    for bad in ([1, 2], {"schema": "other"}, {"cfg": {}, "nodes": {}}, "text"):
        with pytest.raises(DamagedFileError, match="valid formats: workbench JSON"):
            schema.detect(bad)


def test_record_arrays_align_with_the_circuit():
    c = Circuit.from_dict(_wb())
    rec = schema.read(c.to_dict())
    np.testing.assert_array_equal(rec.in_circuit, c.in_circuit.numpy())
    np.testing.assert_allclose(rec.scores, c.scores.numpy())


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
            schema.read_feature_graph(broken)


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
    schema.read_feature_graph(d)  # valid as made
    d["nodes"][node].update(change)
    with pytest.raises(DamagedFileError) as e:
        schema.read_feature_graph(d)
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)
