import json
import shutil

import numpy as np
import pytest
import torch

from workbench.cache import ActivationCache
from workbench.cache.reader import WINDOW_BYTES
from workbench.cache.sampler import RowSampler
from workbench.errors import BadValueError, DamagedFileError, MissingInputError


@pytest.fixture
def copy(clean, tmp_path):
    """A throwaway copy of the clean cache, to damage."""
    return ActivationCache.open(shutil.copytree(clean.path, tmp_path / "copy"))


def _act_file(cache, shard=1, hook="blocks.1.hook_resid_post"):
    return cache.path / "train" / f"s{shard:06d}" / f"act.{hook}.npy"


def test_rows_returns_the_stored_rows_in_the_order_asked(clean, hooks):
    h = hooks[0]
    stored = np.concatenate(
        [np.load(clean.path / "train" / r["name"] / f"act.{h}.npy") for r in clean.manifest["shards"]["train"]]
    ).astype(np.float32)
    idx = np.array([2699, 0, 1234, 0, 700, 699])  # unsorted, repeated, across shards
    np.testing.assert_array_equal(clean.rows(h, idx).numpy(), stored[idx])
    assert clean.rows(h, idx % 300, split="heldout").shape == (6, 64)
    with pytest.raises(IndexError, match=r"\[0, 2700\)"):
        clean.rows(h, [2700])


def test_batches_are_shuffled_deterministic_and_resumable(clean, hooks):
    h = hooks[0]
    first = [b for _, b in zip(range(30), clean.batches(h, 256, seed=3))]  # > 10 batches per epoch: crosses epochs
    assert all(b.shape == (256, 64) and b.dtype == torch.float32 for b in first)
    again = [b for _, b in zip(range(5), clean.batches(h, 256, seed=3, start_batch=25))]
    for a, b in zip(first[25:], again):
        assert torch.equal(a, b)
    other = next(clean.batches(h, 256, seed=4))
    assert not torch.equal(first[0], other)
    assert next(clean.batches(h, 8, dtype=torch.float16)).dtype == torch.float16
    assert next(clean.batches(h, 16, split="heldout")).shape == (16, 64)


def test_batches_read_the_rows_the_sampler_picks(clean, hooks):
    """Which rows (disjoint per rank, shuffled) is tested on RowSampler; here: batches deliver them."""
    h = hooks[2]
    sampler = RowSampler(clean.n_tokens(), 128, seed=3, rank=1, world_size=2)
    for _, idx, batch in zip(range(3), sampler.batches(), clean.batches(h, 128, seed=3, rank=1, world_size=2)):
        assert torch.equal(batch, clean.rows(h, idx))


def test_batches_of_several_hooks_hold_their_rows_side_by_side(clean, hooks):
    """What a transcoder trains on: one sampler, every hook's row of the same token in one batch row."""
    sampler = RowSampler(clean.n_tokens(), 128, seed=3, window_rows=WINDOW_BYTES // (2 * 64 * clean._store.itemsize))
    both = clean.batches([hooks[0], hooks[2]], 128, seed=3)
    for _, idx, batch in zip(range(3), sampler.batches(), both):
        assert batch.shape == (128, 128)
        assert torch.equal(batch[:, :64], clean.rows(hooks[0], idx)) and torch.equal(
            batch[:, 64:], clean.rows(hooks[2], idx)
        )


def test_metadata_columns_align_with_rows(clean):
    for split in ("train", "heldout"):
        n = clean.n_tokens(split)
        cols = [
            clean.token_ids(split),
            clean.positions(split),
            clean.seq_index(split),
            clean.doc_ids(split),
            *clean.labels(split).values(),
        ]
        assert all(len(c) == n for c in cols)
    assert set(clean.labels()) == {"task", "role", "entity"}


def test_open_checks_model_and_hooks(clean, model, hooks):
    assert ActivationCache.open(clean.path, model=model, hooks=hooks[:2]).hooks == list(hooks)
    with pytest.raises(DamagedFileError, match="harvested from model .* not the requested 'gpt2@0123'"):
        ActivationCache.open(clean.path, model="gpt2@0123")
    with pytest.raises(DamagedFileError, match="no hook.* blocks.1.hook_mlp_out; it holds: blocks.0.hook_resid_post"):
        ActivationCache.open(clean.path, hooks=["blocks.1.hook_mlp_out"])
    with pytest.raises(MissingInputError, match="no activation cache"):
        ActivationCache.open(clean.path / "train")


def test_unknown_hook_on_read_lists_the_cached_ones(clean):
    for call in (
        lambda: clean.batches("blocks.1.hook_mlp_out", 8),
        lambda: clean.stats("x"),
        lambda: clean.rows("x", [0]),
        lambda: clean.d("x"),
    ):
        with pytest.raises(BadValueError, match="it holds: blocks.0.hook_resid_post, blocks.1.hook_resid_post"):
            call()
    with pytest.raises(ValueError, match="unknown split 'test'"):
        clean.n_tokens("test")


def test_truncated_shard_is_named_at_open(copy):
    path = _act_file(copy)
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 100)
    with pytest.raises(DamagedFileError, match=f"truncated .*{path}"):
        ActivationCache.open(copy.path)


