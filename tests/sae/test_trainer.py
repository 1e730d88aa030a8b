"""The training loop: one stream for several SAEs, exact resume after a crash, bad-data handling."""

import json
import math

import pytest
import torch

from workbench import checkpoint
from workbench.errors import ConfigError, DamagedFileError
from workbench.sae.config import SAEConfig, TrainConfig
from workbench.sae.trainer import NonFiniteError, Trainer, fit, run_steps
from workbench.schedule import lr_factor

from .conftest import D_IN, feature_batches

CFGS = [
    SAEConfig("topk", k=4, n_latents=64, dead_tokens=2000),
    SAEConfig("batchtopk", k=4, n_latents=64),
    SAEConfig("block_topk", n_latents=48, block_size=3, n_active_blocks=2, scaffold_rank=2),
]


def _tc(**kw):
    return TrainConfig(
        **{
            "n_tokens": 128 * 40,
            "batch_size": 128,
            "lr": 2e-3,
            "warmup_steps": 5,
            "checkpoint_every": 10,
            "log_every": 5,
            "progress": False,
            **kw,
        }
    )


class Crash(Exception):
    pass


def crashing(after: int):
    """A batch source that dies once `after` batches have been served (a kill mid-run)."""

    def make(start, rank, world):
        for i, x in enumerate(feature_batches(start, rank, world)):
            if start + i >= after:
                raise Crash
            yield x

    return make


def _weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "sae_weights.safetensors"))


def test_resume_after_a_crash_is_exact(tmp_path):
    full = fit(CFGS, _tc(), feature_batches, D_IN, tmp_path / "full")
    with pytest.raises(Crash):
        fit(CFGS, _tc(), crashing(after=27), D_IN, tmp_path / "resumed")  # checkpoint at 20 survives
    state = checkpoint.read(tmp_path / "resumed" / "checkpoint.pt")
    assert state["trainer"]["step"] == 20
    resumed = fit(CFGS, _tc(), feature_batches, D_IN, tmp_path / "resumed", resume=True)
    for a, b in zip(full, resumed):
        wa, wb = _weights(a), _weights(b)
        assert wa.keys() == wb.keys()
        for k in wa:
            assert torch.equal(wa[k], wb[k]), f"{a.name}: {k} differs after resume"
        assert (a / "curves.jsonl").read_text() == (b / "curves.jsonl").read_text()
        assert json.loads((a / "cfg.json").read_text()) == json.loads((b / "cfg.json").read_text())


