"""Verdicts: the paired CE difference and its interval, the rule, and the fresh split's refusals."""

import numpy as np
import pytest
import torch

from workbench.attention import verdict as V
from workbench.attention.config import SparsifyConfig
from workbench.corpus import load_corpus
from workbench.errors import BadValueError


def test_paired_difference_by_hand():
    base = torch.tensor([2.0, 2.5, 3.0, 1.5], dtype=torch.float64)
    sparse = torch.tensor([2.1, 2.5, 3.2, 1.5], dtype=torch.float64)
    d = V.paired_difference(sparse, base)
    diffs = np.array([0.1, 0.0, 0.2, 0.0])
    se = diffs.std(ddof=1) / 2
    assert d["n"] == 4 and d["difference"] == pytest.approx(0.075)
    assert d["se"] == pytest.approx(se) and d["ci95"] == pytest.approx([0.075 - 1.959964 * se, 0.075 + 1.959964 * se])


def _diff(mean, se):
    return {"n": 512, "difference": mean, "se": se, "ci95": [mean - 1.959964 * se, mean + 1.959964 * se]}


def test_the_constraint_is_met_only_if_the_upper_bound_is_within_tolerance_and_the_split_is_large_enough():
    assert V.judge(_diff(0.006, 0.0015), 0.01)["constraint_met"]  # upper 0.0089
    over = V.judge(_diff(0.0092, 0.0014), 0.01)  # the measured case: mean within, upper bound 0.012 over
    assert not over["constraint_met"] and "> tolerance" in over["why"]
    noisy = V.judge(_diff(-0.02, 0.003), 0.01)  # far below, but SE 0.003 >= 0.01 / 5
    assert not noisy["constraint_met"] and "inconclusive" in noisy["why"] and "verdict_sequences" in noisy["why"]
    assert V.feasible(_diff(0.006, 0.0015), 0.01, 0.0) and not V.feasible(_diff(0.006, 0.0025), 0.01, 1.96)


def test_sparsest_within_follows_the_selection_rule_per_tolerance():
    evals = [
        {"step": 1, "open_fraction": 0.5, "difference": _diff(0.001, 0.001)},  # upper 0.003
        {"step": 2, "open_fraction": 0.2, "difference": _diff(0.004, 0.001)},  # upper 0.006
        {"step": 3, "open_fraction": 0.1, "difference": _diff(0.015, 0.002)},  # upper 0.019
    ]
    picks = {t: V.sparsest_within(evals, t, 1.96) for t in (0.002, 0.005, 0.01, 0.02)}
    assert picks[0.002] is None and picks[0.005]["step"] == 1 and picks[0.01]["step"] == 2
    assert picks[0.02]["step"] == 3 and V.sparsest_within(evals, 0.005, 0.0)["step"] == 2  # z = 0: the mean alone


def test_wilson_interval():
    lo, hi = V.wilson(1.0, 200)
    assert hi == pytest.approx(1.0) and 0.98 < lo < 0.99
    lo, hi = V.wilson(0.5, 100)
    assert lo == pytest.approx(0.5 - 0.0971, abs=2e-3) and hi == pytest.approx(0.5 + 0.0971, abs=2e-3)
    assert V.wilson(0.3, 0) == [0.0, 1.0]


def test_verdict_sequences_are_fresh_held_out_text_after_the_selection_split(tokenizer):
    corpus = load_corpus("synthetic", tokenizer, seed=0)
    seqs, first = V.verdict_sequences(corpus, 4, 6, 32)
    assert first == 4 and len(seqs) == 6
    sel = [s for _, s in zip(range(4), corpus.sequences(32, 0, split="heldout"))]
    assert all(np.all(s.doc_ids < 0) for s in seqs)  # synthetic held-out documents
    assert not V._docs(seqs) & V._docs(sel)
    again, first = V.verdict_sequences(corpus, 4, 6, 32, start=10)
    assert first == 10 and np.array_equal(again[0].tokens, next(corpus.sequences(32, 10, split="heldout")).tokens)


