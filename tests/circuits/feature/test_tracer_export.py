"""The export to circuit-tracer: its own `attribute`, on the exported model and transcoders, gives the workbench's
graph on every entry both graphs have; a transcoder it cannot represent is refused in one line."""

from __future__ import annotations

import pytest
from small_models import small_model

from tests.circuits.feature.test_attribution_graph import random_transcoders
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
