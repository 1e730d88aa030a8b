"""InterventionConfig's bounds and the flags that would do nothing: every number finite and in range, list elements
included; refused in one line by the CLI, by the config from Python, and before the model generates."""

import json

import pytest

from workbench.cli import main
from workbench.errors import BadValueError
from workbench.interventions.config import MAX_VALUE, InterventionConfig, parse_positions

PROMPT = "When Mary and John went to the store , John gave a drink to"


def _one_line(argv, capsys) -> str:
    """The stderr line of a command refused with status 2 (a parse error's last line: argparse prints its usage)."""
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err and "Traceback" not in "\n".join(err), err
    return err[-1]


@pytest.mark.parametrize(
    "value, message",
    [
        ("nan", "value[0]=nan must be a finite number in [-1e+06, 1e+06]"),
        ("inf", "value[0]=inf must be"),
        ("1e308", "value[0]=1e+308 must be"),
        ("1,-inf", "value[1]=-inf must be"),
        ("1,,2", "'1,,2' has an empty element"),
    ],
)
def test_a_value_that_is_not_a_finite_number_in_range_is_refused_as_parsed(value, message, saes, tmp_path, capsys):
    argv = ["intervene", "--workspace", str(tmp_path / "ws"), "--dictionary", str(saes["topk"]), "--prompt", PROMPT]
    line = _one_line([*argv, "--feature", "3", "--op", "set", f"--value={value}"], capsys)
    assert "argument --value" in line and message in line, line
    assert not (tmp_path / "ws").exists()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -2 * MAX_VALUE])
def test_the_config_refuses_the_same_values_from_python(value):
    with pytest.raises(BadValueError, match=r"value\[1\]=.* must be a finite number in"):
        InterventionConfig(features=["3"], op="steer", value=[1.0, value])


def test_a_value_at_the_bound_runs(tiny, saes):
    from workbench.interventions import intervene

    cfg = InterventionConfig(features=["3"], op="set", value=[MAX_VALUE], positions="-1", continue_tokens=1)
    r = intervene(tiny[0], saes["topk"], PROMPT, cfg)
    assert all(p["kl"] == p["kl"] and p["kl"] >= 0 for p in r["positions"])  # finite, not NaN


@pytest.mark.parametrize("text", ["0,,3", ",1", "1,", " , "])
def test_positions_with_an_empty_element_are_refused(text):
    with pytest.raises(BadValueError, match="has an empty element"):
        parse_positions(text)


def test_constrained_layers_with_an_empty_or_negative_element_are_refused_as_parsed(saes, tmp_path, capsys):
    argv = ["intervene", "--workspace", str(tmp_path), "--dictionary", str(saes["topk"]), "--prompt", PROMPT]
    for text, message in [("0,,1", "has an empty element"), ("0,-1", "constrained_layers[1]=-1 must be an integer")]:
        line = _one_line([*argv, f"--constrained-layers={text}"], capsys)
        assert "argument --constrained-layers" in line and message in line, line


def test_live_norm_with_live_semantics_is_refused_naming_the_combination(saes, tmp_path, capsys):
    argv = ["intervene", "--workspace", str(tmp_path), "--dictionary", str(saes["topk"]), "--prompt", PROMPT]
    line = _one_line([*argv, "--feature", "3", "--live-norm"], capsys)
    assert "--live-norm" in line and "--semantics live" in line and "--semantics frozen" in line, line
    with pytest.raises(BadValueError, match="no effect with --semantics live"):
        InterventionConfig(frozen_norm=False, semantics="live")
    InterventionConfig(frozen_norm=False, semantics="frozen")  # where it has its effect


def test_a_continuation_past_the_context_is_refused_naming_the_room_left(tiny, saes, tmp_path, capsys):
    n_ctx = tiny[0].cfg.n_ctx
    n_prompt = len(tiny[0].to_tokens(PROMPT)[0])
    argv = ["intervene", "--workspace", str(tmp_path / "ws"), "--dictionary", str(saes["topk"]), "--prompt", PROMPT]
    line = _one_line([*argv, "--feature", "3", "--continue", "100000"], capsys)
    room = n_ctx - n_prompt
    assert "continue_tokens=100000" in line and f"at most {room} (--continue {room})" in line, line
    assert f"{n_prompt} of its {n_ctx} tokens" in line, line
    out = tmp_path / "r.json"
    assert main([*argv, "--feature", "3", "--continue", str(room), "--positions", "-1", "--out", str(out)]) == 0
    assert len(json.loads(out.read_text())["continuation"]["intervened"]["str_tokens"]) == room  # exactly fits


def test_a_prompts_file_that_is_not_utf8_is_one_line_naming_the_byte(saes, tmp_path, capsys):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    argv = ["intervene", "--workspace", str(tmp_path / "ws"), "--dictionary", str(saes["topk"]), "--feature", "1"]
    line = _one_line([*argv, "--prompts", str(bad)], capsys)
    assert "is not UTF-8 text: byte 3 is b'\\xe9'" in line and str(bad) in line, line
