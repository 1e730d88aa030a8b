"""`workbench model train`: refuses to overwrite, validates its config, resumes to the same weights."""

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from workbench import checkpoint
from workbench.cli import main
from workbench.errors import ConfigError
from workbench.models import EMBEDDED, load, toy
from workbench.models.toy import TinyConfig, train_tiny

SMALL = dict(
    n_layers=1,
    d_model=16,
    n_heads=2,
    d_mlp=32,
    n_ctx=32,
    steps=4,
    batch_size=2,
    warmup=1,
    eval_queries=2,
    checkpoint_every=2,
)


def test_trains_a_loadable_model_with_a_card(tmp_path):
    card = train_tiny(tmp_path / "m", TinyConfig(**SMALL), progress=False)
    model, _ = load(str(tmp_path / "m"), device="cpu")
    assert model.cfg.n_ctx == 32 and not (tmp_path / "m" / toy.CHECKPOINT).exists()
    assert set(card["heldout_task_accuracy"]) >= {"ioi", "induction", "greater_than", "addition", "facts"}
    assert len(card["head_detector"]["induction_head"]) == 1  # one layer of scores
    assert np.shape(card["own_head_scores"]["induction"]) == (1, 2)  # and the workbench's own, per head
    card_text = (tmp_path / "m" / "README.md").read_text()
    assert "Verbatim-overlap audit" in card_text and card_text.startswith("# workbench-m\n")
    assert "the workbench's own scores" in card_text and "own_head_scores" not in card_text  # a table, not JSON
    assert model.cfg.model_name == "workbench-m"  # named by its folder, not "tiny" whatever its shape
    # the card's command reproduces the run: every non-default flag, and nothing else
    assert card["train_command"] == (
        "workbench model train --out DIR --n-layers 1 --d-model 16 --n-heads 2 --d-mlp 32 --n-ctx 32 "
        "--steps 4 --batch-size 2 --warmup 1 --eval-queries 2 --checkpoint-every 2"
    )
    assert f"{4 * 2 * 32:,} training tokens" in card_text and "nan" not in card_text
    assert 0 < card["cpu_seconds"] and "CPU hours (process CPU time)" in card_text


def test_resume_after_interruption_gives_the_same_weights(tmp_path, monkeypatch):
    train_tiny(tmp_path / "straight", TinyConfig(**SMALL), progress=False)
    save = toy._save_checkpoint

    def save_then_die(*args):
        save(*args)
        raise KeyboardInterrupt  # as if killed right after the step-2 checkpoint

    monkeypatch.setattr(toy, "_save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train_tiny(tmp_path / "cut", TinyConfig(**SMALL), progress=False)
    monkeypatch.setattr(toy, "_save_checkpoint", save)
    assert not (tmp_path / "cut" / "model.safetensors").exists()
    state = checkpoint.read(tmp_path / "cut" / toy.CHECKPOINT)
    del state["cpu_seconds"]  # a checkpoint written before CPU time was recorded
    checkpoint.write(tmp_path / "cut" / toy.CHECKPOINT, state)
    card = train_tiny(tmp_path / "cut", TinyConfig(**SMALL), progress=False, resume=True)
    assert "cpu_seconds" not in card  # unknown, not the resumed part alone
    assert "CPU hours (CPU time not recorded)" in (tmp_path / "cut" / "README.md").read_text()
    a, b = (load_file(str(tmp_path / d / "model.safetensors")) for d in ("straight", "cut"))
    for k in a:
        torch.testing.assert_close(a[k], b[k])
    with pytest.raises(ConfigError, match="another config"):
        (tmp_path / "cut2").mkdir()
        checkpoint.write(tmp_path / "cut2" / toy.CHECKPOINT, {"config": {**toy.asdict(TinyConfig(**SMALL)), "seed": 9}})
        train_tiny(tmp_path / "cut2", TinyConfig(**SMALL), progress=False, resume=True)


def test_refuses_non_empty_output_and_names_the_shipped_model(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README.md").write_text("mine")
    assert main(["model", "train", "--out", str(tmp_path / "notes"), "--steps", "2", "--warmup", "0", "--quiet"]) == 2
    assert "is not empty; pass --overwrite" in capsys.readouterr().err
    assert (tmp_path / "notes" / "README.md").read_text() == "mine"
    assert main(["model", "train", "--out", str(EMBEDDED["tiny"]), "--quiet"]) == 2
    assert "the shipped embedded model" in capsys.readouterr().err
    # without --out the model goes into the workspace, never into the shipped folder
    small = [f"--{k.replace('_', '-')}={v}" for k, v in SMALL.items()]
    assert main(["model", "train", "--workspace", str(tmp_path / "ws"), "--quiet", *small]) == 0
    assert (tmp_path / "ws" / "models" / "tiny" / "model.safetensors").is_file()


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("steps", 0, "steps=0 must be an integer >= 1"),
        ("steps", -1, "steps=-1 must be an integer >= 1"),
        ("batch_size", 0, "batch_size=0 must be an integer >= 1"),
        ("n_ctx", 8, "n_ctx=8 must be an integer >= 24"),
        ("lr", 5.0, r"lr=5.0 must be a finite number in \(0, 1\)"),
        ("n_heads", 3, "not divisible"),
    ],
)
def test_config_is_validated_before_anything_is_written(tmp_path, field, value, match):
    with pytest.raises(ConfigError, match=match):
        train_tiny(tmp_path / "m", TinyConfig(**{**SMALL, field: value}), progress=False)
    assert not (tmp_path / "m").exists()
