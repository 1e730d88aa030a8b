"""The engine against what it must equal: the clean run for an empty change, a hand-written TransformerLens hook
for a live change, and (frozen) what can be derived by construction when patterns and scales are held."""

import pytest
import torch

from workbench.circuits.inputs import tokens_of
from workbench.errors import BadValueError
from workbench.interventions.config import InterventionConfig as C
from workbench.interventions.dictionary import load_dictionary
from workbench.interventions.engine import Intervention, intervene

PROMPT = "When Mary and John went to the store , John gave a drink to"


def _top_latent(site, x, pos):
    """The unit most active at `pos` (so that ablating it changes something)."""
    codes = site.encode(x[0, pos])[: site.n_sparse]
    return int(codes.abs().argmax()) // site.block_size


@pytest.mark.parametrize("semantics", ["live", "frozen"])
def test_an_empty_intervention_gives_the_clean_logits_exactly(tiny, saes, tc_set, semantics):
    model = tiny[0]
    clean = model(tokens_of(model, PROMPT)[None])[0]
    for folder in (saes["topk"], tc_set):
        iv = Intervention(model, load_dictionary(folder, model), PROMPT, C(semantics=semantics))
        assert torch.equal(iv.logits(), clean)
    # a change that puts the clean codes back (the prompt as its own counterfactual) adds exact zeros
    iv = Intervention(
        model,
        load_dictionary(tc_set, model),
        PROMPT,
        C(features=["1:5", "3:7"], ablate_to="counterfactual", counterfactual=PROMPT, semantics=semantics),
    )
    assert torch.equal(iv.logits(), clean)


def _hand_hooks(site, index, pos, new_fn):
    """A hand-written hook doing the same as the engine: at the write hook, add (new - old) @ W_dec rows."""
    seen = {}

    def read(act, hook):
        seen["x"] = act

    def write(act, hook):
        x = seen.get("x", act)
        codes = site.sae.encode(x[0, pos])
        old = codes[index]
        new = new_fn(old)
        act = act.clone()
        act[0, pos] += (new - old) @ site.sae.W_dec[index]
        return act

    hooks = [(site.write_hook, write)]
    return hooks if site.read_hook == site.write_hook else [(site.read_hook, read), *hooks]


@pytest.mark.parametrize(
    "kind,op,value",
    [
        ("tc", "ablate", None),
        ("topk", "set", [12.0]),
        ("block", "set", [3.0, -2.0, 1.0, 0.5]),
        ("scaffold", "ablate", None),
        ("tc", "steer", [-6.0]),
        ("topk", "scale", [3.0]),
    ],
)
def test_a_live_intervention_equals_a_hand_written_hook(tiny, saes, tc_set, kind, op, value):
    model = tiny[0]
    tokens = tokens_of(model, PROMPT)
    sites = load_dictionary(tc_set if kind == "tc" else saes[kind], model)
    site = sites[1] if kind == "tc" else sites[0]
    pos = tokens.numel() - 2
    _, cache = model.run_with_cache(tokens[None])
    unit = "scaffold" if kind == "scaffold" else str(_top_latent(site, cache[site.read_hook], pos))
    feature = f"{site.layer}:{unit}" if kind == "tc" else unit
    iv = Intervention(model, sites, PROMPT, C(features=[feature], op=op, value=value, positions=str(pos)))
    index = iv.units[0].index
    v = None if value is None else torch.tensor(value)
    new_fn = {
        "ablate": torch.zeros_like,
        "set": lambda c: v.expand_as(c),
        "steer": lambda c: c + v,
        "scale": lambda c: c * v,
    }[op]
    with torch.no_grad(), model.hooks(fwd_hooks=_hand_hooks(site, index, pos, new_fn)):
        want = model(tokens[None])[0]
    got = iv.logits()
    assert (got - iv.clean["logits"]).abs().max() > 1e-3  # the change did something
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_frozen_change_at_the_last_mlp_is_its_linear_readout(tiny, tc_set):
    """Patterns and scales held: a change at the last layer's MLP output at position p moves only position p's
    logits, by exactly (delta - mean delta) / clean scale * ln_final.w @ W_U; live, the scale responds."""
    model = tiny[0]
    tokens = tokens_of(model, PROMPT)
    sites = load_dictionary(tc_set, model)
    last = sites[-1]
    p = 4
    _, cache = model.run_with_cache(tokens[None])
    unit = _top_latent(last, cache[last.read_hook], p)
    cfg = dict(features=[f"{last.layer}:{unit}"], op="steer", value=[8.0], positions=str(p))
    frozen = Intervention(model, sites, PROMPT, C(**cfg, semantics="frozen"))
    d = frozen.logits() - frozen.clean["logits"]
    others = torch.ones(tokens.numel(), dtype=torch.bool)
    others[p] = False
    assert torch.equal(d[others], torch.zeros_like(d[others]))
    delta = 8.0 * last.sae.W_dec[unit].detach()
    delta = delta - delta.mean()
    scale = cache["ln_final.hook_scale"][0, p]
    want = (delta / scale * model.ln_final.w) @ model.W_U
    torch.testing.assert_close(d[p], want, atol=1e-4, rtol=1e-4)
    live = Intervention(model, sites, PROMPT, C(**cfg))
    assert not torch.allclose(live.logits()[p] - live.clean["logits"][p], want, atol=1e-3)


