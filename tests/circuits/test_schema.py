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
