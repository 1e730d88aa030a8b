"""The dictionary interface (transcoders.py): a per-layer set's methods against its sae-lens transcoders, its
one-line refusals, and a set folder's manifest read once and its members loaded once per command."""

from __future__ import annotations

import json

import pytest
import torch
from small_models import small_model

from tests.circuits.feature.test_attribution_graph import random_clt, random_transcoders
from workbench.circuits.feature.transcoders import PerLayerTranscoders, Transcoders, open_set, output_hook
from workbench.cli import main
from workbench.errors import BadValueError


@pytest.fixture(scope="module")
def per_layer(tmp_path_factory):
    model = small_model(None, seed=2, n_layers=3)
    return model, PerLayerTranscoders(random_transcoders(model, tmp_path_factory.mktemp("tcs"), "topk", True))


def test_a_per_layer_set_reads_and_writes_its_own_layer(per_layer):
    model, tcs = per_layer
    assert isinstance(tcs, Transcoders) and tcs.check(model) is tcs and tcs.n_layers == 3
    x = torch.randn(5, model.cfg.d_model)
    for layer, t in enumerate(tcs.members):
        sae = t.sae
        assert list(tcs.writes_to(layer)) == [layer] and tcs.input_hook(layer) == f"blocks.{layer}.ln2.hook_normalized"
        codes = tcs.encode(layer, x)
        torch.testing.assert_close(codes, sae.encode(x))
        pre, same = tcs.preacts(layer, x)
        torch.testing.assert_close(same, codes)
        assert pre.shape == (5, tcs.n_sparse(layer)) == (5, tcs.d_sae(layer))
        codes_by_layer = [torch.zeros(5, tcs.d_sae(s)) for s in range(layer)] + [codes]
        out = tcs.reconstruct(layer, codes_by_layer, x)
        torch.testing.assert_close(out, sae.decode(codes) + x @ sae.W_skip.detach().T)
        y = torch.randn(5, model.cfg.d_model)
        torch.testing.assert_close(tcs.error(layer, codes_by_layer, x, y), y - out)
        latents = torch.tensor([0, 7, 3])
        torch.testing.assert_close(tcs.decoder(layer, layer, latents), sae.W_dec.detach()[latents])
        other = (layer + 1) % 3
        assert not tcs.decoder(layer, other, latents).any()  # writes no other layer
        # the pre-activation is affine in the input: encoder vectors times x recover pre(x) - pre(0)
        vecs = tcs.encoder_vectors(layer, torch.arange(tcs.n_sparse(layer)), x.dtype)
        pre0, _ = tcs.preacts(layer, torch.zeros(1, model.cfg.d_model))
        torch.testing.assert_close(x @ vecs.T, pre - pre0, rtol=1e-4, atol=1e-5)
    assert len(tcs.fingerprint()) == 3 and output_hook(2) == "blocks.2.hook_mlp_out"


def test_a_per_layer_set_is_refused_on_another_model_in_one_line(per_layer):
    model, tcs = per_layer
    with pytest.raises(BadValueError, match=r"lacks layer\(s\) \[1\]"):
        PerLayerTranscoders([tcs.members[0], tcs.members[2]]).check(model)
    with pytest.raises(BadValueError, match="has layer 2, but the model has layers 0..1"):
        tcs.check(small_model(None, seed=2, n_layers=2))
    with pytest.raises(BadValueError, match="maps width 32 -> 32, but this model.s MLP maps 48 -> 48"):
        tcs.check(small_model(None, seed=2, n_layers=3, d_model=48))
    with pytest.raises(BadValueError, match="attention-only"):
        tcs.check(small_model(None, seed=2, n_layers=3, attn_only=True))


