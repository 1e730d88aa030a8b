"""The continuations (workbench/interventions/generate.py) with a key/value cache against the same ones re-running the
whole sequence each step, for steered runs whose hooks act by position; and a batch's rows against each run alone."""

import pytest
import torch

from workbench.interventions.config import InterventionConfig as C
from workbench.interventions.dictionary import load_dictionary
from workbench.interventions.engine import Intervention, intervene
from workbench.interventions.generate import continuation, rollout

PROMPT = "When Mary and John went to the store , John gave a drink to"
# ending in the tokenizer's pad token (GPT-2's is its end-of-text token): attended with the cache as without it
PAD_PROMPT = "When Mary and John went to the store , John gave a drink to <pad>"


def _top(model, site) -> int:
    """The latent most active at the prompt's last position (so that ablating it changes something)."""
    _, cache = model.run_with_cache(model.to_tokens(PROMPT), names_filter=[site.read_hook])
    return int(site.encode(cache[site.read_hook][0, -1]).abs().argmax())


def _same(a, b) -> None:
    assert a.tokens == b.tokens
    torch.testing.assert_close(a.prompt, b.prompt, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(a.logits, b.logits, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "dictionary,kw",
    [
        ("topk", dict(op="steer", value=[40.0])),
        ("topk", dict(op="steer", value=[40.0], positions="generated")),
        ("tc", dict(op="steer", value=[-20.0], semantics="frozen")),
        ("tc", dict(op="set", value=[15.0], semantics="frozen", frozen_norm=False, constrained_layers=[1, 2])),
        ("tc", dict(op="ablate", positions="3,-1")),
        ("tc", dict(op="ablate", ablate_to="counterfactual", counterfactual="When Anna and Bob went to the park")),
    ],
)
def test_a_cached_steered_continuation_equals_the_uncached_one(tiny, saes, tc_set, dictionary, kw):
    """Same tokens and logits (within float tolerance) with the cache as re-running the sequence each step, with
    the clean row beside the intervened one; and the intervention changed the continuation or the next token."""
    model = tiny[0]
    sites = load_dictionary(saes["topk"] if dictionary == "topk" else tc_set, model)
    feature = "3" if dictionary == "topk" else f"2:{_top(model, sites[2])}"
    iv = Intervention(model, sites, PAD_PROMPT, C(features=[feature], continue_tokens=12, **kw))
    cached, uncached = iv.rollout(12), iv.rollout(12, kv_cache=False)
    _same(cached, uncached)
    assert len(cached.tokens[1]) == 12 and cached.logits.shape == (2, 12, model.cfg.d_vocab)
    moved = (cached.logits[1] - cached.logits[0]).abs().max()
    assert moved > 1e-3  # the steering acts on the generated tokens too
    # the clean row is the clean run, and the intervened prompt is the engine's logits() of it
    torch.testing.assert_close(cached.prompt[0], iv.clean["logits"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cached.prompt[1], iv.logits(), atol=1e-5, rtol=1e-5)


def test_sampled_rows_draw_as_each_would_alone(tiny):
    model = tiny[0]
    tokens = model.to_tokens(PROMPT)[0]
    alone = continuation(model, tokens, 8, [], sample=True, seed=5, temp=1.5)
    both = rollout(model, tokens, 8, [], rows=2, sample=True, seed=5, temp=1.5)
    assert both.tokens == [alone, alone]
    _same(both, rollout(model, tokens, 8, [], rows=2, sample=True, seed=5, temp=1.5, kv_cache=False))


def test_a_continuation_stops_at_the_context_length(tiny):
    model = tiny[0]
    tokens = torch.zeros(model.cfg.n_ctx - 3, dtype=torch.long)
    assert len(continuation(model, tokens, 10, [])) == 3


def test_a_sweep_row_equals_that_strength_run_alone(tiny, saes):
    """--strengths run in the intervention's batch: each row's KL, target change and continuation are what the
    intervention with that value gives by itself."""
    model = tiny[0]
    sites = load_dictionary(saes["topk"], model)
    base = dict(features=["3"], op="steer", continue_tokens=6)
    r = intervene(model, sites, PROMPT, C(**base, value=[10.0], strengths=[0.0, 20.0, 60.0]))
    sweep = r["sweep"]
    assert [row["strength"] for row in sweep["rows"]] == [0.0, 20.0, 60.0]
    assert sweep["rows"][0]["kl"] == pytest.approx(0.0, abs=1e-6)
    assert sweep["rows"][2]["target_logit_change"] > 0  # the default target: what the largest strength raises most
    for row in sweep["rows"][1:]:
        alone = intervene(model, sites, PROMPT, C(**base, value=[row["strength"]]))
        last = alone["positions"][-1]
        assert row["kl"] == pytest.approx(last["kl"], rel=1e-3, abs=1e-6)
        assert row["continuation"] == alone["continuation"]["intervened"]
        change = last["logits"][sweep["target"]] - last["clean_logits"][sweep["target"]]
        assert row["target_logit_change"] == pytest.approx(change, rel=1e-3, abs=1e-4)
    named = intervene(model, sites, PROMPT, C(**base, value=[10.0], strengths=[5.0], target="Mary"))
    assert named["sweep"]["target_str"] == "Mary"


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(op="ablate", strengths=[1.0]), "sweep the value of op set, scale or steer"),
        (dict(op="steer", value=[1.0], strengths=[]), "give one or more numbers"),
        (dict(op="steer", value=[1.0], target="Mary"), "give --strengths too"),
    ],
)
def test_a_sweep_without_a_value_to_sweep_is_refused(kw, message):
    from workbench.errors import BadValueError

    with pytest.raises(BadValueError, match=message):
        C(features=["3"], **kw)
