"""The export to circuit-tracer: its own `attribute`, on the exported model and transcoders, gives the workbench's
graph on every entry both graphs have; the set written as its files loads in its own loader with the same codes;
a transcoder its files cannot represent is refused in one line."""

from __future__ import annotations

import pytest
from small_models import small_model

from tests.circuits.feature.test_attribution_graph import random_clt, random_transcoders
from workbench.circuits.feature.attribution_graph import build_graph
from workbench.circuits.feature.graph_json import to_neuronpedia
from workbench.circuits.feature.tracer_export import (
    importable,
    replacement_model,
    shared_edges,
    write_transcoder_set,
)
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


def _tracer_json(theirs) -> tuple[dict, dict]:
    """circuit-tracer's own kept graph (prune_graph at its default thresholds, its create_nodes, then the links and
    used nodes as its create_used_nodes_and_edges picks them, read by index: its error id '0_{layer}_{pos}' can be
    a layer-0 feature's): ({node id: influence}, {(source id, target id): weight}), errors named as the workbench
    names them."""
    from circuit_tracer.graph import prune_graph
    from circuit_tracer.utils.create_graph_files import create_nodes

    node_mask, edge_mask, cumulative = prune_graph(theirs, 0.8, 0.98)
    nodes = create_nodes(theirs, node_mask, None, cumulative)
    name = {
        i: ("err_" + n.node_id[2:] if n.feature_type == "mlp reconstruction error" else n.node_id)
        for i, n in nodes.items()
    }
    links = {
        (name[src], name[dst]): float(theirs.adjacency_matrix[dst, src])
        for dst, src in edge_mask.nonzero().tolist()
        if src in nodes and dst in nodes
    }
    used = {n for link in links for n in link}
    return {
        name[i]: n.influence and float(n.influence)  # logits: None
        for i, n in nodes.items()
        if name[i] in used or n.feature_type in ("embedding", "logit")
    }, links


def _workbench_json(g) -> tuple[dict, dict]:
    d = to_neuronpedia(g)
    return {n["node_id"]: n["influence"] for n in d["nodes"]}, {
        (e["source"], e["target"]): e["weight"] for e in d["links"]
    }


@pytest.mark.parametrize("kind", ["set", "clt"])
def test_the_kept_nodes_and_links_are_circuit_tracers(tmp_path, tiny, kind):
    """circuit-tracer's own `attribute` and pruning on its own copy of the transcoders (a Top-k set with skip paths,
    a BatchTopK CLT): the workbench's graph JSON keeps the same nodes and links, with the same weights and
    influences; with bos_nodes the features and error nodes at the start token, which circuit-tracer never creates,
    are nodes too and the kept graph differs."""
    from circuit_tracer.attribution.attribute import attribute

    from workbench.circuits.feature.transcoders import CrossLayerTranscoders

    model = small_model(tiny[1], seed=3, n_layers=3, positional_embedding_type="rotary", rotary_dim=8)
    if kind == "clt":
        hooks = [f"blocks.{layer}.ln2.hook_normalized" for layer in range(3)]
        tcs = CrossLayerTranscoders(random_clt(model, "batchtopk", skip=False), hooks)
    else:
        tcs = random_transcoders(model, tmp_path, "topk", True)
    tokens = model.to_tokens("When Mary and John went to the park , John gave a ball to")[0]
    t_nodes, t_links = _tracer_json(attribute(tokens, replacement_model(model, tcs), batch_size=8))
    nodes, links = _workbench_json(build_graph(model, tcs, tokens, heads=False))
    assert set(nodes) == set(t_nodes) and set(links) == set(t_links) and len(links) > 20
    for k, w in t_links.items():
        assert links[k] == pytest.approx(w, rel=1e-4, abs=1e-6 * max(map(abs, t_links.values()))), k
    for k, v in t_nodes.items():
        assert v is None or nodes[k] == pytest.approx(v, abs=1e-5), k
    g = build_graph(model, tcs, tokens, heads=False, bos_nodes=True)
    assert (g.features[:, 1] == 0).any() and set(_workbench_json(g)[0]) != set(t_nodes)


def test_a_batchtopk_set_as_circuit_tracer_files_loads_in_circuit_tracer_and_top_k_is_refused(tmp_path):
    """`sae export --format circuit-tracer`: circuit-tracer's own load_transcoders reads the files, its codes and
    outputs equal the workbench's; a Top-k set, which its file loaders would read as ReLU, is refused in one line."""
    import torch
    import yaml

    importable()
    from circuit_tracer.utils.hf_utils import load_transcoders

    model = small_model(seed=3, n_layers=3)
    tcs = random_transcoders(model, tmp_path / "btk", "batchtopk", True)
    out = write_transcoder_set(model, tcs, tmp_path / "ct")
    cfg = yaml.safe_load((out / "config.yaml").read_text())
    cfg["transcoders"] = [str(out / p) for p in cfg["transcoders"]]  # circuit-tracer reads them from the cwd
    theirs = load_transcoders(cfg, device=torch.device("cpu"), lazy_decoder=False)
    x = torch.randn(40, model.cfg.d_model, generator=torch.Generator().manual_seed(1)) * 3
    for t in tcs:
        codes = t.sae.encode(x)
        assert (codes > 0).any()
        torch.testing.assert_close(theirs[t.layer].encode(x), codes, atol=1e-5, rtol=0)
        torch.testing.assert_close(theirs[t.layer](x), t.sae(x), atol=1e-5, rtol=0)
    with pytest.raises(BadValueError, match="layer 0's transcoder is Top-k: circuit-tracer 0.5's file loaders"):
        write_transcoder_set(model, random_transcoders(model, tmp_path / "k", "topk", False), tmp_path / "no")


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
