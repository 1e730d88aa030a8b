"""The public API on a real activation cache: train, evaluate, the example script, torchrun + DDP."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from workbench.errors import ConfigError
from workbench.sae import SAEConfig, TrainConfig, evaluate, load_sae, train

from .conftest import HOOK

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "train_sae.py"


def _tc(**kw):
    return TrainConfig(
        **{"n_tokens": 256 * 30, "batch_size": 256, "lr": 1e-3, "log_every": 10, "progress": False, **kw}
    )


def test_train_and_evaluate_from_the_cache(tiny_cache, tmp_path):
    cache, model = tiny_cache
    cfgs = [
        SAEConfig("topk", k=8, expansion=2),
        SAEConfig("block_topk", n_latents=255, block_size=3, n_active_blocks=3, scaffold_rank=4),
    ]
    folders = train(cache, HOOK, cfgs, _tc(), tmp_path)
    for folder in folders:
        assert load_sae(folder).cfg.metadata.hook_name == HOOK
        m = evaluate(folder, cache, str(model), n_sequences=4, max_tokens=500)
        assert json.loads((folder / "metrics.json").read_text()) == m
        r = m["reconstruction"]
        assert 0 < r["fvu"] < 1 and r["l0"] > 0 and r["dense_tau"] == 0.1
        s = m["splice"]
        # random-init model: zero ablation need not hurt it, so only the bookkeeping is checked here
        assert math.isfinite(s["ce_zero_ablation"]) and math.isfinite(s["ce_loss_recovered"])
        assert math.isfinite(s["kl_score"])
        assert set(m["probing"]) >= {"task", "role", "mean_k1"}
        assert m["absorption"]["n_main"] == 1
        assert m["description_length"]["bits_per_token"] > 0
    block = evaluate(folders[1], cache, str(model), n_sequences=4, max_tokens=500)
    assert block["reconstruction"]["block_l0"] == pytest.approx(3.0)
    assert "ce_no_scaffold" in block["splice"]


@pytest.mark.parametrize("arch", ["jumprelu", "gated", "standard"])
def test_penalised_saes_learn_from_the_cache_and_load_in_sae_lens(tiny_cache, tmp_path, arch):
    cache, _ = tiny_cache
    (folder,) = train(cache, HOOK, [SAEConfig(arch, expansion=2, target_l0=8.0)], _tc(), tmp_path)
    fvu = [json.loads(line)["fvu"] for line in (folder / "curves.jsonl").read_text().splitlines()]
    assert fvu[-1] < fvu[0], fvu
    assert load_sae(folder).cfg.architecture() == arch
    r = evaluate(folder, cache, None, max_tokens=500)["reconstruction"]
    assert 0 < r["fvu"] < 1 and r["l0"] > 0


def test_bad_hook_and_width_are_refused(tiny_cache, tmp_path):
    cache, _ = tiny_cache
    with pytest.raises(ConfigError, match="blocks.9.hook_resid_post"):
        train(cache, "blocks.9.hook_resid_post", [SAEConfig("topk")], _tc(), tmp_path)
    with pytest.raises(ConfigError, match="d_in=64 but hook 'blocks.2.hook_resid_post'.*width 128"):
        train(cache, HOOK, [SAEConfig("topk", d_in=64)], _tc(), tmp_path)


def _run(cmd, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def _example_args(cache, model, out):
    return [
        str(EXAMPLE),
        "--cache",
        str(cache),
        "--out",
        str(out),
        "--model",
        str(model),
        "--k",
        "8",
        "--expansion",
        "2",
        "--n-tokens",
        str(256 * 20),
        "--batch-size",
        "256",
    ]


@pytest.mark.slow
def test_example_script_runs(tiny_cache, tmp_path):
    cache, model = tiny_cache
    rows = _run([sys.executable, *_example_args(cache, model, tmp_path / "out")], tmp_path)
    assert len(rows) == 2 and all(0 < r["fvu"] < 1 for r in rows)


@pytest.mark.slow
def test_example_script_under_torchrun_with_two_processes(tiny_cache, tmp_path):
    cache, model = tiny_cache
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        *_example_args(cache, model, tmp_path / "ddp"),
    ]
    rows = _run(cmd, tmp_path)
    assert len(rows) == 2  # only rank 0 evaluates and prints
    for folder in sorted((tmp_path / "ddp").iterdir()):
        if folder.is_dir():
            info = json.loads((folder / "workbench.json").read_text())
            assert info["world_size"] == 2 and info["tokens_seen"] == 256 * 20
            weights = load_sae(folder).state_dict()
            assert all(torch.isfinite(v).all() for v in weights.values())
