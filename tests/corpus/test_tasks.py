import random

import pytest

from workbench.corpus import tasks
from workbench.corpus.tasks import QUERY_TASKS
from workbench.errors import BadValueError


@pytest.mark.parametrize("task", QUERY_TASKS)
def test_queries_have_single_token_answers_and_same_length_counterfactuals(task, tokenizer):
    qs = tasks.queries(task, 20, seed=1, tokenizer=tokenizer)
    assert qs == tasks.queries(task, 20, seed=1)
    for q in qs:
        assert q.answer != q.wrong
        for ans in (q.answer, q.wrong):
            assert len(tokenizer(ans, add_special_tokens=False)["input_ids"]) == 1
        assert q.prompt != q.counterfactual
    for p in tasks.paraphrases(qs[0], 4):
        assert (p.task, p.answer, p.wrong) == (qs[0].task, qs[0].answer, qs[0].wrong)


@pytest.mark.parametrize("task", QUERY_TASKS)
def test_splits_are_disjoint_combinations(task):
    """The held-out split is exactly the reserved combinations; the train split never yields one."""
    held, train = tasks.queries(task, 50, split="heldout"), tasks.queries(task, 200, split="train")
    assert all(tasks.is_heldout(q) for q in held) and not any(tasks.is_heldout(q) for q in train)
    assert not {q.prompt for q in held} & {q.prompt for q in train}


def test_held_out_combinations_are_what_the_docstring_says():
    ioi = tasks.queries("ioi", 300, split="heldout")
    assert any(q.params["template"] == len(tasks.IOI_TEMPLATES) - 1 for q in ioi)
    assert not any(
        q.params["template"] == len(tasks.IOI_TEMPLATES) - 1 for q in tasks.queries("ioi", 300, split="train")
    )
    facts = tasks.queries("facts", 100, split="train") + tasks.queries("facts", 100, split="heldout")
    by_fact = {}
    for q in facts:
        by_fact.setdefault((q.params["e"], q.params["attr"]), set()).add((q.params["template"], tasks.is_heldout(q)))
    # every (entity, attribute) has exactly one reserved phrasing
    for seen in by_fact.values():
        assert len({t for t, h in seen if h}) <= 1


def test_task_answers_are_right():
    for q in tasks.queries("addition", 20):
        a, b = q.params["a"], q.params["b"]
        assert " ".join(str(a)) in q.prompt and " ".join(str(b)) in q.prompt
        assert q.answer == str((a + b) // 10) and q.wrong == str((a + q.params["b_cf"]) // 10)
    for q in tasks.queries("ioi", 10):
        words = q.prompt.split()
        assert words.count(q.answer) == 1 and words.count(q.wrong) == 2
    for q in tasks.queries("greater_than", 10):
        assert int(q.answer) > q.params["x"] > int(q.wrong)


def test_greater_than_accepts_any_larger_number_and_retargets_its_paraphrases():
    q = tasks.queries("greater_than", 1)[0]
    x = q.params["x"]
    assert tasks.accepts(q, str(x + 1)) and tasks.accepts(q, "99")
    assert not tasks.accepts(q, str(x)) and not tasks.accepts(q, q.wrong) and not tasks.accepts(q, "the")
    r = tasks.with_answer(q, "99")
    assert (r.answer, r.prompt, r.counterfactual, r.wrong) == ("99", q.prompt, q.counterfactual, q.wrong)
    assert all(p.answer == "99" for p in tasks.paraphrases(r, 3))
    with pytest.raises(BadValueError, match="is not a correct answer"):
        tasks.with_answer(q, str(x))
    ioi = tasks.queries("ioi", 1)[0]
    assert tasks.accepts(ioi, ioi.answer) and not tasks.accepts(ioi, ioi.wrong)


def test_unknown_task_and_split_list_valid_ones():
    with pytest.raises(BadValueError, match="valid tasks: ioi, induction"):
        tasks.queries("sorting", 3)
    with pytest.raises(BadValueError, match="valid: 'train', 'heldout'"):
        tasks.make_query("ioi", random.Random(0), split="test")


@pytest.mark.parametrize("task", QUERY_TASKS)
def test_resampled_counterfactuals_keep_the_query(task, tokenizer):
    q = tasks.queries(task, 1, seed=2)[0]
    cfs = tasks.counterfactuals(q, 3, seed=0)
    assert cfs and q.counterfactual not in cfs and len(set(cfs)) == len(cfs)
    n = len(tokenizer(q.prompt, add_special_tokens=False)["input_ids"])
    assert all(len(tokenizer(cf, add_special_tokens=False)["input_ids"]) == n for cf in cfs)
