import errno
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

from workbench.cache import ActivationCache, harvest, write_array_cache
from workbench.cache import format as fmt
from workbench.cache.shards import check_shard, read_record, shard_dirs
from workbench.errors import BadValueError, DamagedFileError, DiskFullError, MissingInputError, OutputExistsError
from workbench.models import model_id


class Failing:
    """The real corpus, but reading fails after `limit` sequences (a crash mid-harvest)."""

    def __init__(self, inner, limit, finite=False):
        self.inner, self.limit, self.finite = inner, limit, finite
        self.spec, self.label_names = inner.spec, inner.label_names
        self.served = 0

    def sequences(self, ctx_len, start=0, split="train"):
        for s in self.inner.sequences(ctx_len=ctx_len, start=start, split=split):
            if self.served == self.limit:
                if self.finite:
                    return
                raise RuntimeError("corpus read failed")
            self.served += 1
            yield s


def test_manifest_describes_the_cache(clean, model, corpus, hooks, base):
    m = clean.manifest
    assert m["model"] == model_id(model) and m["corpus"] == corpus.spec
    assert m["hooks"] == list(hooks) and m["d"] == {h: 64 for h in hooks} and m["dtype"] == "float16"
    assert m["n_tokens"] == {"train": 2700, "heldout": 300}  # exact, split by heldout_fraction
    assert m["shapes"]["train"]["blocks.0.hook_resid_post"] == [2700, 64]
    assert m["config"]["batch_size"] == base["batch_size"] and m["label_names"] == corpus.label_names
    assert len(m["shards"]["train"]) >= 3 and all(
        set(f) == {"bytes", "xxh3_128"} for r in m["shards"]["train"] for f in r["files"].values()
    )
    assert not (clean.path / "progress.json").exists()


def test_rows_are_the_model_activations_of_the_corpus_tokens(clean, model, corpus, hooks):
    seqs, seq, pos = clean.sequences(), clean.seq_index(), clean.positions()
    for i in (0, 5, len(seqs) - 1):
        np.testing.assert_array_equal(seqs[i], corpus.sequence(i, 32, "train").tokens)
    np.testing.assert_array_equal(clean.token_ids(), seqs[seq, pos])
    assert not np.isin(clean.token_ids(), model.tokenizer.all_special_ids).any()  # BOS/EOS excluded
    np.testing.assert_array_equal(
        clean.labels()["task"],
        np.stack([corpus.sequence(i, 32, "train").labels["task"] for i in range(len(seqs))])[seq, pos],
    )
    _, acts = model.run_with_cache(torch.from_numpy(seqs[:8]), names_filter=list(hooks))
    rows = np.flatnonzero(seq < 8)
    for h in hooks:
        want = acts[h][seq[rows], pos[rows]].half().float()
        torch.testing.assert_close(clean.rows(h, rows), want, atol=2e-3, rtol=2e-3)
    held = clean.sequences("heldout")
    np.testing.assert_array_equal(held[1], corpus.sequence(1, 32, "heldout").tokens)
    assert (clean.doc_ids("heldout") < 0).all()  # held-out documents of the synthetic corpus


def test_stats_are_float64_moments_of_the_train_rows(clean, hooks):
    h = hooks[1]
    x = clean.rows(h, np.arange(clean.n_tokens())).double()
    s = clean.stats(h)
    torch.testing.assert_close(s["mean"].double(), x.mean(0), atol=2e-3, rtol=0)
    torch.testing.assert_close(s["std"].double(), x.std(0, unbiased=False), atol=2e-3, rtol=0)
    assert s["mean_norm"] == pytest.approx(x.norm(dim=1).mean().item(), rel=1e-3)
    assert s["n"] == clean.n_tokens()


@pytest.mark.parametrize("dtype,stored,tol", [("float32", "<f4", 2e-3), ("bfloat16", "<u2", 2e-2)])
def test_dtypes(tmp_path, model, corpus, clean, hooks, base, dtype, stored, tol):
    c = harvest(
        model, corpus, hooks[:1], tmp_path / "c", **{**base, "n_tokens": 500, "heldout_fraction": 0}, dtype=dtype
    )
    assert np.load(c.path / "train" / "s000000" / f"act.{hooks[0]}.npy", mmap_mode="r").dtype == stored
    idx = np.arange(500)
    torch.testing.assert_close(c.rows(hooks[0], idx), clean.rows(hooks[0], idx), atol=tol, rtol=tol)
    assert c.rows(hooks[0], idx, dtype=torch.bfloat16).dtype == torch.bfloat16


