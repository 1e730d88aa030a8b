import json
import runpy
import sys
from pathlib import Path

import pytest

from workbench.circuits import evaluate_task, find_circuit, format_summary_table
from workbench.cli import main as cli_main
from workbench.circuits.cli import parse_budget

ROOT = Path(__file__).resolve().parents[2]


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
    assert c.method["attribution"] == {"method": "eap-ig", "steps": 3, "ablation": "counterfactual",
                                       "metric": "logit_diff"}
    assert "NDF" in c.summary()


def test_topk_strategy_and_target_mode(small, ioi):
    q = ioi[1]
    top = find_circuit(small, q.prompt, q.answer, q.counterfactual, wrong=q.wrong, strategy="topk", budget=0.05,
                       steps=2, curve=False, min_gap=0.0)
    assert top.method["name"] == "eap-ig-topk" and top.faithfulness["selected"] == "query/topk"
    tgt = find_circuit(small, q.prompt, q.answer, q.counterfactual, wrong=q.wrong, target_ndf=0.7, steps=2,
                       curve=False, min_gap=0.0, paraphrases=[(ioi[2].prompt, ioi[2].counterfactual)])
    assert tgt.ndf >= 0.7 and tgt.method["target_ndf"] == 0.7


def test_free_text_with_prob_and_kl_metrics(small):
    for metric in ("prob", "kl"):
        c = find_circuit(small, "When Mary and John went to the park , John gave a ball to", "Mary",
                         "When Mary and John went to the park , Mary gave a ball to", metric=metric, budget=0.1,
                         steps=2, curve=False, min_gap=0.0, refine_steps=1)
        assert c.faithfulness["metric"] == metric and 0 <= c.ndf <= 1


def test_evaluate_task_summary_table(small):
    s = evaluate_task(small, "induction", n=2, budgets=(0.02, 0.1), n_samples=1, steps=2, refine_steps=1,
                      min_gap=0.0, progress=False)
    assert s["n_used"] + len(s["skipped"]) == 2
    for key in ("search_ndf@0.02", "topk_ndf@0.1", "search_cpr", "topk_cmd", "seconds"):
        assert key in s["mean"] and key in s["std"]
    table = format_summary_table(s)
    assert table.startswith("| task | n | NDF@2% search / top-k") and "induction" in table


def test_parse_budget():
    assert parse_budget("2%") == pytest.approx(0.02) and parse_budget("0.05") == 0.05
    for bad in ("0%", "150%", "abc", "0"):
        with pytest.raises(Exception, match="budget"):
            parse_budget(bad)


def test_cli_find_writes_all_formats(saved_small, tmp_path, capsys):
    out = tmp_path / "c.json"
    rc = cli_main(["circuit", "find", "--model", saved_small, "--prompt",
                   "When Mary and John went to the park , John gave a ball to", "--answer", "Mary",
                   "--counterfactual", "When Mary and John went to the park , Anna gave a ball to",
                   "--wrong", "John", "--budget", "5%", "--steps", "2", "--out", str(out),
                   "--mib", str(tmp_path / "m.json"), "--neuronpedia", str(tmp_path / "n.json"),
                   "--workspace", str(tmp_path / "ws")])
    assert rc == 0 and json.loads(out.read_text())["schema_version"] == 1
    assert (tmp_path / "m.json").is_file() and (tmp_path / "n.json").is_file()
    assert "NDF" in capsys.readouterr().out
    [recorded] = (tmp_path / "ws" / "circuits").glob("*/artifact.json")
    assert {"circuit.json", "mib.json", "neuronpedia.json"} <= set(json.loads(recorded.read_text())["files"])


def test_cli_bad_input_is_one_clear_line(saved_small, capsys):
    rc = cli_main(["circuit", "find", "--model", saved_small, "--prompt", "John gave a ball to",
                   "--answer", "Mary John", "--counterfactual", "Anna gave a ball to"])
    assert rc == 2 and "splits into 2 tokens ['Mary', 'John']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_main(["circuit", "find", "--model", saved_small, "--prompt", "x", "--answer", "y", "--budget", "0%"])


def test_example_runs(saved_small, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["query_circuit.py", "--model", saved_small, "--out-dir", str(tmp_path),
                                      "--min-gap", "0"])
    runpy.run_path(str(ROOT / "examples" / "query_circuit.py"), run_name="__main__")
    assert {"circuit.json", "circuit_mib.json", "circuit_neuronpedia.json"} <= {p.name for p in tmp_path.iterdir()}
    assert "NDF" in capsys.readouterr().out


def test_report_runs_end_to_end(saved_small, tmp_path, capsys):
    out = tmp_path / "r.md"
    assert cli_main(["circuit", "report", "--model", saved_small, "--n", "1", "--tasks", "induction", "--budgets", "0.02,0.05",
                        "--timing-queries", "1", "--induction-tries", "1", "--out", str(out)]) == 0
    text = out.read_text()
    assert "| induction |" in text and "Search vs plain EAP-IG top-k" in text
