import json

import pytest
import torch

from workbench.circuits import Graph, GraphMismatchError, find_circuit
from workbench.circuits.export import from_mib, to_mib, to_neuronpedia, validate_neuronpedia
from workbench.circuits.types import Circuit, CircuitFileError
from tests.circuits.conftest import _model


@pytest.fixture(scope="module")
def circuit(small, ioi):
    return find_circuit(small, ioi[0], budget=0.1, n_samples=1, steps=2, refine_steps=1, min_gap=0.0)


def test_workbench_json_round_trip(circuit, small, tmp_path):
    path = tmp_path / "c.json"
    circuit.save(path)
    d = json.loads(path.read_text())
    assert d["schema"] == "workbench.circuit" and d["schema_version"] == 1
    for key in ("query", "method", "seed", "model_id", "nodes", "edges", "faithfulness", "curve", "positions"):
        assert key in d
    assert {"ndf", "nfs", "gap"} <= set(d["faithfulness"]) and d["method"]["attribution"]["method"] == "eap-ig"
    back = Circuit.load(path, model=small)
    assert back.edges == circuit.edges and torch.equal(back.in_circuit, circuit.in_circuit)
    torch.testing.assert_close(back.scores, circuit.scores)
    torch.testing.assert_close(back.per_position, circuit.per_position)
    assert back.faithfulness["ndf"] == pytest.approx(circuit.ndf)
    assert back.query["prompt"] == circuit.query["prompt"] and back.curve["search_cmd"] == circuit.curve["search_cmd"]


def test_import_refuses_other_versions_schemas_and_models(circuit, tiny_shape, tokenizer, tmp_path):
    path = tmp_path / "c.json"
    circuit.save(path)
    d = json.loads(path.read_text())
    with pytest.raises(CircuitFileError, match="schema version 2 is not supported; this workbench reads version 1"):
        Circuit.load({**d, "schema_version": 2})
    with pytest.raises(CircuitFileError, match="not a workbench circuit file"):
        Circuit.load(to_mib(circuit))
    with pytest.raises(GraphMismatchError, match="shape"):
        Circuit.load(path, model=tiny_shape)
    other = _model(tokenizer, seed=7)  # same shape, other weights
    with pytest.raises(GraphMismatchError, match="not on this model"):
        Circuit.load(path, model=other)
    with pytest.raises(FileNotFoundError):
        Circuit.load(tmp_path / "missing.json")


def test_mib_format_field_names_and_round_trip(circuit, tmp_path):
    d = to_mib(circuit, tmp_path / "mib.json")
    d = json.loads((tmp_path / "mib.json").read_text())
    assert set(d) == {"cfg", "nodes", "edges"}
    assert {"n_layers", "n_heads", "parallel_attn_mlp", "d_model"} <= set(d["cfg"])
    assert set(d["nodes"]["a0.h0"]) == {"in_graph"}
    assert all(set(v) == {"score", "in_graph"} for v in d["edges"].values())
    assert "input->a0.h0<q>" in d["edges"] and "a0.h1->a1.h0<k>" in d["edges"] and "m1->logits" in d["edges"]
    back = from_mib(tmp_path / "mib.json")
    assert back.edges == circuit.edges
    torch.testing.assert_close(back.scores, circuit.scores)


def test_mib_gqa_expands_kv_groups_per_head():
    g = Graph(2, 4, 2, 8)
    c = Circuit(g, torch.tensor([e == "a0.h3->a1.kv1<k>" for e in g.edges]), torch.arange(g.n_edges).float())
    d = to_mib(c)
    assert d["cfg"]["n_key_value_heads"] == 2
    assert d["edges"]["a0.h3->a1.h2<k>"]["in_graph"] and d["edges"]["a0.h3->a1.h3<k>"]["in_graph"]
    assert not d["edges"]["a0.h3->a1.h1<k>"]["in_graph"]
    back = from_mib(d)
    assert back.edges == ["a0.h3->a1.kv1<k>"]
    torch.testing.assert_close(back.scores, c.scores)


def test_neuronpedia_graph_validates(circuit, tmp_path):
    d = to_neuronpedia(circuit, tmp_path / "np.json", slug="test")
    d = json.loads((tmp_path / "np.json").read_text())
    validate_neuronpedia(d)
    assert d["metadata"]["schema_version"] == 1 and d["metadata"]["prompt_tokens"][0] == "<bos>"
    assert set(d["qParams"]) == {"pinnedIds", "supernodes", "linkType", "clickedId", "sg_pos"}
    types = {n["feature_type"] for n in d["nodes"]}
    assert "logit" in types and "embedding" in types
    assert sum(n["is_target_logit"] for n in d["nodes"]) == 1
    infl = sorted(n["influence"] for n in d["nodes"])
    assert infl[-1] == pytest.approx(1.0) and all(0 < x <= 1 for x in infl)
    broken = {**d, "nodes": [{k: v for k, v in n.items() if k != "clerp"} for n in d["nodes"]]}
    with pytest.raises(CircuitFileError, match="lacks 'clerp'"):
        validate_neuronpedia(broken)
