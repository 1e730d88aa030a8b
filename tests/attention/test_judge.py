"""The whole-goal judgement: the accuracy guard's arithmetic, the untouched split's place, and `attention judge`."""

import json

import pytest

from workbench.attention import train as T
from workbench.attention import verdict as V
from workbench.attention.config import JudgeConfig, SparsifyConfig
from workbench.attention.judge import accuracy_guard
from workbench.cli import main
from workbench.corpus import load_corpus
from workbench.errors import BadValueError, ConfigError

from .test_train import _cfg


def _acc(diffs: dict) -> dict:
    base = {t: 0.9 for t in diffs}
    return {
        "base": base,
        "sparse": {t: 0.9 + d for t, d in diffs.items()},
        "difference": diffs,
        "queries": {t: 200 for t in diffs},
    }


def test_the_guard_fails_only_a_drop_beyond_the_points_and_never_a_gain():
    met = accuracy_guard(_acc({"ioi": 0.0, "addition": 0.855 - 0.875, "facts": 0.07}), 0.02, 0)
    assert met["met"] and met["worst"] == "addition" and met["difference"]["addition"] == -0.02
    failed = accuracy_guard(_acc({"ioi": 0.0, "addition": -0.05, "facts": 0.07}), 0.02, 0)
    assert not failed["met"] and failed["worst"] == "addition" and failed["query_seed"] == 0
    sub = accuracy_guard(_acc({"addition": -0.01, "addition_both_digits": -0.05}), 0.02, 0)  # a sub-row: not gated
    assert sub["met"] and sub["worst"] == "addition" and sub["difference"]["addition_both_digits"] == -0.05
    assert not accuracy_guard(_acc({"addition": -0.025}), 0.02, 1)["met"]
    assert accuracy_guard(_acc({"addition": -0.025}), 0.03, 1)["met"]


def test_equal_query_seeds_are_refused_as_an_in_sample_verdict():
    with pytest.raises(ConfigError, match="selection_query_seed=3 equals verdict_query_seed"):
        JudgeConfig(selection_query_seed=3, verdict_query_seed=3)


def test_the_untouched_split_follows_the_dual_stream_and_shares_no_document(tokenizer):
    corpus = load_corpus("synthetic", tokenizer, seed=0)
    cfg = SparsifyConfig(
        eval_sequences=4, verdict_sequences=6, dual_sequences=5, judge=JudgeConfig(untouched_sequences=7)
    )
    seqs, first = V.untouched_sequences(corpus, cfg, 32)
    dual, dual_first = V.dual_sequences(corpus, cfg, 32)
    verdict, _ = V.verdict_sequences(corpus, 4, 6, 32)
    sel = [s for _, s in zip(range(4), corpus.sequences(32, 0, split="heldout"))]
    assert len(seqs) == 7 and first >= dual_first + 5
    assert not V._docs(seqs) & (V._docs(sel) | V._docs(verdict) | V._docs(dual))
    cfg.judge.untouched_start = dual_first + 2
    with pytest.raises(BadValueError, match=rf"untouched_start={dual_first + 2} lies before the end of the dual"):
        V.untouched_sequences(corpus, cfg, 32)


def test_a_corpus_too_short_is_refused_by_the_judge_and_noted_by_a_report(tmp_path, tokenizer, small):
    from workbench.attention.judge import untouched

    text = tmp_path / "t.txt"
    text.write_text("\n\n".join(f"the cat sat on mat {i} " * 3 for i in range(400)))
    corpus = load_corpus(str(text), tokenizer)
    cfg = SparsifyConfig(eval_sequences=2, verdict_sequences=2, dual_sequences=2)  # untouched: 512 by default
    with pytest.raises(BadValueError, match="fewer than untouched_sequences=512"):
        untouched(small, small, corpus, cfg, 8)
    assert (
        "fewer than untouched_sequences=512" in untouched(small, small, corpus, cfg, 8, required=False)["unavailable"]
    )


