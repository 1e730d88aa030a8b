"""The export to circuit-tracer: its own `attribute`, on the exported model and transcoders, gives the workbench's
graph on every entry both graphs have; a transcoder it cannot represent is refused in one line."""

from __future__ import annotations

import pytest
from small_models import small_model

from tests.circuits.feature.test_attribution_graph import random_clt, random_transcoders
from workbench.circuits.feature.attribution_graph import build_graph
from workbench.circuits.feature.tracer_export import replacement_model, shared_edges
from workbench.errors import BadValueError


def test_circuit_tracer_on_the_export_gives_the_same_edges(tmp_path, tiny):
    from circuit_tracer.attribution.attribute import attribute

    # circuit-tracer reads the tokenizer's special ids; rotary positions as in the embedded model (with learned
    # ones circuit-tracer's embedding nodes hold the token embedding alone, the workbench's the position's too)
    model = small_model(tiny[1], seed=3, n_layers=3, positional_embedding_type="rotary", rotary_dim=8)
    tcs = random_transcoders(model, tmp_path, "topk", True)
    tokens = model.to_tokens("When Mary and John went to the park , John gave a ball to")[0]  # BOS first, as
    # circuit-tracer prepends one otherwise
    ours = build_graph(model, tcs, tokens, heads=False)
    theirs = attribute(tokens, replacement_model(model, tcs), batch_size=8)
    got = shared_edges(ours, theirs)
    assert got["shared_features"] > 0.5 * ours.n_features and got["max_rel_diff"] < 1e-5


def test_a_transcoder_circuit_tracer_cannot_hold_is_refused(tmp_path):
    model = small_model(seed=3, n_layers=3)
    with pytest.raises(BadValueError, match="layer 0's transcoder is 'JumpReLUTranscoder'.*only plain Top-k"):
        replacement_model(model, random_transcoders(model, tmp_path, "batchtopk", False))


@pytest.mark.parametrize("which", ["random", "trained"])
def test_circuit_tracer_on_a_clt_gives_the_same_edges(tmp_path, tiny, tiny_clt, which):
    """A CLT read by circuit-tracer's own load_clt (from the files written for it: a random BatchTopK CLT's written
    to a temporary folder, the trained one's from its folder) and its own `attribute`: the workbench's adjacency on
    every shared entry, within 1e-5 of the largest."""
    from circuit_tracer.attribution.attribute import attribute
    from circuit_tracer.transcoder.cross_layer_transcoder import CrossLayerTranscoder

    from workbench.circuits.feature.transcoders import CrossLayerTranscoders, open_set

    if which == "random":
        model = small_model(tiny[1], seed=3, n_layers=3, positional_embedding_type="rotary", rotary_dim=8)
        hooks = [f"blocks.{layer}.ln2.hook_normalized" for layer in range(3)]
        tcs = CrossLayerTranscoders(random_clt(model, "batchtopk", skip=False), hooks)
    else:
        model, tcs = tiny[0], open_set(tiny_clt).load()
    tokens = model.to_tokens("When Mary and John went to the park , John gave a ball to")[0]
    ct = replacement_model(model, tcs)
    assert isinstance(ct.transcoders, CrossLayerTranscoder) and ct.transcoders.n_layers == model.cfg.n_layers
    ours = build_graph(model, tcs, tokens, heads=False)
    theirs = attribute(tokens, ct, batch_size=8)
    got = shared_edges(ours, theirs)
    assert got["shared_features"] > 0.5 * ours.n_features and got["max_rel_diff"] < 1e-5, got


def test_a_clt_circuit_tracer_cannot_hold_is_refused():
    from workbench.circuits.feature.transcoders import CrossLayerTranscoders

    model = small_model(seed=3, n_layers=3)
    hooks = [f"blocks.{layer}.ln2.hook_normalized" for layer in range(3)]
    with pytest.raises(BadValueError, match="does not export to circuit-tracer: .*a topk CLT's rule is not one"):
        replacement_model(model, CrossLayerTranscoders(random_clt(model, "topk"), hooks))