def test_one_stream_many_saes_and_curves(tmp_path):
    folders = fit(CFGS, _tc(n_tokens=128 * 20), feature_batches, D_IN, tmp_path)
    assert [f.name for f in folders] == [c.resolve(D_IN, 128 * 20).name for c in CFGS]
    for f in folders:
        rows = [json.loads(line) for line in (f / "curves.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == [5, 10, 15, 20]
        for key in ("loss", "fvu", "l0", "dead_frac", "dense_frac", "lr"):
            assert all(math.isfinite(r[key]) for r in rows), key
        info = json.loads((f / "workbench.json").read_text())
        assert info["tokens_seen"] == 128 * 20 and info["sae_config"]["d_in"] == D_IN
    assert "block_l0" in rows[-1]


def test_dead_latents_are_counted_by_tokens_since_last_fire():
    cfg = SAEConfig("topk", k=2, n_latents=64, dead_tokens=256).resolve(D_IN)
    tr = Trainer([cfg], _tc())
    x = next(feature_batches())
    tr.initialise(x)
    with torch.no_grad():  # latent 0 can never fire: hugely negative bias
        tr.saes[0].b_enc[0] = -1e6
    for _ in range(3):
        tr.train_step(x)
    assert int(tr.since_fired[0][0]) == 3 * 128
    assert bool(tr.since_fired[0][0] >= cfg.dead_tokens)
    tr.log_point()
    assert tr.curves[0][-1]["n_dead"] >= 1


def test_lr_schedule_warms_up_and_decays_to_zero():
    tc = TrainConfig(n_tokens=100 * 10, batch_size=10, warmup_steps=10, decay_frac=0.2)
    f = [lr_factor(i, tc.warmup_steps, tc.n_steps, tc.decay_frac) for i in range(100)]
    assert f[0] == pytest.approx(0.1) and f[9] == 1.0 and f[50] == 1.0
    assert f[80] == 1.0 and f[99] == pytest.approx(1 / 20)
    assert all(a >= b for a, b in zip(f[80:], f[81:]))


def _poisoned(bad_step):
    def make(start, rank, world):
        for i, x in enumerate(feature_batches(start, rank, world)):
            if start + i == bad_step:
                x = x.clone()
                x[3, 5] = float("nan")
            yield x

    return make


def test_nonfinite_batch_is_skipped_and_counted(tmp_path):
    folders = fit(CFGS[:1], _tc(n_tokens=128 * 12), _poisoned(7), D_IN, tmp_path)
    info = json.loads((folders[0] / "workbench.json").read_text())
    assert info["skipped_batches"] == [7]
    assert info["tokens_seen"] == 128 * 11
    assert all(torch.isfinite(v).all() for v in _weights(folders[0]).values())


def test_nonfinite_batch_stops_with_the_step_and_keeps_the_checkpoint(tmp_path):
    with pytest.raises(NonFiniteError, match="step 13"):
        fit(CFGS[:1], _tc(on_nonfinite="stop"), _poisoned(13), D_IN, tmp_path)
    state = checkpoint.read(tmp_path / "checkpoint.pt")  # the step-10 checkpoint is intact
    assert state["trainer"]["step"] == 10


def test_resume_with_a_different_config_is_refused(tmp_path):
    fit(CFGS[:1], _tc(n_tokens=128 * 10), feature_batches, D_IN, tmp_path)
    other = [SAEConfig("topk", k=8, n_latents=64, dead_tokens=2000)]
    with pytest.raises(DamagedFileError, match="k: checkpoint 4 != now 8"):
        fit(other, _tc(n_tokens=128 * 10), feature_batches, D_IN, tmp_path, resume=True)
    with pytest.raises(DamagedFileError, match="lr"):
        fit(CFGS[:1], _tc(n_tokens=128 * 10, lr=1e-2), feature_batches, D_IN, tmp_path, resume=True)


def test_corrupted_checkpoint_is_refused(tmp_path):
    fit(CFGS[:1], _tc(n_tokens=128 * 10), feature_batches, D_IN, tmp_path)
    path = tmp_path / "checkpoint.pt"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte inside a tensor: torch.load would not notice
    path.write_bytes(bytes(data))
    with pytest.raises(DamagedFileError, match="corrupted"):
        fit(CFGS[:1], _tc(n_tokens=128 * 10), feature_batches, D_IN, tmp_path, resume=True)
    path.write_bytes(b"garbage")
    with pytest.raises(DamagedFileError, match="not a workbench checkpoint"):
        checkpoint.read(path)


def test_existing_run_is_not_overwritten_and_missing_resume_is_an_error(tmp_path):
    with pytest.raises(DamagedFileError, match="does not exist"):
        fit(CFGS[:1], _tc(), feature_batches, D_IN, tmp_path, resume=True)
    fit(CFGS[:1], _tc(n_tokens=128 * 5), feature_batches, D_IN, tmp_path)
    with pytest.raises(DamagedFileError, match="already holds a run"):
        fit(CFGS[:1], _tc(n_tokens=128 * 5), feature_batches, D_IN, tmp_path)


def test_duplicate_names_are_refused():
    cfg = SAEConfig("topk", k=4, n_latents=64).resolve(D_IN)
    with pytest.raises(ConfigError, match="unique"):
        Trainer([cfg, cfg], _tc())


def test_run_steps_is_a_plain_benchmark_entry_point():
    tr = Trainer(
        [SAEConfig("topk", k=4, n_latents=64), SAEConfig("topk", k=4, n_latents=64, kernel="dense")], _tc(), d_in=D_IN
    )
    xs = [next(feature_batches(i)) for i in range(3)]
    run_steps(tr, xs, 3)
    assert tr.step == 3 and tr.tokens == 3 * 128
    a, b = tr.saes  # the sparse and dense kernels train to the same weights
    torch.testing.assert_close(a.W_dec, b.W_dec, atol=1e-5, rtol=1e-4)


def test_divergence_stops_with_the_step_and_saves_nothing(tmp_path):
    with pytest.raises(NonFiniteError, match=r"diverged: mean FVU .* over steps 0\.\.5 .*lower the learning rate"):
        fit([SAEConfig("topk", k=4, n_latents=64)], _tc(lr=1e6), feature_batches, D_IN, tmp_path)
    assert not any(p.name.startswith("topk") for p in tmp_path.iterdir()) and not (tmp_path / "checkpoint.pt").exists()
