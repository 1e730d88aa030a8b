"""The feature store against brute force: every statistic recomputed from dense codes of the same tokens."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from workbench.atomic import sha256_file
from workbench.cache import ActivationCache
from workbench.errors import BadValueError, DamagedFileError
from workbench.features import FeatureStore
from workbench.features.build import build_stores
from workbench.features.config import FeatureConfig
from workbench.sae.io import load_sae


def dense(ws, name):
    """(store, unit activations [rows, U] computed densely, cache, sae)."""
    folder = ws / "saes" / "run" / name
    store = FeatureStore(folder)
    cache = ActivationCache.open(ws / "caches" / "random-synthetic")
    sae = load_sae(folder).eval()
    n = store.manifest["n_rows"]
    x = cache.rows(store.manifest["hook"], np.arange(n), split="heldout")
    with torch.no_grad():
        z = sae.encode(x)[:, : store.manifest["n_sparse"]]
    b = store.manifest["block_size"]
    a = z.view(n, -1, b).norm(dim=-1) if b > 1 else z
    return store, a.numpy(), cache, sae


@pytest.fixture(scope="module")
def names(feature_workspace):
    return sorted(p.name for p in (feature_workspace / "saes" / "run").iterdir() if (p / "cfg.json").is_file())


def test_counts_top_examples_histogram_and_quantiles_match_brute_force(feature_workspace, names):
    for name in names:
        store, a, cache, _ = dense(feature_workspace, name)
        c = store.config
        fired = a > 0
        assert np.array_equal(store.units["count"].to_numpy(), fired.sum(0)), name
        assert np.array_equal(np.asarray(store.array("hist")).sum(1), fired.sum(0))
        tokens = cache.token_ids("heldout")
        for u in np.flatnonzero(fired.sum(0) >= 3)[:25]:
            f = store.unit(u)
            vals = np.sort(a[fired[:, u], u])
            top = [e for e in f["examples"] if e["group"] == "top"]
            np.testing.assert_allclose([e["value"] for e in top], vals[::-1][: c.n_top], rtol=1e-5)
            for e in top:  # the example's own token sits at `center`, with the unit's activation on it
                assert e["tokens"][e["center"]] == store.token(int(tokens[e["row"]]))
                assert e["ids"][e["center"]] == int(tokens[e["row"]])
                assert e["tokens"] == [store.token(i) for i in e["ids"]]
                assert e["acts"][e["center"]] == pytest.approx(a[e["row"], u], rel=1e-5)
            q = np.floor(np.linspace(0, 1, c.n_bins + 1) * (len(vals) - 1)).astype(int)
            np.testing.assert_allclose(f["quantile_edges"], vals[q], rtol=1e-5)  # true quantiles, not equal-width bins
            for e in f["examples"]:
                if e["group"] != "top":
                    k = int(e["group"].split()[1])
                    assert f["quantile_edges"][k - 1] - 1e-6 <= e["value"] <= f["quantile_edges"][k] + 1e-6


def test_neighbours_labels_and_token_search_match_brute_force(feature_workspace, names):
    store, a, cache, sae = dense(feature_workspace, next(n for n in names if n.startswith("topk")))
    W = sae.W_dec.detach().numpy()
    Wn = W / np.linalg.norm(W, axis=1, keepdims=True)
    cos = Wn @ Wn.T
    np.fill_diagonal(cos, -np.inf)
    corr = np.corrcoef(a[: store.config.corr_tokens].T)
    np.fill_diagonal(corr, -np.inf)
    labels = cache.labels("heldout")["task"][: len(a)]
    for u in np.flatnonzero((a > 0).sum(0) >= 5)[:20]:
        f = store.unit(u)
        ids, vals = zip(*f["neighbours"]["cos"])
        np.testing.assert_allclose(vals, np.sort(cos[u])[::-1][: len(vals)], rtol=1e-4)
        ids, vals = zip(*f["neighbours"]["corr"])
        np.testing.assert_allclose(
            vals, np.sort(np.nan_to_num(corr[u], nan=-1))[::-1][: len(vals)], rtol=1e-4, atol=1e-6
        )
        fires = a[:, u] > 0
        names_ = store.manifest["label_kinds"]["task"]
        v = names_.index(f["stats"]["task_label"])
        assert f["stats"]["task_precision"] == pytest.approx((labels[fires] == v).mean(), rel=1e-5)
        assert f["stats"]["task_recall"] == pytest.approx((fires & (labels == v)).sum() / (labels == v).sum(), rel=1e-5)
    tokens = cache.token_ids("heldout")[: len(a)]
    t = np.bincount(tokens).argmax()
    word = store.token(int(t))
    means = a[tokens == t].mean(0)
    hits = store.search_token(word, top=5)
    assert [h["unit"] for h in hits] == list(np.argsort(-means, kind="stable")[:5])
    assert hits[0]["mean_act"] == pytest.approx(means.max(), rel=1e-5)


def test_logit_effects_use_the_final_layernorm_scale(feature_workspace, names):
    from workbench.models import load

    store, _, _, sae = dense(feature_workspace, next(n for n in names if n.startswith("topk")))
    model, _ = load(str(feature_workspace / "models" / "random"), device="cpu")
    eff = (sae.W_dec.detach() * model.ln_final.w.detach()) @ model.W_U.detach()
    f = store.unit(3)
    assert f["logits"]["top"][0][1] == pytest.approx(float(eff[3].max()), rel=1e-4)
    assert f["logits"]["bottom"][0][1] == pytest.approx(float(eff[3].min()), rel=1e-4)
    assert "ln_final.w" in store.manifest["logit_effects"]


def test_architecture_panels(feature_workspace, names):
    mat = FeatureStore(feature_workspace / "saes" / "run" / next(n for n in names if n.startswith("matryoshka")))
    prefixes = mat.manifest["prefixes"]
    lv = mat.units["level"].to_numpy()
    assert lv[0] == 0 and lv[-1] == len(prefixes) - 1 and np.all(np.diff(lv) >= 0)
    assert lv[prefixes[0]] == 1  # the first latent past the first prefix starts level 2
    sc = mat.scaffold
    assert sc["rank"] == 4 and np.array(sc["abs_cos_with_pcs"]).shape == (4, 16)
    assert "ce_no_scaffold" in sc["ce"]
    store, a, _, _ = dense(feature_workspace, next(n for n in names if n.startswith("block")))
    assert store.manifest["unit"] == "block" and store.n_units == a.shape[1]
    u = int(np.argmax((a > 0).sum(0)))
    f = store.unit(u)
    coords = np.array(f["block_coords"])
    np.testing.assert_allclose(
        np.linalg.norm(coords, axis=1), [e["value"] for e in f["examples"] if e["group"] == "top"], rtol=1e-4
    )


def _interrupted(feature_workspace, names, tmp_path, monkeypatch):
    """The first SAE's feature store built until its second chunk raised (a crash after chunk 0 was finished);
    returns (src, folder, cache, model, cfg) with encode_chunk restored."""
    from workbench.features import build

    src = feature_workspace / "saes" / "run" / names[0]
    folder = tmp_path / names[0]
    shutil.copytree(src, folder, ignore=shutil.ignore_patterns("features"))
    cache, model = feature_workspace / "caches" / "random-synthetic", str(feature_workspace / "models" / "random")
    cfg = FeatureConfig(chunk_rows=1000, corr_tokens=1500)
    real = build._Job.encode_chunk

    def crash_on_second(self, c, x, row0):
        if c == 1:
            raise KeyboardInterrupt
        real(self, c, x, row0)

    monkeypatch.setattr(build._Job, "encode_chunk", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        build_stores([folder], cache, model, cfg, progress=False)
    monkeypatch.setattr(build._Job, "encode_chunk", real)
    return src, folder, cache, model, cfg


def test_an_interrupted_build_resumes_to_the_same_store(feature_workspace, names, tmp_path, monkeypatch):
    src, folder, cache, model, cfg = _interrupted(feature_workspace, names, tmp_path, monkeypatch)
    assert (folder / "features" / ".partial" / "c000000.done").is_file()
    with pytest.raises(BadValueError, match="a build was interrupted"):
        FeatureStore(folder)
    with pytest.raises(BadValueError, match="different config"):
        build_stores([folder], cache, model, FeatureConfig(chunk_rows=1000, corr_tokens=1500, n_top=5), progress=False)
    build_stores([folder], cache, model, cfg, progress=False)
    a, b = FeatureStore(folder), FeatureStore(src)
    for name in ("ex_rows", "ctx_acts", "nb_corr_ids", "token_units", "hist"):
        assert np.array_equal(a.array(name), b.array(name)), name
    assert not (folder / "features" / ".partial").exists()
    with pytest.raises(BadValueError, match="--overwrite"):
        build_stores([folder], cache, model, cfg, progress=False)


def test_a_damaged_partial_chunk_is_named_and_encoded_again(feature_workspace, names, tmp_path, monkeypatch):
    """Issue 30 item 2: a resumed build checks each finished chunk against the checksums its .done record holds."""
    src, folder, cache, model, cfg = _interrupted(feature_workspace, names, tmp_path, monkeypatch)
    vals = folder / "features" / ".partial" / "c000000.vals.npy"
    data = bytearray(vals.read_bytes())
    data[-8:] = bytes(8)  # a float of the payload zeroed: the file still parses
    vals.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match=rf"encoding a damaged feature store chunk again.*{vals}"):
        build_stores([folder], cache, model, cfg, progress=False)
    a, b = FeatureStore(folder), FeatureStore(src)
    for name in ("ex_rows", "ctx_acts", "nb_corr_ids", "token_units", "hist"):
        assert np.array_equal(a.array(name), b.array(name)), name


def test_bad_input_gets_clear_messages(feature_workspace, names, tmp_path, capsys):
    from workbench.cli import main

    store = FeatureStore(feature_workspace / "saes" / "run" / names[0])
    for bad in (-1, store.n_units, "x"):
        with pytest.raises(BadValueError):
            store.unit(bad)
    with pytest.raises(BadValueError, match="no token spelled"):
        store.search_token("zzzz-not-a-word")
    with pytest.raises(BadValueError, match="no feature store"):
        FeatureStore(tmp_path)
    (tmp_path / "features").mkdir()
    (tmp_path / "features" / "manifest.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(DamagedFileError, match="format"):
        FeatureStore(tmp_path)
    with pytest.raises(BadValueError, match="split"):
        FeatureConfig(split="test")
    assert (
        main(["features", "build", str(tmp_path), "--cache", str(feature_workspace / "caches" / "random-synthetic")])
        == 2
    )
    assert "not an SAE folder" in capsys.readouterr().err


@pytest.mark.parametrize("nth_write", [2, 9])  # a chunk file; a file of the finished store
def test_a_full_disk_is_one_line_leaves_nothing_that_looks_valid_and_resumes(
    feature_workspace, names, tmp_path, monkeypatch, capsys, nth_write
):
    """The disk fills while the nth file is written (simulated: the write fails with ENOSPC after half the
    file, as write(2) does): one line naming the cause, no temporary or store file that passes as finished,
    and the rerun finishes the same store."""
    import errno
    from contextlib import contextmanager

    from workbench import atomic
    from workbench.cli import main
    from workbench.features import build

    src = feature_workspace / "saes" / "run" / names[0]
    folder = tmp_path / names[0]
    shutil.copytree(src, folder, ignore=shutil.ignore_patterns("features"))
    real, writes = atomic.atomic_path, []

    @contextmanager
    def disk_fills(path):
        with real(path) as tmp:
            yield tmp
            writes.append(path)
            if len(writes) == nth_write:
                with open(tmp, "r+b") as f:
                    f.truncate(max(1, f.seek(0, 2) // 2))
                raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic, "atomic_path", disk_fills)
    monkeypatch.setattr(build, "atomic_path", disk_fills)
    cache, model = feature_workspace / "caches" / "random-synthetic", str(feature_workspace / "models" / "random")
    argv = ["features", "build", str(folder), "--cache", str(cache), "--model", model, "--quiet"]
    argv += ["--chunk-rows", "1000", "--corr-tokens", "1500", "--workspace", str(tmp_path / "ws")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no space left" in err[0].lower() and "rerun" in err[0], err
    assert len(writes) == nth_write
    assert not list(folder.rglob("*.tmp"))
    with pytest.raises(BadValueError, match="a build was interrupted"):
        FeatureStore(folder)
    monkeypatch.setattr(atomic, "atomic_path", real)
    monkeypatch.setattr(build, "atomic_path", real)
    assert main(argv) == 0
    a, b = FeatureStore(folder), FeatureStore(src)
    for name in ("ex_rows", "ctx_acts", "token_units", "hist"):
        assert np.array_equal(a.array(name), b.array(name)), name


def _copy_sae(feature_workspace, names, tmp_path):
    src = feature_workspace / "saes" / "run" / names[0]
    folder = tmp_path / names[0]
    shutil.copytree(src, folder, ignore=shutil.ignore_patterns("features"))
    cache, model = feature_workspace / "caches" / "random-synthetic", str(feature_workspace / "models" / "random")
    argv = ["--cache", str(cache), "--model", model, "--quiet", "--chunk-rows", "1000", "--corr-tokens", "1500"]
    return src, folder, argv + ["--workspace", str(tmp_path / "ws")]


def test_a_second_build_of_one_store_is_refused_naming_the_first(feature_workspace, names, tmp_path, capsys):
    from tests.test_lock import hold
    from workbench.cli import main

    src, folder, argv = _copy_sae(feature_workspace, names, tmp_path)
    other = hold(folder / "features")  # another process building this store
    try:
        assert main(["features", "build", str(folder), *argv]) == 2
    finally:
        other.stdin.close()
        other.wait()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"being written by another process (pid {other.pid}" in err[0], err
    assert main(["features", "build", str(folder), *argv]) == 0
    assert np.array_equal(FeatureStore(folder).array("hist"), FeatureStore(src).array("hist"))


def test_the_same_sae_twice_builds_one_store(feature_workspace, names, tmp_path, monkeypatch):
    from workbench.cli import main
    from workbench.workspace import Workspace

    src, folder, argv = _copy_sae(feature_workspace, names, tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["features", "build", str(folder), f"./{folder.name}/../{folder.name}", "--overwrite", *argv]) == 0
    assert np.array_equal(FeatureStore(folder).array("hist"), FeatureStore(src).array("hist"))
    [art] = Workspace(tmp_path / "ws").artifacts("features")
    assert art.path.resolve() == (folder / "features").resolve()


def test_a_store_whose_sae_was_replaced_is_refused_naming_both_weights(feature_workspace, names, tmp_path):
    """The SAE beside a store retrained or swapped (other weights, same shapes): opening the store names the weights
    it was built on and the ones there now; the same weights copied elsewhere open as before."""
    sae = shutil.copytree(feature_workspace / "saes" / "run" / names[0], tmp_path / "sae")
    assert FeatureStore(sae).n_units > 0
    was = sha256_file(sae / "sae_weights.safetensors")
    tensors = load_file(sae / "sae_weights.safetensors")
    save_file({k: v * 1.5 for k, v in tensors.items()}, str(sae / "sae_weights.safetensors"))
    now = sha256_file(sae / "sae_weights.safetensors")
    with pytest.raises(BadValueError, match=rf"built on SAE weights {was[:12]}, but .* holds {now[:12]}; rebuild"):
        FeatureStore(sae)


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        "{",
        '{"format": "workbench-feature-store/1"}',
        '{"format": "workbench-feature-store/1", "config": 3, "n_units": 1, "files": {}}',
    ],
)
def test_a_damaged_store_manifest_is_one_error_naming_it(tmp_path, text):
    (tmp_path / "features").mkdir()
    (tmp_path / "features" / "manifest.json").write_text(text)
    with pytest.raises(DamagedFileError, match=rf"^{tmp_path / 'features' / 'manifest.json'}: damaged feature store"):
        FeatureStore(tmp_path)
