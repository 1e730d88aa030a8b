import math

import pytest

from workbench.attention.claims import MEASURES, paired, side_values, undecided


def _side(edges: int, heads: int, entries: int | None) -> dict:
    return {
        "component": {"0.9": {"edges": edges, "heads": [f"a0.h{h}" for h in range(heads)], "mlps": ["m0"]}},
        "token": {"0.9": {"entries": entries}},
    }


def _result(rows) -> dict:
    """A comparison's stored shape (compare.compare_result) with the given per-query sides."""
    return {"sparse_model": "s", "targets": [0.9], "queries": [{"base": b, "sparse": s} for b, s in rows]}


RES = _result(
    [
        (_side(20, 4, 40), _side(10, 2, 10)),
        (_side(22, 4, 40), _side(11, 2, None)),  # the sparse model never reached the target with entries
        (_side(24, 2, 80), _side(12, 2, 20)),
        (_side(30, 3, 9), {"skipped": "no logit-difference gap"}),  # a query the sparse model has no gap on
    ]
)


def test_paired_counts_read_only_the_queries_both_models_have():
    assert side_values(RES, "base", "component_edges", "0.9") == {0: 20.0, 1: 22.0, 2: 24.0}
    p = paired(RES, "component_edges", "0.9")
    assert p["n"] == 3 and p["base"] == pytest.approx(22.0) and p["sparse"] == pytest.approx(11.0)
    assert p["ratio_of_means"] == pytest.approx(2.0) and p["ratio"].mean == pytest.approx(2.0)
    assert p["difference"].mean == pytest.approx(11.0) and p["difference"].n == 3
    assert p["difference"].lo == pytest.approx(11 - 4.302653 / math.sqrt(3), abs=1e-4)  # t(2) 97.5%: 4.3027
    assert undecided(p) == []


def test_a_missing_value_drops_the_query_from_that_measure_and_intervals_that_include_no_effect_are_named():
    entries = paired(RES, MEASURES["attention entries"], "0.9")
    assert entries["n"] == 2 and entries["base"] == pytest.approx(60.0)  # query 1 has no sparse count
    per_edge = paired(RES, MEASURES["attention entries per circuit edge"], "0.9")
    assert per_edge["base"] == pytest.approx((40 / 20 + 80 / 24) / 2)
    assert per_edge["sparse"] == pytest.approx((10 / 10 + 20 / 12) / 2)
    heads = paired(RES, "heads", "0.9")  # 4 vs 2, 4 vs 2, 2 vs 2: three queries too few to exclude no effect
    assert heads["ratio"].n == 3 and undecided(heads) == ["difference includes 0", "ratio includes 1"]
    single = paired(_result([(_side(20, 4, 40), _side(10, 2, 10))]), "component_edges", "0.9")
    assert undecided(single) == ["difference includes 0", "ratio includes 1"]  # one query: no interval
    assert single["ratio"].mean == pytest.approx(2.0) and single["ratio"].format("{:.2f}") == "2.00 (n=1)"
    assert paired(_result([(_side(10, 4, None), _side(5, 2, None))]), "token_entries", "0.9") is None


def test_split_pairs_base_minus_sparse_into_training_and_gates_and_names_each_pairs_flags():
    """With a control: base - sparse, base - control and control - sparse over the same queries, the differences
    adding up per query; split_flags names each split pair's undecided interval, base - sparse's bare."""
    from workbench.attention.claims import split, split_flags

    sides = [
        (_side(20, 4, 40), _side(15, 3, 30), _side(10, 2, 10)),
        (_side(22, 4, 40), _side(16, 3, 20), _side(11, 2, 8)),
    ]
    sides.append((_side(24, 2, 80), _side(17, 2, 50), _side(12, 2, 20)))
    res = {"sparse_model": "s", "control_model": "c", "targets": [0.9]}
    res["queries"] = [{"base": b, "control": c, "sparse": s} for b, c, s in sides]
    found = split(res, "component_edges", "0.9")
    assert list(found) == ["base - sparse", "from training", "from the gates"]
    total, train, gates = (found[k]["difference"].mean for k in found)
    assert train == pytest.approx(6.0) and gates == pytest.approx(5.0) and total == pytest.approx(train + gates)
    flags = split_flags(split(res, "heads", "0.9"))  # 4, 4, 2 vs 3, 3, 2 vs 2, 2, 2: nothing decided
    assert "difference includes 0" in flags and "from training: difference includes 0" in flags
    assert "from the gates: difference includes 0" in flags
    assert list(split(RES, "heads", "0.9")) == ["base - sparse"]  # no control: base - sparse alone
