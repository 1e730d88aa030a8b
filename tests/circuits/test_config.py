"""The per-query values of a search (QueryConfig): one default each, one range check, and the API's keywords
read into it."""

import dataclasses

import pytest

from workbench.circuits.config import DEFAULT_BUDGET, DEFAULT_TARGET_NDF, QueryConfig, SearchConfig, TaskConfig
from workbench.errors import BadValueError


def test_defaults_and_what_each_search_aims_at_without_a_target():
    q = QueryConfig()
    assert (q.budget, q.target_ndf, q.wrong, q.n_samples, q.seed, q.member) == (None, None, None, 3, 0, 0)
    assert q.targeted().target_ndf == DEFAULT_TARGET_NDF and q.targeted().budget is None
    assert q.budgeted(1000).budget == DEFAULT_BUDGET and q.budgeted(10).budget == 0.1  # at least one edge
    given = QueryConfig(target_ndf=0.9)
    assert given.targeted() is given and given.budgeted(10) is given


@pytest.mark.parametrize(
    "values, match",
    [
        (dict(budget=0.1, target_ndf=0.8), "either a budget or a target NDF, not both"),
        (dict(target_ndf=1.5), r"target_ndf=1.5 is outside \(0, 1\]"),
        (dict(target_ndf=0), r"target_ndf=0 is outside \(0, 1\]"),
        (dict(budget=2.0), r"budget must be a fraction in \(0, 1\]"),
        (dict(n_samples=-1), "n_samples=-1 must be an integer >= 0"),
        (dict(seed=1.5), "seed=1.5 is not of type int"),
    ],
)
def test_a_bad_value_is_refused_in_one_line(values, match):
    with pytest.raises(BadValueError, match=match):
        QueryConfig(**values)


def test_a_budget_below_one_item_is_refused_against_the_count():
    with pytest.raises(BadValueError, match="below one edge: this model's graph has 10 edges"):
        QueryConfig(budget=0.05).budgeted(10)


def test_take_reads_the_per_query_keywords_and_leaves_the_rest():
    q, rest = QueryConfig.take(None, {"budget": 0.05, "seed": 2, "steps": 3, "wrong": "John"})
    assert q == QueryConfig(budget=0.05, seed=2, wrong="John") and rest == {"steps": 3}
    assert dataclasses.replace(SearchConfig(), **rest).steps == 3
    base = QueryConfig(n_samples=1, member="topk")
    q, rest = QueryConfig.take(base, {"target_ndf": 0.7})
    assert (q.n_samples, q.member, q.target_ndf) == (1, "topk", 0.7) and rest == {}
    with pytest.raises(BadValueError, match="not both"):
        QueryConfig.take(QueryConfig(budget=0.1), {"target_ndf": 0.8})
    assert QueryConfig.from_dict(q.to_dict()) == q


def test_a_task_batch_defaults_to_20_queries_at_three_budgets_and_refuses_an_empty_or_bad_one():
    assert (TaskConfig().n, TaskConfig().budgets) == (20, [0.01, 0.02, 0.05])
    with pytest.raises(BadValueError, match="budgets is empty"):
        TaskConfig(budgets=[])
    with pytest.raises(BadValueError):
        TaskConfig(budgets=[1.5])
    with pytest.raises(BadValueError):
        TaskConfig(n=0)