def test_a_verdict_split_overlapping_the_selection_split_is_refused(tokenizer):
    corpus = load_corpus("synthetic", tokenizer, seed=0)
    held = [next(corpus.sequences(32, 0, split="heldout"))]
    with pytest.raises(BadValueError, match="shares documents .* with the selection split"):
        V.check_fresh(held, V._docs(held))
    with pytest.raises(BadValueError, match="verdict_start=2 overlaps the selection split"):
        V.verdict_sequences(corpus, 4, 2, 32, start=2)  # an explicit start inside the selection
    with pytest.raises(BadValueError, match=r"verdict_start=10 overlaps the selection split .*0-63"):
        SparsifyConfig(eval_sequences=64, verdict_start=10).resolve()


def test_the_dual_stream_is_a_third_split_and_an_overlapping_one_is_refused(tokenizer):
    corpus = load_corpus("synthetic", tokenizer, seed=0)
    cfg = SparsifyConfig(eval_sequences=4, verdict_sequences=6, dual_sequences=5, dual_stream="heldout")
    seqs, first = V.dual_sequences(corpus, cfg, 32)
    verdict, vfirst = V.verdict_sequences(corpus, 4, 6, 32)
    sel = [s for _, s in zip(range(4), corpus.sequences(32, 0, split="heldout"))]
    assert first >= vfirst + 6 and len(seqs) == 5
    assert not V._docs(seqs) & (V._docs(sel) | V._docs(verdict))
    cfg.dual_start = 30
    again, first = V.dual_sequences(corpus, cfg, 32)
    assert first == 30 and np.array_equal(again[0].tokens, next(corpus.sequences(32, 30, split="heldout")).tokens)
    for start, verdict_start, match in [
        (
            2,
            None,
            r"dual_start=2 \(held-out sequences 2-6\) overlaps the selection split \(0-3\) or the verdict split \(4-9\)",
        ),
        (8, None, r"dual_start=8 .* overlaps .* the verdict split \(4-9\); use dual_start >= 10"),
        (16, 20, r"dual_start=16 \(held-out sequences 16-20\) overlaps .* the verdict split \(20-25\)"),
    ]:
        cfg.dual_start, cfg.verdict_start = start, verdict_start
        with pytest.raises(BadValueError, match=match) as e:
            V.dual_sequences(corpus, cfg, 32)
        assert "\n" not in str(e.value)
    held = [next(corpus.sequences(32, 0, split="heldout"))]
    with pytest.raises(BadValueError, match="dual sequence 0 shares documents .* with the selection or verdict split"):
        V.check_fresh(held, V._docs(held), 0, "dual", "the selection or verdict split")


def test_a_corpus_too_short_for_the_verdict_is_refused(tmp_path, tokenizer):
    text = tmp_path / "t.txt"
    text.write_text("\n\n".join(f"the cat sat on mat {i}" for i in range(30)))
    corpus = load_corpus(str(text), tokenizer)
    with pytest.raises(BadValueError, match="fewer than verdict_sequences=500"):
        V.verdict_sequences(corpus, 1, 500, 4)


def test_a_file_corpus_straddling_document_is_stepped_over(tmp_path, tokenizer):
    text = tmp_path / "t.txt"
    text.write_text("\n\n".join(" ".join(["the cat sat on the mat"] * 3) for _ in range(400)))
    corpus = load_corpus(str(text), tokenizer)
    seqs, first = V.verdict_sequences(corpus, 2, 3, 8)
    sel = [s for _, s in zip(range(2), corpus.sequences(8, 0, split="heldout"))]
    assert first >= 2 and not V._docs(seqs) & V._docs(sel)


def test_the_verdict_never_holds_training_text(tmp_path, tokenizer):
    """Verdict text comes from the held-out split only, so no refusal can trigger: checked against the
    training split's own documents (a file corpus holds out every HELDOUT_EVERY-th document)."""
    from workbench.corpus.sources import HELDOUT_EVERY

    text = tmp_path / "t.txt"
    text.write_text("\n\n".join(f"the cat sat on mat {i} " * 3 for i in range(600)))
    corpus = load_corpus(str(text), tokenizer)
    seqs, _ = V.verdict_sequences(corpus, 2, 3, 8)
    train = V._docs(list(corpus.sequences(8, 0, split="train")))
    assert V._docs(seqs) and not V._docs(seqs) & train
    assert all(d % HELDOUT_EVERY == HELDOUT_EVERY - 1 for d in V._docs(seqs))
    synthetic, _ = V.verdict_sequences(load_corpus("synthetic", tokenizer, seed=0), 4, 6, 32)
    assert all(np.all(s.doc_ids < 0) for s in synthetic)  # synthetic held-out documents have negative ids
