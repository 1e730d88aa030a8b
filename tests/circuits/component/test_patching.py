import pytest
import torch

from workbench.circuits.component.graph import Graph
from workbench.circuits.component.hooks import writer_means
from workbench.circuits.component.patching import evaluate, make_setup
from workbench.circuits.inputs import align, prepare


def _last(model, tokens):
    with torch.no_grad():
        return model(tokens[None])[0, -1]


def _check_identities(model, q, ablation="counterfactual", means=None):
    g = Graph.from_model(model)
    setup = make_setup(model, g, q, ablation, means)
    full = torch.ones(1, g.n_edges, dtype=torch.bool)
    out = evaluate(model, setup, torch.cat([full, ~full]))
    torch.testing.assert_close(out[0], _last(model, q.tokens), atol=1e-4, rtol=1e-4)
    return g, setup, out


def test_all_edges_is_clean_and_no_edges_is_counterfactual(tiny_shape, ioi):
    q = ioi[0]
    qi = prepare(tiny_shape, q.prompt, q.answer, q.counterfactual, q.wrong)
    _, _, out = _check_identities(tiny_shape, qi)
    torch.testing.assert_close(out[1], _last(tiny_shape, qi.cf_tokens), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("which", ["gqa", "attn_only", "parallel"])
def test_identities_on_other_configs(which, request):
    model = request.getfixturevalue(which)
    qi = prepare(model, [1, 5, 7, 9, 11, 3], 4, [1, 5, 8, 9, 12, 3], 6)
    assert not model.cfg.ungroup_grouped_query_attention
    _, _, out = _check_identities(model, qi)
    torch.testing.assert_close(out[1], _last(model, qi.cf_tokens), atol=1e-4, rtol=1e-4)


def test_batched_circuits_equal_one_at_a_time(small, ioi):
    q = ioi[1]
    qi = prepare(small, q.prompt, q.answer, q.counterfactual, q.wrong)
    g = Graph.from_model(small)
    setup = make_setup(small, g, qi)
    masks = torch.rand(5, g.n_edges, generator=torch.Generator().manual_seed(0)) < 0.5
    together = evaluate(small, setup, masks)
    alone = torch.cat([evaluate(small, setup, m[None]) for m in masks])
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-5)
    assert not small.cfg.use_split_qkv_input and not small.cfg.use_hook_mlp_in  # flags restored


def test_different_length_counterfactual_empty_circuit_is_counterfactual(small):
    qi = prepare(
        small, "When Mary and John went to the park , John gave a ball to", "Mary", "John gave a ball to", "John"
    )
    _, setup, out = _check_identities(small, qi)
    torch.testing.assert_close(out[1], _last(small, qi.cf_tokens), atol=1e-4, rtol=1e-4)
    assert setup.alignment[0] == 0 and setup.alignment[-1] == len(qi.cf_tokens) - 1
    assert (setup.alignment == -1).sum() == len(qi.tokens) - len(qi.cf_tokens)


def test_alignment_rule():
    assert align(5, 3, anchor_first=True).tolist() == [0, -1, -1, 1, 2]
    assert align(3, 5, anchor_first=True).tolist() == [0, 3, 4]
    assert align(3, 3, anchor_first=False).tolist() == [0, 1, 2]


def test_mean_and_zero_ablation(small, ioi):
    q = ioi[0]
    qi = prepare(small, q.prompt, q.answer, None, q.wrong)
    means = writer_means(small, [x.prompt for x in ioi])
    assert means.shape == (len(Graph.from_model(small).writers), small.cfg.d_model)
    _, setup, out = _check_identities(small, qi, "mean", means)
    assert torch.allclose(setup.z_abl[:, 0], means)
    _check_identities(small, qi, "zero")


def test_means_from_the_activation_cache(small, tokenizer, tmp_path):
    from workbench.cache import harvest
    from workbench.corpus import load_corpus

    cache = harvest(
        small,
        load_corpus("synthetic", tokenizer, seed=0),
        ["blocks.0.hook_resid_pre"],
        tmp_path / "c",
        n_tokens=256,
        ctx_len=32,
        batch_size=4,
        progress=False,
    )
    means = writer_means(small, cache)
    direct = writer_means(small, torch.as_tensor(cache.sequences("train")))
    torch.testing.assert_close(means, direct)
    assert means.shape == (len(Graph.from_model(small).writers), small.cfg.d_model)
