"""The checks and the JSON form every config dataclass shares (workbench/configcheck.py)."""

import json
from dataclasses import dataclass

import pytest

from workbench.configcheck import from_json, to_json, type_mismatch


@dataclass
class Example:
    name: str = "a"
    limits: tuple[float, float] = (-0.1, 1.1)
    ks: tuple[int, ...] | None = (1, 5)
    tags: list[str] | None = None


def test_saved_and_loaded_through_json_it_is_the_same_config():
    cfg = Example(tags=["x"])
    saved = json.loads(json.dumps(to_json(cfg)))
    assert saved == to_json(cfg)  # lists on both sides: a saved config compares equal to a fresh one
    back = Example(**from_json(Example, saved, ValueError))
    assert back == cfg and isinstance(back.limits, tuple) and isinstance(back.tags, list)


def test_unknown_keys_are_refused_by_name_or_dropped():
    with pytest.raises(ValueError, match=r"unknown Example fields \['nope'\]; valid fields: \['ks', 'limits'"):
        from_json(Example, {"nope": 1}, ValueError)
    assert from_json(Example, {"nope": 1, "name": "b"}, None) == {"name": "b"}


def test_type_mismatch_names_the_field_and_the_type():
    assert type_mismatch(Example(limits=(0.0, "1"))) == ("limits", (0.0, "1"), "tuple[float, float]")
    assert type_mismatch(Example(ks=None)) is None


@pytest.mark.parametrize("limits", [(1.0, 2.0, 3.0), (1.0,), ()])
def test_a_tuple_of_the_wrong_length_is_a_type_mismatch(limits):
    assert type_mismatch(Example(limits=limits)) == ("limits", limits, "tuple[float, float]")


def test_a_variable_length_tuple_checks_every_item():
    assert type_mismatch(Example(ks=(1, 5, 7))) is None and type_mismatch(Example(ks=())) is None
    assert type_mismatch(Example(ks=(1, "x")))[0] == "ks"


@pytest.mark.parametrize(
    "command, value",
    [
        (["attention", "train", "--set"], "hard_concrete_limits=[1,2,3]"),
        (["attention", "train", "--set"], "hard_concrete_limits=[0.5]"),
        (["sae", "train", "--cache", "c", "--hook", "h", "--set"], 'prefixes=[1,"a"]'),
    ],
)
def test_cli_wrong_length_or_type_in_a_tuple_or_list_field_is_one_line(command, value, tmp_path, capsys):
    from workbench.cli import main

    field = value.partition("=")[0]
    assert main([*command, value, "--workspace", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0], err
    assert not any(tmp_path.iterdir())