def test_keep_special_tokens(tmp_path, model, corpus, hooks, base):
    c = harvest(
        model,
        corpus,
        hooks[:1],
        tmp_path / "c",
        **{**base, "n_tokens": 320, "heldout_fraction": 0},
        exclude_special=False,
    )
    assert c.n_tokens() == 320 and c.positions()[0] == 0
    assert c.token_ids()[0] == model.tokenizer.bos_token_id
    np.testing.assert_array_equal(c.positions(), np.tile(np.arange(32), 10))


def test_outliers_are_flagged_against_the_median_norm(tmp_path, model, corpus, hooks, base):
    c = harvest(model, corpus, hooks[:1], tmp_path / "c", **{**base, "n_tokens": 800}, outlier_factor=1.1)
    h, s = hooks[0], c.manifest["stats"][hooks[0]]
    norms = c.norms(h)
    assert s["outlier_threshold"] == pytest.approx(1.1 * np.median(norms))
    flags = c.outliers(h)
    assert 0 < flags.sum() < len(flags) and s["n_outliers"]["train"] == flags.sum()
    for batch in [next(c.batches(h, 64, skip_outliers=True)), c.rows(h, np.flatnonzero(~flags))]:
        assert (batch.norm(dim=1) <= s["outlier_threshold"] * 1.01).all()


def test_unknown_hook_lists_the_valid_ones(tmp_path, model, corpus, base):
    with pytest.raises(BadValueError, match=r"'blocks\.7\.hook_resid_post'.*blocks\.\{0\.\.1\}\.hook_resid_post"):
        harvest(model, corpus, ["blocks.7.hook_resid_post"], tmp_path / "c", **base)
    with pytest.raises(BadValueError, match="is an attention pattern, not one row per token"):
        harvest(model, corpus, ["blocks.0.attn.hook_pattern"], tmp_path / "c", **base)
    with pytest.raises(
        BadValueError, match=r"'blocks\.0\.hook_resid_psot': did you mean 'blocks\.0\.hook_resid_post'"
    ) as e:
        harvest(model, corpus, ["blocks.0.hook_resid_psot"], tmp_path / "c", **base)
    assert "attention pattern" not in str(e.value)
    assert not (tmp_path / "c").exists()


def test_output_under_a_file_is_named(tmp_path, model, corpus, hooks, base):

    (tmp_path / "afile").write_text("x")
    with pytest.raises(BadValueError, match=f"cache folder {tmp_path}/afile/c cannot be created: .*afile is a file"):
        harvest(model, corpus, hooks, tmp_path / "afile" / "c", **base)


def test_shard_tokens_zero_is_refused_not_taken_as_the_default(tmp_path, model, corpus, hooks, base):
    with pytest.raises(ValueError, match=r"shard_tokens=0 must be an integer >= 1 \(or None\)"):
        harvest(model, corpus, hooks, tmp_path / "c", **{**base, "shard_tokens": 0})
    assert not (tmp_path / "c").exists()


def test_a_corpus_of_unknown_words_is_refused_and_leaves_no_folder(tmp_path, model, corpus, hooks, base):
    """Words outside a word-level vocabulary become <unk>: most rows would be dropped or meaningless."""
    from workbench.corpus import load_corpus

    words = [w for w in model.tokenizer.get_vocab() if w.isalpha()][:20]
    text = tmp_path / "t.txt"
    docs = [" ".join(f"zq{i}{j}" for j in range(30)) + " " + " ".join(words[:3]) for i in range(200)]
    text.write_text("\n\n".join(docs))
    files = load_corpus(str(text), model.tokenizer)
    out = tmp_path / "c"
    with pytest.raises(
        DamagedFileError, match=r"\(9\d%\) are unknown to the model's tokenizer .*--max-unknown-fraction 1"
    ):
        harvest(model, files, hooks[:1], out, **base)
    assert not out.exists()  # the identical command can run again
    out.mkdir()
    with pytest.raises(DamagedFileError, match="max_unknown_fraction=0.05"):
        harvest(model, files, hooks[:1], out, **base)
    assert out.is_dir() and not any(out.iterdir())
    c = harvest(model, files, hooks[:1], out, **{**base, "n_tokens": 300}, max_unknown_fraction=1.0)
    assert c.manifest["unknown_fraction"] == pytest.approx(30 / 33, abs=0.02)


