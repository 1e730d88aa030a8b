import numpy as np
import pytest

from workbench.corpus import load_corpus, synthetic
from workbench.corpus.synthetic import LABEL_NAMES, QUERY_TASKS


def test_sequences_are_deterministic_and_resumable(tokenizer):
    corpus = load_corpus("synthetic", tokenizer, seed=3)
    first = [s.tokens for _, s in zip(range(5), corpus.sequences(64))]
    resumed = [s.tokens for _, s in zip(range(2), corpus.sequences(64, start=3))]
    np.testing.assert_array_equal(first[3], resumed[0])
    np.testing.assert_array_equal(first[4], resumed[1])
    other_seed = next(load_corpus("synthetic:seed=4", tokenizer).sequences(64)).tokens
    assert not np.array_equal(first[0], other_seed)


def test_heldout_split_differs_from_train(tokenizer):
    corpus = load_corpus("synthetic", tokenizer)
    train, held = corpus.sequence(0, 64, "train"), corpus.sequence(0, 64, "heldout")
    assert not np.array_equal(train.tokens, held.tokens)
    assert (held.doc_ids[1:] < 0).all() and (train.doc_ids[1:] >= 0).all()
    with pytest.raises(ValueError, match="valid: 'train', 'heldout'"):
        corpus.sequence(0, 64, "test")


def test_labels_align_with_tokens(tokenizer):
    seq = load_corpus("synthetic", tokenizer).sequence(7, 64)
    assert seq.tokens[0] == tokenizer.bos_token_id and len(seq.tokens) == 64
    words = tokenizer.convert_ids_to_tokens(seq.tokens.tolist())
    roles = [LABEL_NAMES["role"][r] for r in seq.labels["role"]]
    for w, role, ent in zip(words, roles, seq.labels["entity"]):
        if role in synthetic.ROLE_ENTITY_VALUES:
            assert synthetic.ROLE_ENTITY_VALUES[role][ent] == w
        elif role == "special":
            assert w in ("<bos>", "<eos>") and ent == -1


@pytest.mark.parametrize("task", QUERY_TASKS)
def test_queries_have_single_token_answers_and_same_length_counterfactuals(task, tokenizer):
    qs = synthetic.queries(task, 20, seed=1, tokenizer=tokenizer)
    assert qs == synthetic.queries(task, 20, seed=1)
    for q in qs:
        assert q.answer != q.wrong
        for ans in (q.answer, q.wrong):
            assert len(tokenizer(ans, add_special_tokens=False)["input_ids"]) == 1
        assert q.prompt != q.counterfactual
    for p in synthetic.paraphrases(qs[0], 4):
        assert (p.task, p.answer, p.wrong) == (qs[0].task, qs[0].answer, qs[0].wrong)


def test_task_answers_are_right():
    for q in synthetic.queries("addition", 10):
        a, _, b, _ = q.prompt.split()
        assert int(q.answer) == int(a) + int(b)
        assert synthetic._held_out_addition(int(a), int(b))
    for q in synthetic.queries("ioi", 10):
        words = q.prompt.split()
        assert words.count(q.answer) == 1 and words.count(q.wrong) == 2
    for q in synthetic.queries("greater_than", 10):
        assert int(q.answer) > q.params["x"] > int(q.wrong)


def test_unknown_task_lists_valid_ones():
    with pytest.raises(ValueError, match="valid tasks: ioi, induction"):
        synthetic.queries("sorting", 3)


@pytest.mark.parametrize("task", QUERY_TASKS)
def test_resampled_counterfactuals_keep_the_query(task, tokenizer):
    q = synthetic.queries(task, 1, seed=2)[0]
    cfs = synthetic.counterfactuals(q, 3, seed=0)
    assert cfs and q.counterfactual not in cfs and len(set(cfs)) == len(cfs)
    n = len(tokenizer(q.prompt, add_special_tokens=False)["input_ids"])
    assert all(len(tokenizer(cf, add_special_tokens=False)["input_ids"]) == n for cf in cfs)