def test_corrupted_shard_is_named_by_its_checksum(copy):
    path = _act_file(copy, shard=2)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    cache = ActivationCache.open(copy.path)  # same size: open stays cheap and does not notice ...
    cache.rows("blocks.1.hook_resid_post", [0])  # ... nor does reading another shard ...
    with pytest.raises(DamagedFileError, match=f"corrupted cache file {path}"):  # ... but reading this one does
        next(cache.batches("blocks.1.hook_resid_post", 256))
    with pytest.raises(DamagedFileError, match=f"1 of .* files .* damaged: corrupted cache file {path}"):
        copy.verify()
    with pytest.raises(DamagedFileError, match=f"corrupted cache file {path}"):
        ActivationCache.open(copy.path, verify=True)


def _edit_manifest(cache, edit):
    path = cache.path / "manifest.json"
    m = json.loads(path.read_text())
    edit(m)
    path.write_text(json.dumps(m))


def test_manifest_width_that_disagrees_with_the_file_header_is_refused_on_read(copy):
    h = "blocks.0.hook_resid_post"
    _edit_manifest(copy, lambda m: m["d"].update({h: 32}))  # half the real width: rows would be garbage
    cache = ActivationCache.open(copy.path)
    with pytest.raises(
        DamagedFileError, match=r"holds float16 \(\d+, 64\), but the manifest records float16 \(\d+, 32\)"
    ):
        cache.rows(h, [0])
    with pytest.raises(DamagedFileError, match="damaged"):
        cache.verify()


@pytest.mark.parametrize("name", ["../../outside", "/tmp/s000000", "s000009"])
def test_manifest_shard_names_outside_the_cache_are_refused(copy, name):
    _edit_manifest(copy, lambda m: m["shards"]["train"][0].update(name=name))
    with pytest.raises(DamagedFileError, match=f"named {name!r}, expected 's000000'"):
        ActivationCache.open(copy.path)


def test_manifest_of_the_wrong_json_type_is_named(copy):
    (copy.path / "manifest.json").write_text("[1, 2]")
    with pytest.raises(DamagedFileError, match="manifest.json has format None"):
        ActivationCache.open(copy.path)


def test_cache_verify_command(copy, capsys):
    from workbench.cli import main

    assert main(["cache", "verify", str(copy.path)]) == 0
    assert "match their checksums" in capsys.readouterr().out
    path = _act_file(copy, shard=0, hook="blocks.0.hook_mlp_out")
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    assert main(["cache", "verify", str(copy.path)]) == 2
    err = capsys.readouterr().err
    assert f"corrupted cache file {path}" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m.pop("config"),
        lambda m: m.pop("shards"),
        lambda m: m.update(shards=[]),
        lambda m: m.update(stats={"blocks.0.hook_resid_post": 3}),
        lambda m: m.update(config="x"),
    ],
)
def test_a_manifest_missing_a_part_or_of_the_wrong_shape_is_one_line(copy, edit, capsys):
    from workbench.cli import main

    _edit_manifest(copy, edit)
    with pytest.raises(DamagedFileError, match="manifest.json is not a manifest a harvest writes"):
        ActivationCache.open(copy.path)
    assert main(["cache", "verify", str(copy.path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "re-harvest" in err[0]