def test_frozen_with_every_layer_constrained_is_linear_in_the_strength(tiny, tc_set):
    model = tiny[0]
    sites = load_dictionary(tc_set, model)

    def change(strength, **kw):
        cfg = C(features=["0:3"], op="steer", value=[strength], positions="2", **kw)
        iv = Intervention(model, sites, PROMPT, cfg)
        return iv.logits() - iv.clean["logits"]

    frozen = dict(semantics="frozen", constrained_layers=[0, 1, 2, 3])
    one, two = change(5.0, **frozen), change(10.0, **frozen)
    assert one.abs().max() > 1e-3
    torch.testing.assert_close(two, 2 * one, atol=1e-4, rtol=1e-3)
    assert not torch.allclose(change(10.0), 2 * change(5.0), atol=1e-3)  # live: the model is not linear


def test_mean_ablation_puts_in_the_mean_code(tiny, saes):
    model = tiny[0]
    sites = load_dictionary(saes["topk"], model)
    seqs = torch.stack([tokens_of(model, PROMPT)] * 2)  # the mean over the prompt itself, computed by hand
    _, cache = model.run_with_cache(seqs[:1])
    mean = sites[0].encode(cache[sites[0].read_hook][0])[:, 3].mean()
    iv = Intervention(model, sites, PROMPT, C(features=["3"], ablate_to="mean", positions="-1"), mean_source=seqs)
    torch.testing.assert_close(iv.fill["3"][0][0], mean[None])


def test_result_reports_positions_kl_and_continuations(tiny, saes):
    model = tiny[0]
    sites = load_dictionary(saes["topk"], model)
    cfg = C(features=["3"], op="set", value=[30.0], positions="2,-1", continue_tokens=5, top_k=3)
    r = intervene(model, sites, PROMPT, cfg)
    n = len(r["tokens"])
    assert [p["position"] for p in r["positions"]] == [2, n - 1]
    last = r["positions"][-1]
    assert last["kl"] > 0 and len(last["top"]) == 3 and len(last["logits"]) == model.cfg.d_vocab
    assert len(r["continuation"]["clean"]["tokens"]) == 5
    assert r["semantics"] == "live" and r["config"]["value"] == [30.0]
    assert r["units"][0]["kind"] == "latent" and len(r["units"][0]["clean_codes"]) == n


def test_generated_positions_change_only_the_continuation(tiny, saes):
    model = tiny[0]
    sites = load_dictionary(saes["topk"], model)
    cfg = C(features=["3"], op="steer", value=[200.0], positions="generated", continue_tokens=4)
    r = intervene(model, sites, PROMPT, cfg)
    assert r["positions"][-1]["kl"] == 0.0
    c = r["continuation"]
    assert c["clean"]["tokens"][0] == c["intervened"]["tokens"][0]  # the first token is predicted from the prompt


def test_sampled_continuations_repeat_with_their_seed(tiny, saes):
    model = tiny[0]
    sites = load_dictionary(saes["topk"], model)
    cfg = C(continue_tokens=6, sample=True, seed=3)
    a, b = intervene(model, sites, PROMPT, cfg), intervene(model, sites, PROMPT, cfg)
    assert a["continuation"] == b["continuation"]
    assert a["continuation"]["clean"] == a["continuation"]["intervened"]  # nothing intervened, one seed


