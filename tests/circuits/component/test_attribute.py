import pytest
import torch

from workbench.circuits.component.attribute import attribute
from workbench.circuits.component.graph import Graph
from workbench.circuits.component.hooks import flags
from workbench.circuits.component.patching import evaluate, make_setup
from workbench.circuits.inputs import prepare
from workbench.circuits.metrics import Metric


def _reference_eap(model, qi):
    """EAP through TransformerLens' own split q/k/v inputs (per-head residual copies) and autograd."""
    g = Graph.from_model(model)
    setup = make_setup(model, g, qi)
    metric = Metric("logit_diff", qi.answer, qi.wrong, setup.clean_logits)
    grads = {}
    names = []
    for layer in range(g.n_layers):
        names += [f"blocks.{layer}.hook_{k}_input" for k in "qkv"] + (
            [] if g.attn_only else [f"blocks.{layer}.hook_mlp_in"]
        )
    names.append(f"blocks.{g.n_layers - 1}.hook_resid_post")

    def keep(grad, hook):
        grads[hook.name] = grad[0]

    with (
        flags(model, use_split_qkv_input=True, use_hook_mlp_in=True),
        model.hooks(bwd_hooks=[(n, keep) for n in names]),
    ):
        metric(model(qi.tokens[None])[:, -1]).sum().backward()
    model.zero_grad(set_to_none=True)
    per_reader = [grads[n] if grads[n].ndim == 3 else grads[n][:, None] for n in names]
    G = torch.cat(per_reader, dim=1)
    return g.matrix_to_edges(torch.einsum("wpd,prd->wr", setup.z_clean - setup.z_abl, G))


@pytest.mark.parametrize("which", ["tiny_shape", "gqa", "attn_only", "parallel"])
def test_eap_matches_split_qkv_autograd(which, request, ioi):
    model = request.getfixturevalue(which)
    if which != "tiny_shape":
        qi = prepare(model, [1, 5, 7, 9, 11, 3], 4, [1, 5, 8, 9, 12, 3], 6)
    else:
        qi = prepare(model, ioi[0].prompt, ioi[0].answer, ioi[0].counterfactual, ioi[0].wrong)
    got = attribute(model, qi, method="eap").scores
    ref = _reference_eap(model, qi)
    torch.testing.assert_close(got, ref, atol=1e-5 * float(ref.abs().max()) + 1e-7, rtol=1e-3)
    assert all(p.requires_grad and p.grad is None for p in model.parameters())


def test_ig_one_step_is_eap_and_positions_sum(small, ioi):
    q = ioi[0]
    qi = prepare(small, q.prompt, q.answer, q.counterfactual, q.wrong)
    eap = attribute(small, qi, method="eap")
    ig = attribute(small, qi, method="eap-ig", steps=1, per_position=True)
    torch.testing.assert_close(ig.scores, eap.scores)
    torch.testing.assert_close(ig.per_position.sum(0), ig.scores, atol=1e-6, rtol=1e-4)
    assert ig.per_position.shape == (len(qi.tokens), Graph.from_model(small).n_edges)


def test_ig_step_batching_does_not_change_scores(small, ioi):
    q = ioi[1]
    qi = prepare(small, q.prompt, q.answer, q.counterfactual, q.wrong)
    a = attribute(small, qi, steps=4, step_batch=1).scores
    b = attribute(small, qi, steps=4, step_batch=None).scores
    c = attribute(small, qi, steps=4, step_batch=3).scores
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(a, c, atol=1e-6, rtol=1e-4)
    with pytest.raises(ValueError, match="step_batch must be"):
        attribute(small, qi, step_batch=0)


def test_auto_step_batch_batches_small_prompts_only(small):
    from workbench.circuits.component.attribute import _step_chunk

    assert _step_chunk(small, 20, 5, "auto") == 5
    big = type("M", (), {"cfg": type("C", (), dict(n_layers=12, d_model=768, d_mlp=3072, n_heads=12))})()
    assert _step_chunk(big, 256, 5, "auto") == 1


def test_eap_predicts_single_edge_patching(small, ioi):
    """First-order check: the score of an edge tracks the exact effect of patching that edge alone."""
    q = ioi[2]
    qi = prepare(small, q.prompt, q.answer, q.counterfactual, q.wrong)
    g = Graph.from_model(small)
    setup = make_setup(small, g, qi)
    metric = Metric("logit_diff", qi.answer, qi.wrong, setup.clean_logits)
    masks = ~torch.eye(g.n_edges, dtype=torch.bool)
    effect = float(metric(setup.clean_logits)) - metric(evaluate(small, setup, masks))
    scores = attribute(small, qi, method="eap").scores
    corr = torch.corrcoef(torch.stack([scores, effect]))[0, 1]
    assert corr > 0.8


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(method="acdc"), "valid: eap, eap-ig"),
        (dict(steps=0), "steps"),
        (dict(ablation="resample"), "valid: counterfactual, mean, zero"),
        (dict(metric="acc"), "valid metrics"),
    ],
)
def test_bad_settings_name_the_choices(small, ioi, kw, match):
    q = ioi[0]
    qi = prepare(small, q.prompt, q.answer, q.counterfactual, q.wrong)
    with pytest.raises(ValueError, match=match):
        attribute(small, qi, **kw)


def test_different_length_counterfactual_attribution(small):
    qi = prepare(
        small, "When Mary and John went to the park , John gave a ball to", "Mary", "Then John gave a ball to", "John"
    )
    es = attribute(small, qi, steps=3, per_position=True)
    assert torch.isfinite(es.scores).all()
    # positions without a counterfactual counterpart keep clean values: no attribution flows from them
    assert es.per_position[1 : len(qi.tokens) - len(qi.cf_tokens) + 1].abs().max() == 0
