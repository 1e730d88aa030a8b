"""The config base (workbench/config.py): the checks on construction, resolve, and the JSON form every config
dataclass shares; every config dataclass of the package is built on it."""

import dataclasses
import importlib
import json
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import workbench
from workbench.config import Config
from workbench.errors import BadValueError, ConfigError

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Inner(Config):
    scale: float = 1.0


@dataclass
class Example(Config):
    renamed = {"old_name": "name"}

    name: str = field(default="a", metadata={"choices": ("a", "b")})
    limits: tuple[float, float] = (-0.1, 1.1)
    ks: tuple[int, ...] | None = (1, 5)
    tags: list[str] | None = None
    width: int | None = field(default=None, metadata={"min": 1})
    inner: Inner = field(default_factory=Inner)

    def check(self):
        if self.width is not None and len(self.ks or ()) > self.width:
            raise self.error(f"ks={list(self.ks)} has more entries than width={self.width}")

    def fill(self, width: int) -> dict:
        if self.width is not None and self.width != width:
            raise self.error(f"width={self.width} but the data has width {width}")
        return {"width": width}


@dataclass(frozen=True)
class Lenient(Config):
    error = BadValueError
    drop_unknown = True

    n: int = 1


def test_saved_and_loaded_through_json_it_is_the_same_config():
    cfg = Example(tags=["x"], inner=Inner(scale=2.0))
    saved = json.loads(json.dumps(cfg.to_dict()))
    assert saved == cfg.to_dict()  # lists on both sides: a saved config compares equal to a fresh one
    back = Example.from_dict(saved)
    assert back == cfg and isinstance(back.limits, tuple) and isinstance(back.tags, list)
    assert isinstance(back.inner, Inner) and back.inner.scale == 2.0


def test_unknown_keys_are_refused_by_name_or_dropped():
    with pytest.raises(ConfigError, match=r"unknown Example fields \['nope'\]; valid fields: \['inner', 'ks'"):
        Example.from_dict({"nope": 1})
    assert Lenient.from_dict({"nope": 1, "n": 2}) == Lenient(n=2)


def test_a_renamed_field_of_an_old_saved_config_is_migrated_on_read():
    assert Example.from_dict({"old_name": "b"}).name == "b"


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"limits": (0.0, "1")}, r"limits=\(0.0, '1'\) is not of type tuple\[float, float\]"),
        ({"limits": (1.0, 2.0, 3.0)}, "limits=.* is not of type tuple"),  # a tuple of the wrong length
        ({"limits": ()}, "is not of type tuple"),
        ({"ks": (1, "x")}, "ks=.* is not of type"),  # a variable-length tuple checks every item
        ({"name": "c"}, r"name='c' is not valid; choose one of \['a', 'b'\]"),
        ({"width": 0}, r"width=0 must be >= 1 \(or None\)"),
        ({"ks": (1, 2, 3), "width": 2}, r"ks=\[1, 2, 3\] has more entries than width=2"),
        ({"inner": {"scale": 1.0}}, "inner=.* is not of type"),
    ],
)
def test_construction_checks_every_value_that_is_set(kw, match):
    with pytest.raises(ConfigError, match=match):
        Example(**kw)


def test_fields_left_for_the_data_are_checked_when_resolve_fills_them():
    cfg = Example(ks=(1, 2, 3))  # width unknown: nothing to check against yet
    assert cfg.resolve(width=3) == dataclasses.replace(cfg, width=3) and cfg.width is None  # a copy
    with pytest.raises(ConfigError, match="has more entries than width=2"):
        cfg.resolve(width=2)
    with pytest.raises(ConfigError, match="width=3 but the data has width 4"):
        Example(width=3).resolve(width=4)
    assert Example().ks == (1, 5) and Example(ks=()).ks == ()


def test_a_config_raises_its_own_error_class():
    with pytest.raises(BadValueError, match="n=-1 must be >= 0"):
        Lenient(n=-1)


def _config_classes() -> list[type]:
    """Every dataclass named *Config in the workbench package (modules that import torch included)."""
    out = []
    for m in pkgutil.walk_packages(workbench.__path__, "workbench."):
        mod = importlib.import_module(m.name)
        for v in vars(mod).values():
            if isinstance(v, type) and v.__module__ == mod.__name__ and dataclasses.is_dataclass(v):
                peer = any(b.__module__.startswith("sae_lens") for b in v.__mro__)  # sae-lens's own configs
                if v.__name__.endswith("Config") and not peer:
                    out.append(v)
    return out


def test_every_config_dataclass_is_built_on_the_one_base():
    classes = _config_classes()
    assert len(classes) >= 10, classes
    assert [c.__name__ for c in classes if not issubclass(c, Config)] == []
    for c in classes:  # the rule has one place: no config writes its own construction hook or JSON form
        own = set(vars(c)) & {"__post_init__", "resolve", "validate", "to_dict", "from_dict"}
        assert not own, (c.__name__, own)


def _saved_configs():
    """(class, saved dict, where) of every config saved under data/, bench/results and the tests' fixtures."""
    from workbench.attention.config import GateConfig, SparsifyConfig

    out = []
    for path in sorted([*ROOT.glob("data/models/*/config.json")]):
        gates = json.loads(path.read_text()).get("attention_gates")
        if gates is not None:
            out.append((GateConfig, gates, path))
    for path in sorted([*ROOT.glob("data/models/*/*.json"), *ROOT.glob("bench/results/attention/*.json")]):
        d = json.loads(path.read_text())
        if isinstance(d, dict) and isinstance(d.get("config"), dict) and "gates" in d["config"]:
            out.append((SparsifyConfig, d["config"], path))
    return out


def test_every_saved_config_still_loads():
    """Old artifacts (the shipped sparse model, the saved attention runs, some from before the gate presets,
    when `gate` was `gate_input`) load and resolve."""
    saved = _saved_configs()
    assert len(saved) >= 5 and any("gate_input" in d.get("gates", d) for _, d, _ in saved)
    for cls, d, path in saved:
        cfg = cls.from_dict(d).resolve()
        assert cls.from_dict(cfg.to_dict()) == cfg, path
        gates = d.get("gates", d)
        assert (cfg.gates if hasattr(cfg, "gates") else cfg).gate == gates.get("gate", gates.get("gate_input"))


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

    name = value.partition("=")[0]
    assert main([*command, value, "--workspace", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and name in err[0], err
    assert not any(tmp_path.iterdir())
