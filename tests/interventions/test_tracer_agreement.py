"""Frozen interventions (a transcoder set and a CLT) against circuit-tracer 0.5's own `feature_intervention` on the same model, prompt and
transcoders (exported by workbench/circuits/tracer_export.py), within its 1e-3 tolerance."""

import pytest
import torch

from workbench.circuits.feature.tracer_export import replacement_model
from workbench.circuits.feature.transcoders import open_set
from workbench.interventions.config import InterventionConfig as C
from workbench.interventions.dictionary import load_dictionary
from workbench.interventions.engine import Intervention

PROMPT = "When Mary and John went to the store , John gave a drink to"


@pytest.mark.parametrize("constrained", [False, True])
@pytest.mark.parametrize("dictionary", ["tc_set", "tiny_clt"])
def test_frozen_matches_circuit_tracers_feature_intervention(tiny, request, dictionary, constrained):
    """A per-layer set, and a cross-layer transcoder (whose changes circuit-tracer writes into every later layer)."""
    model = tiny[0]
    folder = request.getfixturevalue(dictionary)
    tokens = model.to_tokens(PROMPT)[0]
    theirs_model = replacement_model(model, open_set(folder).load(0, "cpu", model))
    sites = load_dictionary(folder, model)
    layers = list(range(model.cfg.n_layers))
    _, cache = model.run_with_cache(tokens[None])

    def active(layer, pos):  # a latent the prompt activates there, so its clean code is not zero
        site = sites[layer]
        return int(site.encode(cache[site.read_hook][0, pos]).argmax())

    changes = [(1, 5, active(1, 5), 6.0), (2, 9, active(2, 9), -4.0)]  # (layer, position, latent, value)
    theirs, _ = theirs_model.feature_intervention(
        tokens, changes, constrained_layers=range(model.cfg.n_layers) if constrained else None
    )
    got = []
    hooks = []
    for layer, pos, latent, value in changes:  # one Intervention per change, their hooks stacked
        cfg = C(
            features=[f"{layer}:{latent}"],
            op="set",
            value=[value],
            positions=str(pos),
            semantics="frozen",
            frozen_norm=constrained,
            constrained_layers=layers if constrained else [],
        )
        iv = Intervention(model, sites, tokens, cfg)
        held = len(iv.hooks(empty=True))  # the held hooks once, then each change's own
        hooks += iv.hooks()[held if hooks else 0 :]
        got.append(iv)
    from workbench.interventions.generate import forward

    ours = forward(model, tokens, hooks, got[0].reads)
    clean = got[0].clean["logits"]
    assert (theirs[0] - clean).abs().max() > 1e-2  # the interventions did something
    torch.testing.assert_close(ours, theirs[0].float(), atol=1e-3, rtol=1e-3)
