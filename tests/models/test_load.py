import os
import subprocess
import sys

import pytest
import torch

from workbench.errors import DamagedFileError
from workbench.models import ModelSpecError, load, model_id, save


def test_embedded_model_loads_with_its_tokenizer(tiny):
    model, tok = tiny
    assert model.cfg.n_layers >= 4 and model.cfg.d_model >= 128
    assert model.tokenizer is tok
    assert model.to_str_tokens("When Mary and John went") == ["<bos>", "When", "Mary", "and", "John", "went"]
    assert model.to_single_token(" Mary") == tok.convert_tokens_to_ids("Mary")


def test_saved_model_round_trips(tiny, tmp_path):
    model, _ = tiny
    save(model, tmp_path / "copy")
    again, _ = load(str(tmp_path / "copy"), device="cpu")
    tokens = model.to_tokens("Alice and Bob went to the park")
    torch.testing.assert_close(again(tokens), model(tokens))
    assert model_id(again) == model_id(model)


def test_unknown_spec_names_the_choices(tmp_path):
    with pytest.raises(ModelSpecError, match="unknown model spec 'not-a-model'.*'small'.*'tiny'"):
        load("not-a-model")
    from workbench.cli.options import EMBEDDED_DENSE, EMBEDDED_HELP, EMBEDDED_SPARSE
    from workbench.models import EMBEDDED

    assert all(name in EMBEDDED_HELP for name in EMBEDDED)  # --model's help names every embedded model
    assert set(EMBEDDED_DENSE + EMBEDDED_SPARSE) == set(EMBEDDED)  # `attention add`'s choices, written out
    assert {n for n in EMBEDDED if (EMBEDDED[n] / "sparsify.json").is_file()} == set(EMBEDDED_SPARSE)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelSpecError, match="not a saved workbench model"):
        load(str(tmp_path / "empty"))


def _fake_hub_gpt2(hf_home):
    """A tiny GPT-2 laid out as the Hugging Face cache holds a downloaded 'gpt2'."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from workbench.corpus.vocab import vocabulary
    from workbench.models.tokenizer import build_tokenizer

    tok = build_tokenizer(vocabulary())
    commit = "0" * 40
    repo = hf_home / "hub" / "models--gpt2"
    snap = repo / "snapshots" / commit
    torch.manual_seed(0)
    GPT2LMHeadModel(
        GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=64, n_ctx=64, vocab_size=len(tok))
    ).save_pretrained(snap)
    tok.save_pretrained(snap)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)


def test_transformerlens_names_load_offline_from_the_hf_cache(tmp_path):
    _fake_hub_gpt2(tmp_path)
    env = {**os.environ, "HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "model", "info", "--model", "gpt2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "2 layers, d_model 32" in out.stdout and "blocks.{0..1}.hook_resid_post" in out.stdout


def test_transformerlens_names_offline_without_a_cached_copy_are_one_clear_error(tmp_path, monkeypatch):
    import huggingface_hub.constants as hub

    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)  # offline, with an empty Hugging Face cache
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(
        ModelSpecError, match="cannot load model 'gpt2' from the Hugging Face Hub: it is not in the local"
    ):
        load("gpt2", device="cpu")


@pytest.mark.parametrize(
    "damage, match",
    [
        (
            lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:300]),
            r"model.safetensors is damaged or does not fit .*config.json \(SafetensorError",
        ),
        (
            lambda d: (d / "config.json").write_text("[1, 2]"),
            r"config.json is not a workbench model config \(TypeError",
        ),
        (
            lambda d: (d / "config.json").write_text("{oops"),
            r"config.json is not a workbench model config \(JSONDecodeError",
        ),
    ],
)
def test_damaged_model_folders_are_named(tiny, tmp_path, damage, match):
    folder = save(tiny[0], tmp_path / "m")
    damage(folder)
    with pytest.raises(DamagedFileError, match=match):
        load(str(folder), device="cpu")


@pytest.mark.parametrize("name", ["tiny", "small"])
def test_embedded_model_card_claims_hold(name):
    """A shipped card's held-out accuracies are what the shipped weights score; its head tables are what the
    weights give (detect_head and the workbench's own scores are deterministic: recomputed here, the card's own
    scores where it has them), and the two measures name the same strongest induction and previous-token head."""
    import json

    import numpy as np

    from workbench.models import EMBEDDED, load
    from workbench.models.card import head_scores, own_head_scores, task_accuracy

    model, _ = load(name, device="cpu")
    card = json.loads((EMBEDDED[name] / "config.json").read_text())["workbench"]
    acc = task_accuracy(model, card["train_config"]["eval_queries"])
    assert acc == pytest.approx(card["heldout_task_accuracy"], abs=0.011)
    assert all(a["found_in_training"] == 0 for a in card["verbatim_audit"]["per_task"].values())
    detected, own = head_scores(model), own_head_scores(model)
    assert np.allclose(detected["induction_head"], card["head_detector"]["induction_head"], atol=1e-3)
    assert np.allclose(detected["previous_token_head"], card["head_detector"]["previous_token_head"], atol=1e-3)
    if "own_head_scores" in card:  # cards written before the own scores have only detect_head's tables
        assert np.allclose(own["induction"], card["own_head_scores"]["induction"], atol=1e-3)
    for kind, pattern in (("induction", "induction_head"), ("previous_token", "previous_token_head")):
        assert np.argmax(own[kind]) == np.argmax(detected[pattern]), kind


def test_an_unusable_device_is_named_before_loading():
    import torch

    from workbench.models import ModelSpecError, load

    if torch.cuda.device_count() > 7:
        pytest.skip("this machine has that device")
    with pytest.raises(ModelSpecError, match=r"device='cuda:7' is not available on this machine"):
        load("tiny", device="cuda:7")