def test_judge_measures_records_and_rewrites_the_card(small_dir, tmp_path, capsys):
    from workbench.attention.card import embed

    cfg = _cfg(steps=3, judge=JudgeConfig(untouched_sequences=6))
    report = T.sparsify(small_dir, tmp_path / "run", cfg, report_queries=4)
    u = report["untouched"]
    assert u["n"] == 6 and u["split"]["sequences"][0] >= 12 and report["accuracy_guard"]["query_seed"] == 0
    out = embed(tmp_path / "run", tmp_path / "m", "workbench attention train --steps 3")
    argv = ["attention", "judge", str(out), "--untouched-sequences", "5", "--queries", "3", "--accuracy-drop", "0.5"]
    assert main([*argv, "--out", str(tmp_path / "j.json")]) == 0
    j = json.loads((tmp_path / "j.json").read_text())
    assert j["untouched"]["n"] == 5 and j["judge_config"]["accuracy_drop"] == 0.5
    assert set(j["accuracy_guard"]) == {"selection", "verdict"} and j["accuracy_guard"]["selection"]["query_seed"] == 1
    printed = capsys.readouterr().out
    assert "untouched split (held-out sequences" in printed and "accuracy guard on the verdict queries" in printed
    for _ in range(2):  # recording twice adds the judge command to the card once
        assert main([*argv, "--write"]) == 0
    saved = json.loads((out / "attention_report.json").read_text())
    assert saved["untouched"]["n"] == 5 and saved["config"]["judge"]["untouched_sequences"] == 5
    card = (out / "README.md").read_text()
    assert card.count("workbench attention judge DIR --write") == 1 and "workbench attention train --steps 3" in card
    assert "Untouched split (held-out sequences" in card
    assert main(["attention", "judge", str(out), "--selection-query-seed", "0"]) == 2  # equals the verdict seed
    assert "equals verdict_query_seed" in capsys.readouterr().err


def test_a_memo_measures_the_base_once_and_changes_no_figure(tokenizer):
    import copy

    from workbench.attention import gates as G
    from workbench.attention.config import GateConfig
    from workbench.attention.judge import judge_state

    from .conftest import build

    base = build(tokenizer, seed=1).eval()
    sparse = G.install(copy.deepcopy(base), GateConfig(init_bias=0.5)).eval()
    corpus = load_corpus("synthetic", tokenizer, seed=0)
    cfg = SparsifyConfig(
        eval_sequences=4, verdict_sequences=6, dual_sequences=4, judge=JudgeConfig(untouched_sequences=5)
    )
    memo = {}
    plain = judge_state(base, sparse, corpus, cfg, 24, 3)
    first, again = (judge_state(base, sparse, corpus, cfg, 24, 3, memo) for _ in range(2))
    assert set(memo) == {"verdict", "untouched", ("accuracy", 1), ("accuracy", 0)}
    assert json.dumps(plain, sort_keys=True) == json.dumps(first, sort_keys=True) == json.dumps(again, sort_keys=True)
    assert plain["untouched"]["n"] == 5 and plain["verdict"]["n"] == 6


@pytest.mark.parametrize("reference", ["both", "control"])
def test_a_fair_run_is_judged_against_its_control_and_the_frozen_base_as_its_report_was(small_dir, tmp_path, reference):
    """judge_folder of a `--control finetune` run reproduces the run's own verdict against the saved control (and,
    under reference "both", against the frozen base), and its untouched split; the accuracy guard names the control."""
    from workbench.attention.judge import format_judgement, judge_folder

    untouched = JudgeConfig(untouched_sequences=6)
    cfg = _cfg(steps=3, control="finetune", lr=0.05, control_average=0.5, reference=reference, judge=untouched)
    report = T.sparsify(small_dir, tmp_path / "run", cfg, report_queries=3)
    j = judge_folder(tmp_path / "run", n_queries=3)
    v, r = j["verdict"], report["verdict"]
    assert j["reference"] == "control" and v["n"] == r["n"]
    assert v["difference"] == pytest.approx(r["difference"], abs=1e-9) and v["constraint_met"] == r["constraint_met"]
    assert j["untouched"]["difference"] == pytest.approx(report["untouched"]["difference"], abs=1e-9)
    assert j["accuracy_guard"]["verdict"]["base"] == report["accuracy_guard"]["base"]  # the control's accuracy
    text = format_judgement(j)
    assert "sparse - control: " in text
    if reference == "both":
        assert v["against_base"]["difference"] == pytest.approx(r["against_base"]["difference"], abs=1e-9)
        assert j["untouched"]["against_base"]["n"] == 6 and "sparse - frozen base on the same split: " in text
    else:
        assert "against_base" not in v and "against_base" not in j["untouched"] and "frozen base" not in text