@pytest.mark.parametrize(
    "features,kw,message",
    [
        (["999"], {}, "outside the dictionary's 256 latents"),
        (["scaffold"], {}, "has no scaffold"),
        (["3"], {"op": "set", "value": [1.0, 2.0]}, "one number or one per coordinate"),
        (["3"], {"positions": "40"}, "outside the prompt"),
        (["3"], {"ablate_to": "mean"}, "--cache"),
    ],
)
def test_bad_requests_are_one_line_errors(tiny, saes, features, kw, message):
    model = tiny[0]
    with pytest.raises(BadValueError, match=message):
        Intervention(model, load_dictionary(saes["topk"], model), PROMPT, C(features=features, **kw))


def test_a_transcoder_set_needs_the_layer(tiny, tc_set):
    model = tiny[0]
    with pytest.raises(BadValueError, match=r"layers \[0, 1, 2, 3\]"):
        Intervention(model, load_dictionary(tc_set, model), PROMPT, C(features=["5"]))


def test_the_package_exports_its_front_door():
    import workbench.interventions as iv

    assert {"intervene", "Intervention", "load_dictionary", "check_graph", "InterventionConfig"} <= set(iv.__all__)
    assert iv.intervene is intervene


def test_intervene_takes_a_dictionary_folder(tiny, saes):
    cfg = C(features=["3"], op="set", value=[30.0], positions="-1", continue_tokens=2)
    by_folder = intervene(tiny[0], saes["topk"], PROMPT, cfg)
    assert by_folder == {
        **intervene(tiny[0], load_dictionary(saes["topk"], tiny[0]), PROMPT, cfg),
        "seconds": by_folder["seconds"],
    }


@pytest.mark.parametrize("semantics", ["live", "frozen"])
def test_an_empty_intervention_on_a_clt_gives_the_clean_logits_exactly(tiny, tiny_clt, semantics):
    model = tiny[0]
    clean = model(tokens_of(model, PROMPT)[None])[0]
    sites = load_dictionary(tiny_clt, model)
    assert [s.write_hooks for s in sites][0] == [f"blocks.{i}.hook_mlp_out" for i in range(model.cfg.n_layers)]
    assert torch.equal(Intervention(model, sites, PROMPT, C(semantics=semantics)).logits(), clean)
    iv = Intervention(
        model, sites, PROMPT, C(features=["0:3", "2:5"], ablate_to="counterfactual", counterfactual=PROMPT)
    )
    assert torch.equal(iv.logits(), clean)  # the clean codes put back add exact zeros at every layer written


@pytest.mark.parametrize("op,value", [("ablate", None), ("steer", [5.0])])
def test_a_live_clt_intervention_equals_a_hand_written_hook(tiny, tiny_clt, op, value):
    """The hand-written hook reads the CLT itself (its own encode and decoder blocks), not the dictionary seam: at
    every layer t >= l the feature's change times its decoder row into t is added to hook_mlp_out."""
    from workbench.sae.clt_io import load_clt, read_manifest

    model = tiny[0]
    clt, hooks_in = load_clt(tiny_clt), read_manifest(tiny_clt)["input_hooks"]
    tokens = tokens_of(model, PROMPT)
    layer, pos = 1, tokens.numel() - 2
    _, cache = model.run_with_cache(tokens[None], names_filter=hooks_in[layer])
    latent = int(clt.encode(layer, cache[hooks_in[layer]][0, pos : pos + 1])[0].argmax())
    seen = {}

    def read(act, hook):
        codes = clt.encode(layer, act[0, pos : pos + 1])[0]
        seen["d"] = (-codes[latent]) if op == "ablate" else torch.tensor(value[0])

    def write(act, hook):
        t = int(hook.name.split(".")[1])
        act = act.clone()
        act[0, pos] += seen["d"] * clt.decoder(layer, t)[latent]
        return act

    hand = [(hooks_in[layer], read)] + [(f"blocks.{t}.hook_mlp_out", write) for t in range(layer, model.cfg.n_layers)]
    with torch.no_grad(), model.hooks(fwd_hooks=hand):
        want = model(tokens[None])[0]
    cfg = C(features=[f"{layer}:{latent}"], op=op, value=value, positions=str(pos))
    iv = Intervention(model, load_dictionary(tiny_clt, model), PROMPT, cfg)
    got = iv.logits()
    assert (got - iv.clean["logits"]).abs().max() > 1e-3  # the change did something
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
