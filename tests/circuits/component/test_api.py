import json
import re
import runpy
import sys
from pathlib import Path

import pytest
import torch

from workbench.circuits import Graph, evaluate_task, find_circuit, format_summary_table
from workbench.cli import main as cli_main
from workbench.cli.circuit import parse_budget

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def saved_small(small, tmp_path_factory):
    from workbench.models import save

    return str(save(small, tmp_path_factory.mktemp("model") / "small"))


def test_find_circuit_one_call(small, ioi):
    c = find_circuit(small, ioi[0], budget=0.05, n_samples=2, steps=3, min_gap=0.0)
    f = c.faithfulness
    assert c.n_edges <= int(0.05 * c.graph.n_edges) and 0 <= c.ndf <= 1
    assert f["ndf"] >= f["baseline_topk_ndf"] - 1e-9
    assert len(f["ndf_candidates"]) == 2 * (1 + 2 + 2 + 1) and len(f["ndf_resampled"]) <= 2
    assert c.curve["fractions"][0] == 0.001 and c.query["answer"] == ioi[0].answer
    assert c.method["attribution"] == {
        "method": "eap-ig",
        "steps": 3,
        "ablation": "counterfactual",
        "metric": "logit_diff",
    }
    assert "NDF" in c.summary()


def test_topk_strategy_and_target_mode(small, ioi):
    q = ioi[1]
    top = find_circuit(
        small,
        q.prompt,
        q.answer,
        q.counterfactual,
        wrong=q.wrong,
        strategy="topk",
        budget=0.05,
        steps=2,
        curve=False,
        min_gap=0.0,
    )
    assert top.method["name"] == "eap-ig-topk" and top.faithfulness["selected"] == "query/topk"
    tgt = find_circuit(
        small,
        q.prompt,
        q.answer,
        q.counterfactual,
        wrong=q.wrong,
        target_ndf=0.7,
        steps=2,
        curve=False,
        min_gap=0.0,
        paraphrases=[(ioi[2].prompt, ioi[2].counterfactual)],
    )
    assert tgt.ndf >= 0.7 and tgt.method["target_ndf"] == 0.7


def test_free_text_with_prob_and_kl_metrics(small):
    for metric in ("prob", "kl"):
        c = find_circuit(
            small,
            "When Mary and John went to the park , John gave a ball to",
            "Mary",
            "When Mary and John went to the park , Mary gave a ball to",
            metric=metric,
            budget=0.1,
            steps=2,
            curve=False,
            min_gap=0.0,
            refine_steps=1,
        )
        assert c.faithfulness["metric"] == metric and 0 <= c.ndf <= 1


def test_evaluate_task_summary_table(small):
    s = evaluate_task(
        small,
        "induction",
        n=2,
        budgets=(0.05, 0.1),
        n_samples=1,
        steps=2,
        refine_steps=1,
        min_gap=0.0,
        progress=False,
        require_prediction=False,
    )  # a random model predicts nothing
    assert s["n_used"] + len(s["skipped"]) == 2
    for key in ("search_ndf@0.05", "topk_ndf@0.1", "search_cpr", "topk_cmd", "seconds"):
        assert key in s["mean"] and key in s["std"]
    table = format_summary_table(s)
    assert table.startswith("| task | n | NDF@5% search / top-k") and "induction" in table


def test_parse_budget():
    assert parse_budget("2%") == pytest.approx(0.02) and parse_budget("0.05") == 0.05
    for bad in ("0%", "150%", "abc", "0"):
        with pytest.raises(Exception, match="budget"):
            parse_budget(bad)


def test_cli_find_writes_all_formats(saved_small, tmp_path, capsys):
    out = tmp_path / "c.json"
    rc = cli_main(
        [
            "circuit",
            "find",
            "--model",
            saved_small,
            "--prompt",
            "When Mary and John went to the park , John gave a ball to",
            "--answer",
            "Mary",
            "--counterfactual",
            "When Mary and John went to the park , Anna gave a ball to",
            "--wrong",
            "John",
            "--budget",
            "5%",
            "--steps",
            "2",
            "--out",
            str(out),
            "--mib",
            str(tmp_path / "m.json"),
            "--neuronpedia",
            str(tmp_path / "n.json"),
            "--workspace",
            str(tmp_path / "ws"),
        ]
    )
    assert rc == 0 and json.loads(out.read_text())["schema_version"] == 1
    assert (tmp_path / "m.json").is_file() and (tmp_path / "n.json").is_file()
    assert "NDF" in capsys.readouterr().out
    [recorded] = (tmp_path / "ws" / "circuits").glob("*/artifact.json")
    assert {"circuit.json", "mib.json", "neuronpedia.json"} <= set(json.loads(recorded.read_text())["files"])