def test_a_tokenizer_whose_eos_lies_past_the_embedding_is_refused_up_front(tmp_path, model, hooks, base):
    """A file corpus read with a tokenizer that has one more (EOS) token than the model's embedding: refused
    before any work, naming the id and the vocabulary size (it crashed with an IndexError mid-harvest)."""
    import copy

    from workbench.corpus import load_corpus

    tok = copy.deepcopy(model.tokenizer)
    tok.add_special_tokens({"eos_token": "<eos_extra>"})
    eos, n = tok.eos_token_id, model.cfg.d_vocab
    assert eos == n
    words = [w for w in model.tokenizer.get_vocab() if w.isalpha()][:20]
    (tmp_path / "t.txt").write_text("\n\n".join(" ".join(words) for _ in range(50)))
    out = tmp_path / "c"
    with pytest.raises(
        BadValueError, match=rf"EOS token id {eos} lies past the model's embedding \(vocabulary size {n}"
    ):
        harvest(model, load_corpus(str(tmp_path / "t.txt"), tok), hooks[:1], out, **base)
    assert not out.exists()


def test_existing_output_folder_is_refused_unless_resume_or_overwrite(tmp_path, model, corpus, clean, hooks, base):
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(OutputExistsError, match="--overwrite"):
        harvest(model, corpus, hooks, other, **base)
    with pytest.raises(OutputExistsError, match="refusing to delete"):
        harvest(model, corpus, hooks, other, **base, overwrite=True)
    assert (other / "notes.txt").read_text() == "keep me"
    with pytest.raises(OutputExistsError, match="--resume"):
        harvest(model, corpus, hooks, clean.path, **base)
    before = (clean.path / "manifest.json").read_text()
    assert harvest(model, corpus, hooks, clean.path, **base, resume=True).manifest == clean.manifest
    assert (clean.path / "manifest.json").read_text() == before
    small = harvest(model, corpus, hooks[:1], tmp_path / "c", **{**base, "n_tokens": 200})
    replaced = harvest(model, corpus, hooks[1:], small.path, **{**base, "n_tokens": 300}, overwrite=True)
    assert replaced.hooks == list(hooks[1:]) and replaced.n_tokens() + replaced.n_tokens("heldout") == 300


def test_resume_after_a_crash_equals_a_clean_run(tmp_path, model, corpus, clean, hooks, base, same_cache):
    out = tmp_path / "c"
    with pytest.raises(RuntimeError, match="corpus read failed"):
        harvest(model, Failing(corpus, limit=60), hooks, out, **base)
    done = shard_dirs(out / "train")
    assert len(done) == 2 and not list((out / "train").glob("*.tmp"))  # the partial shard was removed
    for d in done:
        check_shard(d, read_record(d)["files"], full=True)
    with pytest.raises(MissingInputError, match="--resume"):
        ActivationCache.open(out)
    with pytest.raises(DamagedFileError, match="dtype: 'float16' on disk vs 'float32' requested"):
        harvest(model, corpus, hooks, out, **base, dtype="float32", resume=True)
    same_cache(clean, harvest(model, corpus, hooks, out, **base, resume=True))


