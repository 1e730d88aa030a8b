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
        ({"width": 0}, r"width=0 must be an integer >= 1 \(or None\)"),
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
    with pytest.raises(BadValueError, match="n=-1 must be an integer >= 0"):
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


SAMPLES = {  # a valid instance of each config with fields that have no default
    "CacheConfig": dict(
        model="m",
        corpus="c",
        hooks=("h",),
        n_tokens=100,
        ctx_len=8,
        batch_size=2,
        dtype="float32",
        shard_tokens=50,
        heldout_fraction=0.1,
        exclude_special=True,
        special_ids=(0,),
        outlier_factor=10.0,
    )
}


def _numeric_fields() -> list[tuple[type, dataclasses.Field, type]]:
    """(config class, field, int or float) of every numeric field of every config dataclass of the package."""
    from workbench.config import _hints, numeric

    return [
        (cls, f, numeric(_hints(cls)[f.name]))
        for cls in _config_classes()
        for f in dataclasses.fields(cls)
        if numeric(_hints(cls)[f.name])
    ]


def bad_values(f: dataclasses.Field, kind: type) -> list:
    """Values outside a numeric field's declared bounds: past each bound (on it, where the bound is open), NaN,
    and both infinities."""
    from workbench.config import _bounds

    low, high, low_open, high_open = _bounds(f, kind)
    out = [float("nan"), float("inf"), float("-inf")]
    if low is not None:
        out.append(low if low_open else low - 1)
    if high is not None:
        out.append(high if high_open else high + 1)
    return out


NUMERIC = _numeric_fields()


def test_the_numeric_fields_are_found_in_every_config():
    names = {f"{c.__name__}.{f.name}" for c, f, _ in NUMERIC}
    assert {
        "GraphConfig.chunk_mib",
        "DemoConfig.target_ndf",
        "SparsifyConfig.tolerance",
        "CacheConfig.n_tokens",
    } <= names
    assert len(NUMERIC) >= 100, len(NUMERIC)


@pytest.mark.parametrize("cls, f, kind", NUMERIC, ids=[f"{c.__name__}.{f.name}" for c, f, _ in NUMERIC])
def test_every_numeric_field_refuses_out_of_range_nan_and_infinite_values_by_name(cls, f, kind):
    """One rule in the config base: each value outside the field's declared bounds is one line naming the field
    and its valid range, however the config is made (here from Python; flags and --set go through it too)."""
    from workbench.config import valid_range
    from workbench.errors import UserError

    base = cls(**SAMPLES.get(cls.__name__, {}))
    for value in bad_values(f, kind):
        with pytest.raises(UserError) as e:
            dataclasses.replace(base, **{f.name: value})
        message = str(e.value)
        assert "\n" not in message and f"{f.name}={value!r}" in message and valid_range(f, kind) in message, message


def test_an_int_past_64_bits_is_refused_from_python_and_as_a_flag_is_parsed(capsys):
    """10**30 as a seed or a count overflowed torch later (a traceback) or ran: every int a config holds fits 64
    bits, and so does every count flag (a port at most 65535)."""
    from workbench.cli import main
    from workbench.interventions.config import InterventionConfig

    with pytest.raises(BadValueError, match=r"seed=9223372036854775808 must be an integer >= 0 that fits 64 bits"):
        InterventionConfig(seed=2**63)
    InterventionConfig(seed=2**63 - 1)
    for argv, message in [
        (["model", "train", "--steps", "9" * 30], "must be an integer >= 1 that fits 64 bits"),
        (["app", "--port", "65536"], "65536 is above the maximum: it must be an integer <= 65535"),
    ]:
        with pytest.raises(SystemExit):
            main(argv)
        assert message in capsys.readouterr().err.strip().splitlines()[-1]
