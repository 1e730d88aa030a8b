import json
import re

import pytest
import torch

from tests.circuits.conftest import _model
from workbench.circuits import Graph, find_circuit, neuronpedia
from workbench.circuits.component.export import from_mib, to_mib, to_neuronpedia
from workbench.circuits.component.types import Circuit
from workbench.errors import BadValueError, DamagedFileError


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
    with pytest.raises(DamagedFileError, match="schema version 2 is not supported; this workbench reads version 1"):
        Circuit.load({**d, "schema_version": 2})
    with pytest.raises(DamagedFileError, match="not a workbench circuit file"):
        Circuit.load(to_mib(circuit))
    with pytest.raises(BadValueError, match="shape"):
        Circuit.load(path, model=tiny_shape)
    other = _model(tokenizer, seed=7)  # same shape, other weights
    with pytest.raises(BadValueError, match="not on this model"):
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


def test_neuronpedia_graph_loads_with_circuit_tracer(circuit, tmp_path):
    """circuit-tracer's own schema accepts the file, and it follows that tool's node conventions."""
    from circuit_tracer.frontend.graph_models import Model, Node

    to_neuronpedia(circuit, tmp_path / "np.json", slug="test")
    d = json.loads((tmp_path / "np.json").read_text())
    Model(**d)
    neuronpedia.validate(d)
    n_layers, tokens = circuit.graph.n_layers, circuit.query["tokens"]
    assert d["metadata"]["prompt_tokens"][0] == "<bos>" and d["metadata"]["transcoder_list"] == []
    types = {n["feature_type"] for n in d["nodes"]}
    assert types <= {"embedding", "logit", "attention head", "mlp reconstruction error"}
    heads = {n["feature_type"] for n in d["nodes"] if n["clerp"].startswith("a")}  # heads export as what they are
    assert heads == {"attention head"} and all(
        n["clerp"].startswith("m") for n in d["nodes"] if n["feature_type"] == "mlp reconstruction error"
    )
    [logit] = [n for n in d["nodes"] if n["feature_type"] == "logit"]
    p = circuit.faithfulness["answer_prob"]
    ref = Node.logit_node(
        len(tokens) - 1, circuit.query["answer_id"], circuit.query["answer"], n_layers, target_logit=True, token_prob=p
    )
    for k in ("node_id", "feature", "layer", "ctx_idx", "jsNodeId", "is_target_logit", "clerp"):
        assert logit[k] == getattr(ref, k), k
    # the frontend reads the probability back out of the clerp (util-cg.js: clerp.split('(p=')[1])
    assert float(logit["clerp"].split("(p=")[1].split(")")[0]) == pytest.approx(p, abs=1e-3)
    for n in d["nodes"]:
        if n["feature_type"] == "embedding":
            ref = Node.token_node(n["ctx_idx"], tokens[n["ctx_idx"]])
            assert (n["node_id"], n["feature"], n["jsNodeId"]) == (ref.node_id, ref.feature, ref.jsNodeId)
    ctx = {n["node_id"]: n["ctx_idx"] for n in d["nodes"]}
    pairs = [(link["source"], link["target"]) for link in d["links"]]
    assert len(pairs) == len(set(pairs)), "one link per pair of nodes"
    assert all(ctx[s] <= ctx[t] for s, t in pairs), "links run forward in position"
    components = [
        n["feature"] for n in d["nodes"] if n["feature_type"] in ("attention head", "mlp reconstruction error")
    ]
    assert len(set(components)) == len(components)
    assert sum(n["is_target_logit"] for n in d["nodes"]) == 1
    infl = sorted(n["influence"] for n in d["nodes"])
    assert infl[-1] == pytest.approx(1.0) and all(0 < x <= 1 for x in infl)
    broken = {**d, "nodes": [{k: v for k, v in n.items() if k != "feature_type"} for n in d["nodes"]]}
    with pytest.raises(DamagedFileError, match="lacks 'feature_type'"):  # required in circuit-tracer's schema
        neuronpedia.validate(broken)
    broken = {**d, "nodes": [{**n, "clerp": None} for n in d["nodes"]]}  # optional there, but never null
    with pytest.raises(DamagedFileError, match="field 'clerp' is null, expected str"):
        neuronpedia.validate(broken)


def test_neuronpedia_merges_qkv_links_and_keeps_positions_causal():
    """Edges into one head's q, k and v are one link (summed); a source placed after its target moves back."""
    g = Graph(2, 2, 2, 8)
    names = ["a0.h0->a1.h1<q>", "a0.h0->a1.h1<k>", "a0.h0->a1.h1<v>", "a1.h1->logits", "input->a0.h0<q>"]
    mask = torch.tensor([e in names for e in g.edges])
    scores = torch.zeros(g.n_edges)
    pp = torch.zeros(4, g.n_edges)
    for name, w in zip(names, (1.0, 2.0, 3.0, 5.0, 4.0)):
        i = g.edge_ids[name]
        scores[i] = w
    pp[3, g.edge_ids["a0.h0->a1.h1<q>"]] = 6.0  # a0.h0's outgoing attribution peaks at the last position ...
    pp[1, g.edge_ids["a1.h1->logits"]] = 5.0  # ... but its reader a1.h1 sits at position 1
    pp[[0, 1, 3], g.edge_ids["input->a0.h0<q>"]] = torch.tensor([1.0, 3.0, 2.0])
    c = Circuit(
        g,
        mask,
        scores,
        {"tokens": [0, 5, 6, 7], "str_tokens": ["<bos>", "a", "b", "c"], "answer": "x", "answer_id": 9},
        per_position=pp,
        faithfulness={"answer_prob": 0.25},
    )
    d = to_neuronpedia(c)
    links = {(link["source"], link["target"]): link["weight"] for link in d["links"]}
    assert links[("0_0_1", "1_1_1")] == pytest.approx(6.0)
    assert ("1_1_1", "3_9_3") in links
    assert {s for s, t in links if t == "0_0_1"} == {"E_0_0", "E_5_1"}  # position 3 lies after a0.h0's position
    neuronpedia.validate(d)


