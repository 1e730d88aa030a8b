import numpy as np
import pytest
import torch

from workbench.circuits.component.api import prepare_all, synthetic_samples
from workbench.circuits.component.search import QuerySearch, SearchConfig


@pytest.fixture(scope="module")
def search(small, ioi):
    q, samples = prepare_all(small, ioi[0], None, None, None, (), (), 2, 0, "logit_diff")
    return QuerySearch(small, q, samples, SearchConfig(steps=3, min_gap=0.0))


def test_samples_come_from_paraphrases_and_resampled_counterfactuals(ioi, search):
    paras, cfs = synthetic_samples(ioi[0], 2, seed=0)
    assert len(paras) == 2 and len(cfs) == 2 and ioi[0].counterfactual not in cfs
    assert all(cf.split()[:3] == ioi[0].prompt.split()[:3] for cf in cfs)
    assert set(search.score_sets) == {"query", "cf1", "cf2", "para1", "para2"}


def test_best_of_n_then_refinement_never_loses(search):
    n = search.graph.n_edges
    k = max(1, int(0.05 * n))
    bon = search.best_of_n(k)
    assert bon.ndf == max(bon.candidates.values()) >= bon.baseline_ndf
    assert len(bon.candidates) == 2 * (len(search.score_sets) + 1)
    found = search.at_budget(0.05)
    assert found.ndf >= bon.ndf - 1e-9 and int(found.mask.sum()) <= k
    exact = search.ev.ndf(search.ev.values(found.mask[None]))[0]  # the reported NDF is the exact one
    assert exact == pytest.approx(found.ndf)


def test_sparsest_reaches_target(search):
    assert search.sparsest(1.0).ndf >= 1.0 - 1e-5  # full-fidelity target: at worst the whole model
    found = search.sparsest(0.5)
    assert found.ndf >= 0.5
    assert search.ev.ndf(search.ev.values(found.mask[None]))[0] >= 0.5


@pytest.mark.parametrize("drops", ["greedy", "ordered"])
def test_both_drop_rules_end_one_minimal_on_edges(search, drops):
    """Component circuits under either drop rule: the target is reached and no single edge drop (pruned as the
    search prunes it) keeps it; "auto" is greedy for component circuits."""
    old = search.cfg
    search.cfg = SearchConfig(**{**old.to_dict(), "drops": drops})
    try:
        found = search.sparsest(0.5)
    finally:
        search.cfg = old
    _, moves = search._moves(found.mask, 0)
    assert found.ndf >= 0.5 and (search.ev.ndf(search.ev.values(moves)) < 0.5).all()
    if drops == "greedy":
        assert torch.equal(found.mask, search.sparsest(0.5).mask)


def test_curve_over_mib_grid(search):
    c = search.curve()
    assert c["edges"][-1] == search.graph.n_edges and len(c["search_f"]) == 10
    assert c["search_f"][-1] == pytest.approx(1.0, abs=1e-4) and c["topk_f"][0] == pytest.approx(0.0, abs=1e-6)
    assert c["search_cmd"] <= c["topk_cmd"] + 1e-9 and c["search_cpr"] >= c["topk_cpr"] - 1e-9
    assert np.all(np.asarray(c["search_ndf"]) >= np.asarray(c["topk_ndf"]) - 1e-9)


def test_mean_ablation_search(small, ioi):
    from workbench.circuits.component.hooks import writer_means
    from workbench.circuits.inputs import prepare

    q = ioi[1]
    qi = prepare(small, q.prompt, q.answer, None, q.wrong)
    means = writer_means(small, [x.prompt for x in ioi])
    s = QuerySearch(small, qi, {}, SearchConfig(ablation="mean", method="eap", min_gap=0.0), means)
    f = s.at_budget(0.1)
    assert 0.0 <= f.ndf <= 1.0 and torch.equal(s.setup.z_abl[:, 3], means)


def _with(search, **fields):
    """search with its config's fields replaced (restore with search.cfg = the returned old config)."""
    old = search.cfg
    search.cfg = SearchConfig(**{**old.to_dict(), **fields})
    return old


def test_a_drop_pool_measures_only_the_least_attributed_drops(search):
    """Each round of exact moves measures at most drop_pool single drops, the kept edges of least attribution:
    the bound that keeps refinement and elimination linear in the circuit on a 30-layer graph."""
    mask = search.best_of_n(max(20, int(0.05 * search.graph.n_edges))).mask
    kept = mask.nonzero().flatten()
    old = _with(search, drop_pool=5)
    try:
        names, _ = search._moves(mask, 0)
        found = search.at_budget(0.05)
    finally:
        search.cfg = old
    dropped = [int(n.split()[1]) for n in names]
    least = kept[torch.argsort(search.absolute["mean"][kept], stable=True)[:5]]
    assert len(kept) > 5 and sorted(dropped) == sorted(least.tolist())
    assert int(found.mask.sum()) <= int(0.05 * search.graph.n_edges)  # the search still ends within budget
    assert len(search._moves(mask, 0)[0]) == len(kept)  # default on a small graph: every kept edge
    assert (search.cfg.drop_pool, search.cfg.grow) == (0, 2.0)  # the defaults resolved, as a circuit saves them


def test_search_defaults_are_exhaustive_below_the_large_graph_size():
    """tiny (479 edges) and small (3,628) keep the search the committed tables were measured with; SmolLM2's
    70,651 edges get the bounded one."""
    from workbench.circuits.config import AUTO_DROP_POOL, LARGE_GRAPH

    cfg = SearchConfig()
    assert (cfg.pool_for(479), cfg.grow_for(479), cfg.pool_for(3628), cfg.grow_for(3628)) == (0, 2.0, 0, 2.0)
    assert (cfg.pool_for(70651), cfg.grow_for(70651)) == (AUTO_DROP_POOL, 1.0) and LARGE_GRAPH < 70651
    assert (SearchConfig(drop_pool=0, grow=2.0).pool_for(70651), SearchConfig(grow=3.0).grow_for(479)) == (0, 3.0)
