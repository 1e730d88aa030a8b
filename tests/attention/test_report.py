"""The report's counts of open edges and of query rows with none or one open key, against hand counts."""

import pytest
import torch

from workbench.attention import gates as G
from workbench.attention.config import GateConfig
from workbench.attention.report import format_report, measure, summarise

from .conftest import build


def _tokens(model, b=3, n=10):
    return torch.randint(1, model.cfg.d_vocab, (b, n), generator=torch.Generator().manual_seed(0))


def test_an_ungated_model_keeps_every_causal_pair_and_only_its_first_row_has_one_key(small):
    n = 10
    s = summarise(measure(small, _tokens(small, n=n)))
    assert s["open_fraction"] == 1.0 and s["mean_open_keys_per_query"] == pytest.approx((n + 1) / 2)
    assert s["empty_row_fraction"] == 0.0 and s["single_key_row_fraction"] == pytest.approx(1 / n)


@pytest.mark.parametrize("bias, empty", [(-1e4, 1.0), (1e4, 0.0)])
def test_closed_and_open_gates_give_all_or_no_empty_rows(tokenizer, bias, empty):
    model = build(tokenizer, seed=1)
    G.install(model, GateConfig(init_bias=bias))
    s = summarise(measure(model, _tokens(model)))
    assert s["empty_row_fraction"] == empty
    assert s["empty_row_fraction_per_head"] == [[empty] * model.cfg.n_heads] * model.cfg.n_layers


def test_row_counts_match_the_gate_hook(small):
    G.install(small, GateConfig(gate="log_prob", init_bias=2.5))
    with torch.no_grad():
        for g in G.gates(small):
            g.scale.copy_(torch.tensor([1.0, 0.5, 2.0, 0.0]))
    t = _tokens(small)
    _, cache = small.run_with_cache(t)
    keys = torch.stack([cache[f"blocks.{i}.attn.hook_gate"].sum(-1) for i in range(small.cfg.n_layers)])
    s = summarise(measure(small, t))
    assert s["empty_row_fraction"] == pytest.approx(float((keys == 0).double().mean()))
    assert s["single_key_row_fraction"] == pytest.approx(float((keys == 1).double().mean()))
    assert s["mean_open_keys_per_query"] == pytest.approx(float(keys.double().mean()))
    text = format_report(
        {
            **s,
            "ce": {"base": 1.0, "sparse": 1.0, "increase": 0.0},
            "ce_per_task": {"base": {}, "sparse": {}},
            "config": {"gates": {"empty_row": "zero"}},
        }
    )
    assert f"query rows with no open key: {s['empty_row_fraction']:.2%} (empty_row=zero)" in text


@pytest.mark.parametrize(
    "text",
    [
        "{",
        "[]",
        '{"constraint_met": true}',
        '{"ce": {"base": 1.0}, "open_fraction": 0.5, "mean_open_keys_per_query": 1}',
        '{"ce": 3}',
    ],
)
def test_report_of_a_damaged_or_incomplete_file_is_one_line(text, tmp_path, capsys):
    from workbench.cli import main

    (tmp_path / "attention_report.json").write_text(text)
    assert main(["attention", "report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "attention_report.json" in err[0] and "workbench attention train" in err[0], err