def test_a_set_folder_is_read_once_and_its_members_loaded_once(tiny, tiny_set):
    model, _ = tiny
    tset = open_set(tiny_set)
    assert open_set(tset) is tset and tset.model == json.loads((tiny_set / "transcoders.json").read_text())["model"]
    tcs = tset.load(device="cpu", model=model)
    assert tcs.source is tset and tset.load(0, "cpu", model) is tcs  # members loaded once
    assert {layer: f.name for layer, f in tset.member_folders().items()} == {
        e["layer"]: e["transcoders"][0] for e in tset.layers
    }


def test_circuit_graph_reads_the_set_manifest_once(tiny_set, tmp_path, monkeypatch, capsys):
    """The command's check, the graph, its labels and its members all read the one TranscoderSet."""
    import workbench.sae.transcoders as sets

    reads = []
    real = sets.load_set
    monkeypatch.setattr(sets, "load_set", lambda folder: reads.append(folder) or real(folder))
    argv = ["circuit", "graph", "--workspace", str(tmp_path / "ws"), "--transcoders", str(tiny_set)]
    assert main([*argv, "--prompt", "When Mary and John went to the store , John gave a drink to"]) == 0
    assert len(reads) == 1, reads


# ---- cross-layer transcoders through the same interface -------------------------------------------------------


HOOKS = [f"blocks.{layer}.ln2.hook_normalized" for layer in range(3)]


def test_a_clt_without_cross_layer_decoders_gives_the_per_layer_sets_graph(tmp_path):
    """Zero the decoders (and biases) into later layers: the CLT is a per-layer set, saved and loaded through
    sae-lens as one, and the two graphs agree: nodes, edges, pruning and every edge's heads."""
    from workbench.circuits.feature.attribution_graph import build_graph
    from workbench.circuits.feature.transcoders import CrossLayerTranscoders, Transcoder
    from workbench.sae.architectures import build
    from workbench.sae.config import SAEConfig
    from workbench.sae.io import load_sae, save_sae

    model = small_model(seed=3, n_layers=3)
    clt, d = random_clt(model, "topk", skip=False), model.cfg.d_model
    members = []
    with torch.no_grad():
        for layer, m in enumerate(clt.members):
            m.W_dec[:, d:] = 0
            m.b_dec[d:] = 0
            sae = build(SAEConfig("topk", k=4, n_latents=48, transcoder=True).resolve(d, None, d))
            for name in ("W_enc", "b_enc", "b_in", "input_scale"):
                getattr(sae, name).copy_(getattr(m, name))
            sae.W_dec.copy_(m.W_dec[:, :d])
            sae.b_dec.copy_(m.b_dec[:d])
            meta = {"hook_name": HOOKS[layer], "hook_name_out": output_hook(layer), "model_name": "test"}
            save_sae(sae, tmp_path / f"L{layer}", metadata=meta)
            members.append(Transcoder(layer, load_sae(tmp_path / f"L{layer}").eval(), HOOKS[layer]))
    tokens = torch.randint(0, model.cfg.d_vocab, (9,), generator=torch.Generator().manual_seed(1))
    options = dict(batch_size=7, position_step=4)
    g_clt = build_graph(model, CrossLayerTranscoders(clt, HOOKS), tokens, **options)
    g_set = build_graph(model, PerLayerTranscoders(members), tokens, **options)
    assert torch.equal(g_clt.features, g_set.features) and g_clt.n_features > 20
    torch.testing.assert_close(g_clt.activations, g_set.activations, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(g_clt.adjacency, g_set.adjacency, rtol=1e-5, atol=1e-6)
    assert torch.equal(g_clt.pruned.node_mask, g_set.pruned.node_mask)
    assert torch.equal(g_clt.pruned.edge_mask, g_set.pruned.edge_mask) and g_clt.pruned.edge_mask.sum() > 20
    assert torch.equal(g_clt.heads["edges"], g_set.heads["edges"]) and g_clt.heads["names"] == g_set.heads["names"]
    torch.testing.assert_close(g_clt.heads["weights"], g_set.heads["weights"], rtol=1e-5, atol=1e-6)
