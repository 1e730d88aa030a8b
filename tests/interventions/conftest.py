"""Dictionaries of the embedded model with random weights, made in seconds: an SAE of each kind the engine acts on
(Top-k, block Top-k, Top-k with a scaffold) on blocks.2.hook_resid_post, and a Top-k transcoder set (every MLP).
Random dictionaries are enough for the engine's exactness tests: what is checked is the arithmetic of the hooks."""

import json

import pytest
import torch

HOOK = "blocks.2.hook_resid_post"


def _save(cfg, folder, meta, seed):
    from workbench.sae.architectures import build
    from workbench.sae.io import save_sae

    torch.manual_seed(seed)
    sae = build(cfg)
    if cfg.scaffold_rank:  # the scaffold's directions from a batch (zeros before)
        sae.init_from_batch(torch.randn(512, cfg.d_in) * 8)
    with torch.no_grad():  # longer decoder rows, so that a unit's code matters to the logits
        sae.W_dec.mul_(4.0)
    return save_sae(sae, folder, meta)


@pytest.fixture(scope="session")
def saes(tiny, tmp_path_factory):
    """kind -> folder of a random SAE on HOOK: topk, block (block Top-k, blocks of 4), scaffold (rank 4)."""
    from workbench.provenance import model_id
    from workbench.sae.config import SAEConfig

    root = tmp_path_factory.mktemp("saes")
    meta = {"hook_name": HOOK, "model_name": model_id(tiny[0])}
    kinds = {
        "topk": SAEConfig("topk", k=8, expansion=2),
        "block": SAEConfig("block_topk", expansion=2, block_size=4, n_active_blocks=2),
        "scaffold": SAEConfig("topk", k=8, expansion=2, scaffold_rank=4),
    }
    return {k: _save(c.resolve(d_in=128), root / k, meta, i) for i, (k, c) in enumerate(kinds.items())}


@pytest.fixture(scope="session")
def tc_set(tiny, tmp_path_factory):
    """A transcoder set folder of random Top-k transcoders, one per layer of the embedded model."""
    return _tc_set(tiny[0], tmp_path_factory.mktemp("tc_set"))


@pytest.fixture(scope="session")
def other_tc_set(tiny, tmp_path_factory):
    """Another such set (other random weights, the same shapes): a dictionary a graph of tc_set was not built with."""
    return _tc_set(tiny[0], tmp_path_factory.mktemp("other_tc_set"), init_seed=1)


@pytest.fixture(scope="session")
def absolute_set(tmp_path_factory):
    """(model, transcoder set folder): a random model of the embedded model's width with absolute positions
    (TransformerLens 'standard', so its graphs split each embedding into token and position) and such a set of it."""
    from small_models import small_model

    model = small_model(seed=2, d_model=128, n_heads=4, d_head=32, d_mlp=256, positional_embedding_type="standard")
    return model, _tc_set(model, tmp_path_factory.mktemp("absolute_set"))


def _tc_set(model, root, init_seed: int = 0):
    """Every layer's transcoder initialised from SAEConfig.seed `init_seed`."""
    from workbench.provenance import model_id
    from workbench.sae.config import SAEConfig
    from workbench.sae.transcoders import SCHEMA, SET_MANIFEST

    layers = []
    for layer in range(model.cfg.n_layers):
        hooks = f"blocks.{layer}.ln2.hook_normalized", f"blocks.{layer}.hook_mlp_out"
        cfg = SAEConfig("topk", k=8, expansion=2, transcoder=True, seed=init_seed).resolve(d_in=128, d_out=128)
        meta = {"hook_name": hooks[0], "hook_name_out": hooks[1], "model_name": model_id(model)}
        _save(cfg, root / f"L{layer}-topk", meta, 10 + layer)
        layers.append(
            {
                "layer": layer,
                "input_hook": hooks[0],
                "target_hook": hooks[1],
                "input_kind": "ln2.hook_normalized",
                "transcoders": [f"L{layer}-topk"],
            }
        )
    manifest = {
        "schema": SCHEMA,
        "version": 1,
        "model": model_id(model),
        "cache": "",
        "n_layers": len(layers),
        "layers": layers,
    }
    (root / SET_MANIFEST).write_text(json.dumps(manifest))
    return root
