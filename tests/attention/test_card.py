"""The shipped sparse-attention models' cards hold for the shipped weights: the report names these weights and
their base, the sparse model's held-out accuracies are what it scores (every query, recomputed), and its open
keys and CE difference on a sample of the verdict split agree with the card's figures over the whole split."""

import math

import pytest

from workbench.cli.options import EMBEDDED_SPARSE

SAMPLE = 32  # verdict sequences re-measured (of the report's n)


@pytest.mark.parametrize("name", EMBEDDED_SPARSE)
def test_embedded_sparse_model_card_figures_hold(name):
    from workbench.attention.card import made_by
    from workbench.attention.config import SparsifyConfig
    from workbench.attention.report import paired_sums, read_report, stack, summarise
    from workbench.attention.verdict import verdict_sequences
    from workbench.corpus import load_corpus
    from workbench.models import EMBEDDED, load, model_id
    from workbench.models.card import task_accuracy

    r = read_report(EMBEDDED[name])
    sparse, _ = load(name, device="cpu")
    base, tok = load(r["base_spec"], device="cpu")
    assert model_id(sparse) == r["model_id"] and model_id(base) == r["base_model"]
    assert made_by((EMBEDDED[name] / "README.md").read_text()).startswith("workbench attention train")
    acc = task_accuracy(sparse.eval(), r["task_accuracy_queries"], r["accuracy_guard"]["query_seed"])
    assert acc == pytest.approx(r["task_accuracy"]["sparse"], abs=1e-9)

    cfg = SparsifyConfig.from_dict(r["config"])
    seqs, first = verdict_sequences(
        load_corpus(r["corpus"], tok, seed=cfg.seed), cfg.eval_sequences, SAMPLE, r["ctx_len"]
    )
    assert first == r["verdict"]["split"]["sequences"][0]  # the sample is the verdict split's first sequences
    _, s, diff = paired_sums(base.eval(), sparse.eval(), stack(seqs)[0], None, "verdict")
    v = r["verdict"]
    sample_se = v["se"] * math.sqrt(v["n"] / SAMPLE)  # the card's per-sequence spread, over the sample's size
    assert abs(diff["difference"] - v["difference"]) < 4 * sample_se
    keys = summarise(s)["mean_open_keys_per_query"]
    assert keys == pytest.approx(r["mean_open_keys_per_query"], rel=0.25)
