"""`workbench circuit graph` and `workbench circuit find --transcoders` end to end on the embedded model with a
transcoder set trained here: what they record and write, and their one-line refusals."""

from __future__ import annotations

import json
import re

import pytest

from workbench.circuits import neuronpedia, schema
from workbench.cli import main

PROMPT = "When Mary and John went to the store , John gave a drink to"
CF = "When Mary and John went to the store , Anna gave a drink to"


def _err(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_circuit_graph_records_a_graph_json(tiny, tiny_set, tmp_path, capsys):
    from circuit_tracer.frontend.graph_models import Model

    ws, out = tmp_path / "ws", tmp_path / "g.json"
    argv = ["circuit", "graph", "--workspace", str(ws), "--transcoders", str(tiny_set), "--prompt", PROMPT]
    assert main([*argv, "--answer", "Mary", "--wrong", "John", "--name", "g", "--out", str(out), "--no-heads"]) == 0
    assert "recorded" in capsys.readouterr().out
    d = json.loads(out.read_text())
    Model(**d)
    assert neuronpedia.read_feature_graph(d).nodes and (ws / "circuits" / "g" / "artifact.json").is_file()
    assert json.loads((ws / "circuits" / "g" / "artifact.json").read_text())["config"]["node_threshold"] == 0.8
    assert main([*argv, "--name", "g"]) == 2
    assert "already holds" in _err(capsys)


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--prompt", ""], "the prompt '' is empty: the model would read its start token alone"),
        (["--prompt", "  "], "the prompt '  ' is empty"),
        (["--answer", "Zorblax"], "outside the model's vocabulary"),
        (["--wrong", "John"], "give --answer too"),
    ],
)
def test_circuit_graph_refuses_bad_values_in_one_line(tiny, tiny_set, tmp_path, capsys, extra, match):
    argv = ["circuit", "graph", "--workspace", str(tmp_path / "ws"), "--transcoders", str(tiny_set)]
    assert main([*argv, "--prompt", PROMPT, *extra]) == 2
    assert re.search(match, _err(capsys))


@pytest.mark.parametrize("command", ["graph", "find"])
def test_a_set_of_another_model_is_refused_in_one_line(tiny_set, tmp_path, capsys, command):
    """The embedded sparse model has the base model's widths, so only the recorded model id tells them apart."""
    argv = ["circuit", command, "--workspace", str(tmp_path / "ws"), "--model", "tiny-sparse"]
    argv += ["--transcoders", str(tiny_set), "--prompt", PROMPT, "--answer", "Mary", "--counterfactual", CF]
    assert main(argv[:-2] if command == "graph" else argv) == 2
    assert re.search(r"was trained on 'workbench-tiny@\w+', not on this model .*belongs to another model", _err(capsys))


@pytest.mark.parametrize("dictionary", ["tiny_set", "tiny_clt"])
def test_circuit_find_with_transcoders_writes_the_circuit_and_its_exports(tiny, dictionary, tmp_path, capsys, request):
    """A per-layer set or a cross-layer transcoder: the circuit, its graph and the Neuronpedia export."""
    from circuit_tracer.frontend.graph_models import Model

    folder = request.getfixturevalue(dictionary)
    ws, out, np_out = tmp_path / "ws", tmp_path / "c.json", tmp_path / "np.json"
    argv = ["circuit", "find", "--workspace", str(ws), "--transcoders", str(folder), "--prompt", PROMPT]
    argv += [
        "--answer",
        "Mary",
        "--counterfactual",
        CF,
        "--name",
        "fc",
        "--out",
        str(out),
        "--neuronpedia",
        str(np_out),
    ]
    assert main([*argv, "--target-ndf", "0.7", "--max-feature-nodes", "200"]) == 0
    assert "feature circuit:" in capsys.readouterr().out
    c = schema.read_feature_circuit(json.loads(out.read_text()))
    assert c["faithfulness"]["ndf"] >= 0.7 and c["method"]["graph"]["max_feature_nodes"] == 200
    exported = json.loads(np_out.read_text())
    Model(**exported)
    assert {"cross layer transcoder", "logit"} <= {n["feature_type"] for n in exported["nodes"]}
    assert any(e["heads"] for e in c["edges"]), "the circuit's edges name their heads"
    folder = ws / "circuits" / "fc"
    assert {p.name for p in folder.iterdir()} >= {"feature_circuit.json", "graph.json", "neuronpedia.json"}


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--ablation", "mean"], "not available with --transcoders"),
        (["--strategy", "topk"], "does not apply to feature circuits"),
        (["--target-ndf", "1.5"], r"outside \(0, 1\]"),
    ],
)
def test_circuit_find_with_transcoders_refuses_in_one_line(tiny, tiny_set, tmp_path, capsys, extra, match):
    argv = ["circuit", "find", "--workspace", str(tmp_path / "ws"), "--transcoders", str(tiny_set), "--prompt", PROMPT]
    assert main([*argv, "--answer", "Mary", "--counterfactual", CF, *extra]) == 2
    assert re.search(match, _err(capsys))


def test_graph_flags_without_transcoders_are_refused(tmp_path, capsys):
    argv = ["circuit", "find", "--workspace", str(tmp_path / "ws"), "--prompt", PROMPT, "--answer", "Mary"]
    assert main([*argv, "--node-threshold", "0.5"]) == 2
    assert "apply only with --transcoders" in _err(capsys)


def test_circuit_find_with_transcoders_summarises_a_task_family(tiny, tiny_set, tmp_path, capsys):
    out = tmp_path / "summary.json"
    argv = ["circuit", "find", "--workspace", str(tmp_path / "ws"), "--transcoders", str(tiny_set), "--task", "ioi"]
    assert main([*argv, "--n", "2", "--samples", "1", "--target-ndf", "0.7", "--out", str(out)]) == 0
    s = json.loads(out.read_text())
    assert s["task"] == "ioi" and s["target_ndf"] == 0.7 and len(s["rows"]) + len(s["skipped"]) == 2
    for r in s["rows"]:
        assert r["ndf"] >= 0.7 and r["nodes"] >= 1 and r["topk_nodes"] >= 1 and 0 <= r["heads_jaccard"] <= 1
    assert "heads Jaccard" in capsys.readouterr().out
    assert main([*argv, "--budget", "0.1"]) == 2
    assert "--budget does not apply to feature circuits" in _err(capsys)