def test_resume_after_sigkill_equals_a_clean_run(tmp_path, model_dir, model, corpus, clean, hooks, base, same_cache):
    out = tmp_path / "c"
    script = textwrap.dedent(f"""
        import time
        from workbench.cache import harvest
        from workbench.corpus import SyntheticCorpus
        from workbench.models import load

        class Slow(SyntheticCorpus):  # same sequences, slower, so the kill lands mid-harvest
            def sequence(self, i, ctx_len, split="train"):
                time.sleep(0.05)
                return super().sequence(i, ctx_len, split)

        model, tok = load({str(model_dir)!r}, device="cpu")
        harvest(model, Slow(tok, seed=0), {hooks!r}, {str(out)!r}, **{base!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 120
    while not (out / "train" / "s000001").exists():
        assert proc.poll() is None, "the harvest ended before it could be killed"
        assert time.monotonic() < deadline, "no shard appeared in 120 s"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "manifest.json").exists()
    same_cache(clean, harvest(model, corpus, hooks, out, **base, resume=True))


def test_disk_full_keeps_complete_shards_and_resumes(
    tmp_path, monkeypatch, model, corpus, clean, hooks, base, same_cache
):
    out, budget, real = tmp_path / "c", [700_000], fmt._write

    def write(fd, data):
        if data.nbytes > budget[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        budget[0] -= data.nbytes
        real(fd, data)

    monkeypatch.setattr(fmt, "_write", write)
    with pytest.raises(DiskFullError, match="complete shards there are valid.*--resume") as e:
        harvest(model, corpus, hooks, out, **base)
    assert e.value.errno == errno.ENOSPC
    monkeypatch.undo()
    done = shard_dirs(out / "train")
    assert done and not list((out / "train").glob("*.tmp"))
    for d in done:
        check_shard(d, read_record(d)["files"], full=True)
    same_cache(clean, harvest(model, corpus, hooks, out, **base, resume=True))


def test_a_finite_corpus_that_runs_out_gives_a_smaller_cache(tmp_path, model, corpus, hooks, base, capsys):
    short = Failing(corpus, limit=20, finite=True)
    c = harvest(model, short, hooks[:1], tmp_path / "c", **{**base, "heldout_fraction": 0})
    err = capsys.readouterr().err  # one notice line, no line of the workbench's source under it
    assert "ran out after" in err and len([x for x in err.splitlines() if x.strip()]) == 1
    assert 0 < c.n_tokens() < 3000 and len(c.sequences()) == 20
    assert (
        harvest(model, short, hooks[:1], tmp_path / "c", **{**base, "heldout_fraction": 0}, resume=True).manifest
        == c.manifest
    )


# --- write_array_cache: a cache from rows no model made --------------------------------------------


def _gaussian_rows(split, start, n):
    """Deterministic in (split, start): what write_array_cache requires of its source."""
    return np.random.default_rng([start, split == "heldout"]).standard_normal((n, 6)).astype(np.float32)


ARRAY = dict(source="gaussian-test", heldout_fraction=0.2, block_rows=64, shard_tokens=200, progress=False)


def test_array_cache_holds_the_rows_and_their_stats(tmp_path):
    c = write_array_cache(tmp_path / "c", _gaussian_rows, "x", 6, 1000, **ARRAY)
    assert (c.n_tokens("train"), c.n_tokens("heldout"), c.d("x")) == (800, 200, 6)
    assert c.manifest["model"] == "gaussian-test" and len(c.manifest["shards"]["train"]) == 4
    want = np.concatenate([_gaussian_rows("train", a, min(64, 800 - a)) for a in range(0, 800, 64)])
    np.testing.assert_array_equal(c.rows("x", np.arange(800)).numpy(), want)
    np.testing.assert_array_equal(
        c.rows("x", [0, 199], split="heldout").numpy()[1], _gaussian_rows("heldout", 192, 8)[7]
    )
    np.testing.assert_allclose(c.stats("x")["mean"].numpy(), want.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c.norms("x"), np.linalg.norm(want, axis=1), rtol=1e-6)
    assert (c.seq_index() == np.arange(800)).all() and c.labels() == {} and c.verify() > 0


def test_array_cache_trains_an_sae(tmp_path):
    """The point of the writer: the workbench's own trainer reads it like a harvest."""
    from workbench.sae import SAEConfig, TrainConfig, train

    c = write_array_cache(tmp_path / "c", _gaussian_rows, "x", 6, 1000, **ARRAY)
    [folder] = train(
        c.path, "x", [SAEConfig("topk", k=2, n_latents=12)], TrainConfig(512, 128, progress=False), tmp_path / "s"
    )
    assert (folder / "sae_weights.safetensors").is_file()


def test_array_cache_resume_after_a_crash_equals_a_clean_write(tmp_path, same_cache):
    clean = write_array_cache(tmp_path / "clean", _gaussian_rows, "x", 6, 1000, **ARRAY)
    calls = []

    def crashing(split, start, n):
        calls.append(start)
        if len(calls) == 9:  # after two complete train shards
            raise RuntimeError("source failed")
        return _gaussian_rows(split, start, n)

    with pytest.raises(RuntimeError, match="source failed"):
        write_array_cache(tmp_path / "c", crashing, "x", 6, 1000, **ARRAY)
    assert len(shard_dirs(tmp_path / "c" / "train")) == 2
    with pytest.raises(DamagedFileError, match="harvested with another config"):
        write_array_cache(tmp_path / "c", _gaussian_rows, "x", 6, 1000, **{**ARRAY, "source": "other"}, resume=True)
    same_cache(clean, write_array_cache(tmp_path / "c", _gaussian_rows, "x", 6, 1000, **ARRAY, resume=True))


def test_array_cache_refuses_rows_of_the_wrong_shape_and_leaves_no_folder(tmp_path):
    with pytest.raises(BadValueError, match=r"rows\('train', 0, 64\) returned a float32 array of shape \(64, 5\)"):
        write_array_cache(tmp_path / "c", lambda s, a, n: np.zeros((n, 5), np.float32), "x", 6, 1000, **ARRAY)
    assert not (tmp_path / "c").exists()
