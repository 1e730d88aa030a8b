"""Closest units across dictionaries: a dictionary and a copy with permuted latents match each latent to its twin."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import scipy.sparse as sp
from safetensors.numpy import load_file, save_file

from workbench.atomic import sha256_file
from workbench.features import FeatureStore, compute
from workbench.features.build import build_stores
from workbench.features.config import FeatureConfig

RNG = np.random.default_rng(0)


def test_decoder_and_correlation_matches_find_the_permuted_twin():
    W = RNG.normal(size=(24, 8))
    perm = RNG.permutation(24)  # latent i of the copy is latent perm[i] of the original
    ids, vals = compute.decoder_matches(W, 1, W[perm], 1, 3, chunk=5)
    assert np.array_equal(ids[:, 0], np.argsort(perm))
    np.testing.assert_allclose(vals[:, 0], 1.0, atol=1e-5)
    assert (vals[:, 1] < 0.999).all()  # only the twin is the same direction
    acts = sp.random(500, 24, density=0.1, random_state=1, format="csr")
    acts.data = np.abs(acts.data)
    ids, vals = compute.correlation_matches(acts, acts[:, perm].tocsr(), 2)
    assert np.array_equal(ids[:, 0], np.argsort(perm))
    np.testing.assert_allclose(vals[:, 0], 1.0, atol=1e-6)


def test_a_latent_inside_a_block_s_span_overlaps_it_fully():
    """Latent vs block: the norm of the latent's projection on the block's span (1 inside it, |cos| for a line)."""
    blocks = RNG.normal(size=(3 * 2, 6))  # 3 blocks of 2
    inside = 0.3 * blocks[2] - 1.2 * blocks[3]  # in block 1's span
    latents = np.stack([inside, RNG.normal(size=6)])
    ids, vals = compute.decoder_matches(latents, 1, blocks, 2, 3)
    assert ids[0, 0] == 1 and vals[0, 0] == pytest.approx(1.0, abs=1e-5)
    back_ids, back_vals = compute.decoder_matches(blocks, 2, latents, 1, 2)  # symmetric in the two dictionaries
    assert back_ids[1, 0] == 0 and back_vals[1, 0] == pytest.approx(1.0, abs=1e-5)


def test_stores_built_together_match_a_dictionary_with_its_permuted_copy(feature_workspace, tmp_path):
    """The real path: a trained Top-k SAE and a copy with its latents permuted (encoder columns, biases, decoder
    rows), built together on one hook: every latent that fires is matched to its twin with cosine 1 and
    correlation 1, both ways; each manifest names the other folder and the weights matched."""
    src = next(p for p in (feature_workspace / "saes" / "run").iterdir() if p.name.startswith("topk"))
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        shutil.copytree(src, d, ignore=shutil.ignore_patterns("features", "artifact.json"))
    w = load_file(b / "sae_weights.safetensors")
    perm = RNG.permutation(w["b_enc"].shape[0])
    w["W_enc"], w["b_enc"], w["W_dec"] = w["W_enc"][:, perm], w["b_enc"][perm], w["W_dec"][perm]
    save_file({k: np.ascontiguousarray(v) for k, v in w.items()}, b / "sae_weights.safetensors")
    info = json.loads((b / "workbench.json").read_text())  # the copy's record names its own weights
    info["weights_sha256"] = sha256_file(b / "sae_weights.safetensors")
    (b / "workbench.json").write_text(json.dumps(info))
    cache, model = feature_workspace / "caches" / "random-synthetic", str(feature_workspace / "models" / "random")
    build_stores([a, b], cache, model, FeatureConfig(chunk_rows=1000, corr_tokens=10**6, n_across=3), progress=False)
    sa, sb = FeatureStore(a), FeatureStore(b)
    assert [o["sae"] for o in sa.manifest["across"]] == ["../../b"]
    assert sa.manifest["across"][0]["sae_weights"] == sb.manifest["sae_weights"]
    twin = np.argsort(perm)  # latent u of a is latent twin[u] of b
    fired = np.flatnonzero(sa.units["count"].to_numpy() >= 2)
    assert len(fired) > 10
    for u in fired:
        [other] = sa.unit(u)["across"]
        assert other["sae"] == b.resolve()
        assert other["cos"][0][0] == twin[u] and other["cos"][0][1] == pytest.approx(1.0, abs=1e-5)
        assert other["corr"][0][0] == twin[u] and other["corr"][0][1] == pytest.approx(1.0, abs=1e-4)
        [back] = sb.unit(twin[u])["across"]
        assert back["sae"] == a.resolve() and back["cos"][0][0] == u


def test_the_workspace_s_stores_built_together_list_each_other(feature_workspace):
    """The fixture's three SAEs (Top-k, Matryoshka + scaffold, block Top-k) were built in one call: each store
    lists the two others (by folder, with the weights matched), and a unit's matches are read for each."""
    folders = sorted(p for p in (feature_workspace / "saes" / "run").iterdir() if (p / "features").is_dir())
    for f in folders:
        store = FeatureStore(f)
        listed = [(f / "features" / o["sae"]).resolve() for o in store.manifest["across"]]
        assert sorted(listed) == sorted(o.resolve() for o in folders if o != f)
        for o, entry in zip(store.manifest["across"], store.unit(int(store.units["count"].idxmax()))["across"]):
            assert (
                json.loads((entry["sae"] / "features" / "manifest.json").read_text())["sae_weights"] == o["sae_weights"]
            )
            assert entry["cos"] and all(0 < v <= 1 + 1e-5 for _, v in entry["cos"])


def test_a_store_built_alone_has_no_matches(feature_workspace, tmp_path):
    src = next(p for p in (feature_workspace / "saes" / "run").iterdir() if p.name.startswith("topk"))
    shutil.copytree(src, tmp_path / "a", ignore=shutil.ignore_patterns("features", "artifact.json"))
    cache, model = feature_workspace / "caches" / "random-synthetic", str(feature_workspace / "models" / "random")
    build_stores([tmp_path / "a"], cache, model, FeatureConfig(chunk_rows=1000, corr_tokens=1500), progress=False)
    store = FeatureStore(tmp_path / "a")
    assert "across" not in store.manifest and store.unit(0)["across"] == []
