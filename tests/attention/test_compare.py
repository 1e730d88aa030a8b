"""compare: refusals, token-level attention edges, and the CLI end to end."""

import json

import pytest
import torch

from workbench.attention import gates as G
from workbench.attention.compare import _run_kept, check_same_vocab, renormalises, token_edges
from workbench.attention.config import GateConfig
from workbench.cli import main
from workbench.corpus.vocab import vocabulary
from workbench.errors import BadValueError
from workbench.models import save
from workbench.models.tokenizer import build_tokenizer

from .conftest import build


def test_models_with_different_vocabularies_are_refused(small, capsys, tmp_path):
    other = build(build_tokenizer(vocabulary()[:50]), seed=1)
    with pytest.raises(BadValueError, match=r"different vocabularies .*d_vocab \d+, \d+ tokens; sparse"):
        check_same_vocab(small, other)
    save(other, tmp_path / "other")
    rc = main(
        [
            "attention",
            "compare",
            "--base",
            "tiny",
            "--sparse",
            str(tmp_path / "other"),
            "--task",
            "ioi",
            "--n",
            "1",
            "--quiet",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "different vocabularies" in err[0]


@pytest.mark.parametrize("gate", ["published", "log_prob"])
def test_removing_entries_is_closing_their_gates(small, gate):
    """Removing an entry at token level is what the model's own gate does when it closes it."""
    G.install(small, GateConfig(gate=gate, init_bias=2.0 if gate == "log_prob" else 0.5)).eval()
    assert renormalises(small) == (gate == "log_prob")
    t = small.to_tokens("the count went from 34 to")
    n, L, H = t.shape[1], small.cfg.n_layers, small.cfg.n_heads
    keep = torch.rand(1, L, H, n, n, generator=torch.Generator().manual_seed(0)) < 0.5

    def close(z, hook):
        return z * keep[:, int(hook.name.split(".")[1])].to(z.dtype)

    with torch.no_grad():
        closed = small.run_with_hooks(t, fwd_hooks=[(lambda name: name.endswith("hook_gate"), close)])
        kept = _run_kept(small, t[0], keep, renormalises(small))
        other = _run_kept(small, t[0], keep, not renormalises(small))
    torch.testing.assert_close(kept, closed, atol=1e-4, rtol=1e-4)
    assert (other - closed).abs().max() > 1e-3  # the other rule is a different model


@pytest.mark.parametrize("gate", ["published", "log_prob"])
def test_token_edges_count_only_open_entries_and_keeping_all_is_the_model(small, gate):
    G.install(small, GateConfig(gate=gate, init_bias=2.0 if gate == "log_prob" else 0.5))
    t = small.to_tokens("the count went from 34 to")[0]
    answer, wrong = small.to_single_token("50"), small.to_single_token("20")
    with torch.no_grad():
        logits = small(t[None])[0, -1]
        clean = float(logits[answer] - logits[wrong])
        cf = small(small.to_tokens("the count went from 3 to"))[0, -1]
        empty = float(cf[answer] - cf[wrong])
    _, cache = small.run_with_cache(t[None], names_filter=lambda n: n.endswith("hook_gate"))
    n_open = int(sum(cache[f"blocks.{i}.attn.hook_gate"].sum() for i in range(small.cfg.n_layers)))
    res = token_edges(small, t, answer, wrong, clean, empty, targets=(0.8, 0.9))
    n = len(t)
    assert res["causal_entries"] == small.cfg.n_layers * small.cfg.n_heads * n * (n + 1) // 2
    assert res["candidates"] == n_open < res["causal_entries"]
    assert res["ndf_all_kept"] == pytest.approx(1.0, abs=1e-4)
    for t_ in ("0.8", "0.9"):
        assert res[t_]["entries"] is not None and 0 <= res[t_]["entries"] <= n_open and res[t_]["ndf"] >= float(t_)


def test_cli_compare_end_to_end(tokenizer, tmp_path, capsys):
    base = build(tokenizer, seed=2)  # a random model whose induction query has a logit-difference gap
    save(base, tmp_path / "base")
    G.install(base, GateConfig(gate="log_prob", init_bias=3.0))
    save(base, tmp_path / "sparse")
    out = tmp_path / "compare.json"
    rc = main(
        [
            "attention",
            "compare",
            "--base",
            str(tmp_path / "base"),
            "--sparse",
            str(tmp_path / "sparse"),
            "--task",
            "induction",
            "--n",
            "1",
            "--samples",
            "1",
            "--quiet",
            "--out",
            str(out),
        ]
    )
    text = capsys.readouterr().out
    assert rc == 0 and "attention entries" in text and "component edges" in text
    res = json.loads(out.read_text())
    assert res["n_used"] == 1 and set(res["summary"]) == {"0.8", "0.9"}
    q = res["queries"][0]
    assert q["sparse"]["token"]["candidates"] < q["base"]["token"]["candidates"]
    for side in ("base", "sparse"):
        for t in ("0.8", "0.9"):
            c = q[side]["component"][t]
            assert c["ndf"] >= float(t) and c["edges"] >= 1 and c["heads"] + c["mlps"]
    s = res["summary"]["0.8"]["token_entries"]
    assert s["ratio"] == pytest.approx(s["base"] / s["sparse"])


@pytest.mark.parametrize("split", ["heldout", "train"])
def test_cli_compare_without_sparse_measures_the_base_model_on_the_split(tokenizer, tmp_path, capsys, split):
    """No --sparse: the base model's circuit sizes alone, on the queries of --split (saved in the JSON), each
    query saying what the model answers and whether the task accepts it."""
    from workbench.corpus import tasks

    save(build(tokenizer, seed=2), tmp_path / "base")
    out = tmp_path / "base.json"
    argv = ["attention", "compare", "--base", str(tmp_path / "base"), "--task", "induction", "--n", "2"]
    rc = main([*argv, "--samples", "1", "--split", split, "--quiet", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and f"{split} queries with a gap on test-attention@" in text and "sparse" not in text
    res = json.loads(out.read_text())
    assert res["split"] == split and res["sparse_model"] is None and res["components"] == {"heads": 8, "mlps": 2}
    expected = tasks.queries("induction", 2, tokenizer=tokenizer, split=split)
    assert [q["prompt"] for q in res["queries"]] == [q.prompt for q in expected]
    for q, cq in zip(res["queries"], expected):
        assert set(q) == {"prompt", "answer", "task_answer", "wrong", "counterfactual", "base"}
        side = q["base"]
        assert side["correct"] == (side["top1"] == cq.answer) and side["seconds"] > 0
    summary = res["summary"]["0.9"]
    for level in ("component_edges", "heads", "mlps", "nodes", "token_entries"):
        assert summary[level]["sparse"] is None and summary[level]["ratio"] is None
    used = [q["base"]["component"]["0.9"] for q in res["queries"] if "skipped" not in q["base"]]
    assert used and summary["heads"]["base"] == pytest.approx(sum(len(c["heads"]) for c in used) / len(used))


def test_transcoders_need_a_sparse_model(capsys):
    rc = main(["attention", "compare", "--task", "ioi", "--transcoders", "A", "B", "--quiet"])
    assert rc == 2 and "pass --sparse too" in capsys.readouterr().err


def _base_control_sparse(tokenizer, root, save_control=True):
    """A base, a control (another model of the same vocabulary) saved as the sparse run's control/, and the sparse
    model (the base with gates): the folders `attention train --control finetune` leaves."""
    from workbench.attention.train import CONTROL_DIR

    save(build(tokenizer, seed=2), root / "base")
    sparse = build(tokenizer, seed=2)
    G.install(sparse, GateConfig(gate="log_prob", init_bias=3.0))
    save(sparse, root / "sparse")
    if save_control:
        save(build(tokenizer, seed=4), root / "sparse" / CONTROL_DIR)
    return ["attention", "compare", "--base", str(root / "base"), "--sparse", str(root / "sparse")]


def test_cli_compare_with_the_saved_control_splits_base_minus_sparse(tokenizer, tmp_path, capsys):
    """`--control` alone: the control the sparse run saved, measured beside both on the same queries; the CLI prints
    each model's mean and base - sparse split into training and gates, as the Compare page does."""
    from workbench.attention import claims

    argv = _base_control_sparse(tokenizer, tmp_path)
    out = tmp_path / "compare.json"
    rc = main([*argv, "--control", "--task", "induction", "--n", "2", "--samples", "1", "--quiet", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["control_model"] and res["control_model"] != res["base_model"]
    assert all({"base", "control", "sparse"} <= set(q) for q in res["queries"])
    assert "queries with a gap on all three models" in text and f"control {res['control_model']}" in text
    header = next(line for line in text.splitlines() if "undecided" in line)
    for column in ("base", "control", "sparse", "base - sparse [95%]", "from training: base - control [95%]"):
        assert column in header
    assert "from the gates: control - sparse [95%]" in header
    found = claims.split(res, "component_edges", "0.8")
    line = next(line for line in text.splitlines() if line.split()[:3] == ["0.8", "component", "edges"])
    for label in ("base - sparse", "from training", "from the gates"):  # the page's numbers, printed
        if found[label] is not None:
            assert found[label]["difference"].format("{:.2f}") in line


def test_cli_compare_control_refusals(tokenizer, tmp_path, capsys):
    argv = _base_control_sparse(tokenizer, tmp_path, save_control=False)
    assert main([*argv, "--control", "--task", "ioi", "--n", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{tmp_path / 'sparse'} saved no control" in err[0] and "--control DIR" in err[0]
    assert main(["attention", "compare", "--control", "--task", "ioi", "--quiet"]) == 2
    assert "pass --sparse too" in capsys.readouterr().err
    assert main([*argv, "--control", str(tmp_path / "base"), "--task", "ioi", "--transcoders", "A", "B"]) == 2
    assert "pass 3 sets, BASE_SET CONTROL_SET SPARSE_SET" in capsys.readouterr().err
    assert main([*argv, "--task", "ioi", "--transcoders", "A", "B", "C"]) == 2
    assert "pass 2 sets, BASE_SET SPARSE_SET" in capsys.readouterr().err