@pytest.mark.parametrize(
    "text, match",
    [
        ("[1, 2]", "holds a JSON list, not a circuit object"),
        (
            '{"schema": "workbench.circuit", "schema_version": 1}',
            "graph is null, expected an object with n_layers",
        ),
        (
            '{"schema": "workbench.circuit", "schema_version": 1, "graph": {"n_heads": 2, "n_layers": "x"}}',
            "graph.n_layers is a string, expected int",
        ),
    ],
)
def test_damaged_circuit_files_are_named(tmp_path, text, match):
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(DamagedFileError, match=match) as e:
        Circuit.load(path)
    assert str(path) in str(e.value)
    with pytest.raises(DamagedFileError, match=str(path)):
        from_mib(path)


def _cli(argv, capsys):
    from workbench.cli import main

    rc = main(argv)
    return rc, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("how", ["same", "relative", "symlink"])
def test_export_refuses_to_write_over_its_input(circuit, tmp_path, capsys, monkeypatch, how):
    path = tmp_path / "c.json"
    circuit.save(path)
    before = path.read_bytes()
    monkeypatch.chdir(tmp_path)
    out = {"same": str(path), "relative": "./sub/../c.json", "symlink": "link.json"}[how]
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.json").symlink_to(path)
    for fmt in ("mib", "neuronpedia"):
        rc, err = _cli(["circuit", "export", str(path), "--format", fmt, "--out", out], capsys)
        assert rc == 2 and len(err) == 1 and "is the input" in err[0] and "--out" in err[0], err
    assert path.read_bytes() == before


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_edge_score_is_refused_by_name_not_exported_as_null(circuit, tmp_path, capsys, bad):
    d = circuit.to_dict()
    d["edges"][3]["score"] = bad
    path = tmp_path / "c.json"
    path.write_text(json.dumps(d))  # json writes NaN / Infinity, which json.loads reads back
    with pytest.raises(DamagedFileError, match=re.escape(f"({d['edges'][3]['name']}).score is {bad}")):
        Circuit.load(path)
    for fmt in ("mib", "neuronpedia"):
        rc, err = _cli(["circuit", "export", str(path), "--format", fmt, "--out", str(tmp_path / "o.json")], capsys)
        assert rc == 2 and len(err) == 1 and d["edges"][3]["name"] in err[0], err
    assert not (tmp_path / "o.json").exists()
    with pytest.raises(DamagedFileError, match="not finite"):
        Circuit(circuit.graph, circuit.in_circuit, torch.full_like(circuit.scores, bad))


def test_mib_files_export_and_import_from_the_cli(circuit, small, tmp_path, capsys):
    from workbench.models import save
    from workbench.provenance import model_id
    from workbench.workspace import Workspace

    mib, model_dir, ws = tmp_path / "eap.mib.json", save(small, tmp_path / "small"), tmp_path / "ws"
    to_mib(circuit, mib)
    rc, err = _cli(["circuit", "export", str(mib), "--format", "workbench", "--out", str(tmp_path / "w.json")], capsys)
    assert rc == 0, err
    back = Circuit.load(tmp_path / "w.json")
    assert torch.equal(back.in_circuit, circuit.in_circuit) and torch.allclose(back.scores, circuit.scores)
    rc, err = _cli(
        ["circuit", "export", str(mib), "--format", "neuronpedia", "--out", str(tmp_path / "g.json")], capsys
    )
    assert rc == 0, err
    neuronpedia.validate(json.loads((tmp_path / "g.json").read_text()))

    rc, err = _cli(["circuit", "import", str(mib), "--model", str(model_dir), "--workspace", str(ws)], capsys)
    assert rc == 0, err
    (art,) = Workspace(ws).artifacts("circuits")
    assert art.name == "eap" and art.manifest["made_by"] == "workbench circuit import"
    saved = Circuit.load(art.path / "circuit.json", small)  # bound to the model it was imported with
    assert saved.model_id == model_id(small) and torch.equal(saved.in_circuit, circuit.in_circuit)
    rc, err = _cli(["circuit", "import", str(mib), "--model", "tiny", "--workspace", str(ws), "--name", "x"], capsys)
    assert rc == 2 and len(err) == 1 and "was made for a model of shape" in err[0], err
    rc, err = _cli(
        ["circuit", "import", str(tmp_path / "g.json"), "--model", str(model_dir), "--workspace", str(ws)], capsys
    )
    assert rc == 0, err  # a graph JSON is recorded as a graph, as the app's upload reads it
    g = Workspace(ws).path("circuits", "g")
    assert json.loads((g / "graph.json").read_text()) == json.loads((tmp_path / "g.json").read_text())
    assert json.loads((g / "artifact.json").read_text())["inputs"]["model"] == model_id(small)
    (tmp_path / "list.json").write_text("[]")
    rc, err = _cli(["circuit", "import", str(tmp_path / "list.json"), "--workspace", str(ws)], capsys)
    assert rc == 2 and len(err) == 1 and "Neuronpedia / circuit-tracer graph JSON" in err[0], err
    rc, err = _cli(["circuit", "import", str(tmp_path / "g.json"), "--workspace", str(ws), "--name", "t"], capsys)
    assert rc == 2 and len(err) == 1 and "layers; pass the --model it was made on" in err[0], err