def test_cli_bad_input_is_one_clear_line(saved_small, capsys):
    rc = cli_main(
        [
            "circuit",
            "find",
            "--model",
            saved_small,
            "--prompt",
            "John gave a ball to",
            "--answer",
            "Mary John",
            "--counterfactual",
            "Anna gave a ball to",
        ]
    )
    assert rc == 2 and "splits into 2 tokens ['Mary', 'John']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_main(["circuit", "find", "--model", saved_small, "--prompt", "x", "--answer", "y", "--budget", "0%"])


def test_example_runs(saved_small, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(
        sys, "argv", ["query_circuit.py", "--model", saved_small, "--out-dir", str(tmp_path), "--min-gap", "0"]
    )
    runpy.run_path(str(ROOT / "examples" / "query_circuit.py"), run_name="__main__")
    assert {"circuit.json", "circuit_mib.json", "circuit_neuronpedia.json"} <= {p.name for p in tmp_path.iterdir()}
    assert "NDF" in capsys.readouterr().out


def test_report_runs_end_to_end(saved_small, tmp_path, capsys):
    out = tmp_path / "r.md"
    assert (
        cli_main(
            [
                "circuit",
                "report",
                "--model",
                saved_small,
                "--n",
                "1",
                "--tasks",
                "induction",
                "--budgets",
                "0.05,0.1",
                "--timing-queries",
                "1",
                "--induction-tries",
                "1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    text = out.read_text()
    assert "| induction |" in text and "Search vs plain EAP-IG top-k" in text


def test_every_circuit_records_the_models_own_prediction_and_warns_when_it_is_not_the_answer(small, ioi):
    q = ioi[0]
    with pytest.warns(UserWarning, match=f"does not predict the answer {q.answer!r}"):
        c = find_circuit(small, q, budget=0.1, n_samples=0, steps=2, refine_steps=1, curve=False, min_gap=0.0)
    f = c.faithfulness
    logits = small(small.to_tokens(q.prompt))[0, -1].softmax(-1)
    assert f["top1_id"] == int(logits.argmax()) != c.query["answer_id"] and f["predicts_answer"] is False
    assert f["answer_prob"] == pytest.approx(float(logits[c.query["answer_id"]]), abs=1e-5)
    assert f["top1"] == small.tokenizer.decode([f["top1_id"]])


def test_task_skips_and_lists_queries_the_model_does_not_answer(small):
    s = evaluate_task(
        small, "induction", n=2, budgets=(0.1,), n_samples=0, steps=2, refine_steps=1, min_gap=0.0, progress=False
    )
    assert s["n_used"] + len(s["skipped"]) == 2 and s["require_prediction"] and s["skipped"]  # a random model
    for row in s["skipped"]:
        assert "does not predict the answer" in row["reason"] and row["predicts_answer"] is False


def test_greater_than_circuits_explain_the_larger_number_the_model_gives(tiny):
    """Its drawn answer is one of many correct ones; the query is re-targeted at the model's own top-1."""
    from workbench.circuits.component.api import prediction, retarget
    from workbench.circuits.inputs import prepare
    from workbench.corpus import tasks

    model, tok = tiny
    moved = 0
    for q in tasks.queries("greater_than", 10, tokenizer=tok):
        r = retarget(model, q)
        top1 = prediction(model, prepare(model, r.prompt, r.answer, r.counterfactual, r.wrong))
        assert r.answer == q.answer or (tasks.accepts(q, r.answer) and top1["predicts_answer"])
        moved += r.answer != q.answer
    assert moved  # the drawn larger number is rarely the model's choice
    s = evaluate_task(model, "greater_than", n=2, budgets=(0.1,), n_samples=0, steps=2, refine_steps=1, progress=False)
    assert s["n_used"] >= 1, s["skipped"]


def test_ioi_queries_without_a_wrong_answer_work_on_the_embedded_model(tiny):
    """The default wrong answer (the counterfactual's best token other than the answer) always exists and
    gives a gap, also where the counterfactual's top token is the answer itself."""
    from workbench.circuits.component.api import resolve_wrong
    from workbench.circuits.inputs import prepare
    from workbench.corpus import tasks

    model, tok = tiny
    same = []
    for q in tasks.queries("ioi", 20, tokenizer=tok):
        qi = resolve_wrong(model, prepare(model, q.prompt, q.answer, q.counterfactual), "logit_diff")
        assert qi.wrong != qi.answer
        if int(model(model.to_tokens(q.counterfactual))[0, -1].argmax()) == qi.answer:
            same.append(q)
    assert same, "the embedded model keeps the answer on some IOI counterfactuals"
    q = same[0]
    c = find_circuit(
        model, q.prompt, q.answer, q.counterfactual, budget=0.01, n_samples=0, steps=2, refine_steps=1, curve=False
    )
    assert c.faithfulness["gap"] > 0 and c.query["wrong"] != q.answer


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--task", "ioi", "--mib", "m.json"], "--mib does not apply to --task"),
        (
            ["--task", "ioi", "--neuronpedia", "n.json", "--target-ndf", "0.8"],
            "--target-ndf, --neuronpedia do not apply",
        ),
        (["--task", "ioi", "--prompt", "x"], "--prompt does not apply to --task"),
        (["--task", "nope"], r"unknown task families \['nope'\]; valid: ioi"),
        (["--prompt", "x", "--answer", "y", "--samples", "2"], "--samples generates paraphrases .* --paraphrase"),
        (["--prompt", "x", "--answer", "y", "--n", "5"], "--n applies only to --task"),
        (["--prompt", "x"], "needs --prompt and --answer"),
        (["--prompt", "x", "--answer", "y", "--out", "."], "--out . is an existing folder"),
        (["--prompt", "x", "--answer", "y", "--mib", "blocker/m.json"], "blocker is a file, not a folder"),
        (["--prompt", "x", "--answer", "y", "--target-ndf", "2"], r"target_ndf=2.0 is outside \(0, 1\]"),
    ],
)
def test_cli_refuses_flags_and_outputs_before_loading_the_model(extra, match, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "blocker").write_text("a file")
    assert cli_main(["circuit", "find", "--model", "no-such-model", *extra]) == 2  # the model is never loaded
    err = capsys.readouterr().err
    assert re.search(match, err), err


def test_cli_task_honours_budget(saved_small, tmp_path, capsys):
    out = tmp_path / "s.json"
    assert (
        cli_main(
            [
                "circuit",
                "find",
                "--model",
                saved_small,
                "--task",
                "induction",
                "--n",
                "1",
                "--budget",
                "10%",
                "--samples",
                "0",
                "--steps",
                "2",
                "--all-queries",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    s = json.loads(out.read_text())
    assert s["budgets"] == [0.1] and not s["require_prediction"]


def test_summary_states_the_models_prediction(small, ioi):
    with pytest.warns(UserWarning):
        c = find_circuit(small, ioi[0], budget=0.1, n_samples=0, steps=2, refine_steps=1, curve=False, min_gap=0.0)
    assert "WARNING: the model does not predict the answer" in c.summary() and "top-1" in c.summary()


def test_a_budget_below_any_faithful_circuit_warns_and_points_to_target_ndf(small, ioi):
    one_edge = 1 / Graph.from_model(small).n_edges
    with pytest.warns(UserWarning, match="--target-ndf"):
        c = find_circuit(small, ioi[0], budget=one_edge, n_samples=1, steps=2, refine_steps=1, min_gap=0.0)
    assert c.ndf < 0.5 and any("--target-ndf" in w for w in c.faithfulness["warnings"])
    assert "WARNING" in c.summary() and "--target-ndf" in c.summary()


def test_each_kept_edge_stores_its_measured_effect_beside_its_attribution_estimate(small, ioi, tmp_path):
    from workbench.circuits.component.api import prepare_all
    from workbench.circuits.component.search import QuerySearch
    from workbench.circuits.component.types import Circuit
    from workbench.circuits.config import SearchConfig

    c = find_circuit(small, ioi[0], budget=0.05, n_samples=1, steps=2, refine_steps=1, min_gap=0.0)
    assert set(c.effects) == set(c.edges) and c.edges
    q, _ = prepare_all(small, ioi[0], None, None, None, (), (), 0, 0, "logit_diff")
    ev = QuerySearch(small, q, {}, SearchConfig(steps=2, min_gap=0.0), None).ev
    edge = max(c.effects, key=lambda e: abs(c.effects[e]))
    without = c.in_circuit.clone()
    without[c.graph.edges.index(edge)] = False
    assert c.effects[edge] == pytest.approx(c.ndf - float(ev.ndf(ev.values(without[None]))[0]), abs=1e-5)
    c.save(tmp_path / "c.json")
    d = json.loads((tmp_path / "c.json").read_text())
    assert "attribution estimate" in d["edge_fields"]["score"] and "measured" in d["edge_fields"]["effect"]
    assert {e["name"] for e in d["edges"] if "effect" in e} == set(c.edges)
    assert Circuit.load(tmp_path / "c.json").effects == pytest.approx(c.effects)
    assert 0 < c.faithfulness["attribution_share"] and c.faithfulness["attribution_vanishes"] is False


def test_vanishing_attribution_is_said_in_the_circuit():
    from workbench.circuits.component.api import attribution_note

    assert attribution_note(torch.full((10,), 1e-9), gap=2.0)[0] < 0.01
    share, warning = attribution_note(torch.full((10,), 1e-9), gap=2.0)
    assert "attribution estimates" in warning and "effect" in warning
    assert attribution_note(torch.full((10,), 0.2), gap=2.0) == (pytest.approx(1.0), None)
