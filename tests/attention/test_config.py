import math

import pytest

from workbench.attention.config import GateConfig, SparsifyConfig
from workbench.errors import ConfigError, UserError


@pytest.mark.parametrize("tol", [0, -0.01, math.nan, math.inf])
def test_tolerance_must_be_positive_and_finite(tol):
    with pytest.raises(ConfigError, match=r"tolerance=.* must be a finite number > 0") as e:
        SparsifyConfig(tolerance=tol).resolve()
    assert isinstance(e.value, UserError) and "\n" not in str(e.value)


def test_bad_choices_name_the_valid_ones():
    with pytest.raises(ConfigError, match=r"estimator='gumbel'.*\['gumbel_st', 'hard_concrete'\]"):
        GateConfig(estimator="gumbel").resolve()
    with pytest.raises(ConfigError, match=r"empty_row='none'.*\['zero', 'first'\]"):
        SparsifyConfig(gates=GateConfig(empty_row="none")).resolve()
    with pytest.raises(ConfigError, match="batch_size=3 must be a positive multiple of the number of processes"):
        SparsifyConfig(batch_size=3).resolve(world_size=2)
    with pytest.raises(ConfigError, match="unknown SparsifyConfig fields"):
        SparsifyConfig.from_dict({"tolerence": 0.1})


def test_round_trip_and_temperature_schedules():
    cfg = SparsifyConfig(gates=GateConfig(estimator="hard_concrete"), steps=11, tau_start=1.0, tau_end=0.1).resolve()
    assert SparsifyConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.tau(0) == 1.0 and cfg.tau(10) == pytest.approx(0.1)
    assert cfg.tau(5) == pytest.approx(math.sqrt(0.1))  # exponential: geometric midpoint
    lin = SparsifyConfig(steps=11, tau_schedule="linear", tau_start=1.0, tau_end=0.1)
    assert lin.tau(5) == pytest.approx(0.55)
    assert SparsifyConfig(tau_schedule="constant").tau(7) == 1.0


def test_field_types_are_checked_by_name():
    with pytest.raises(ConfigError, match=r"lr='abc' is not of type float"):
        SparsifyConfig(lr="abc").resolve()
    with pytest.raises(ConfigError, match=r"steps=True is not of type int"):
        SparsifyConfig(steps=True).resolve()
    with pytest.raises(ConfigError, match=r"init_bias='x' is not of type float"):
        GateConfig(init_bias="x").resolve()


def test_gate_presets_and_their_defaults():
    with pytest.raises(ConfigError, match=r"gate='authors'.*\['published', 'log_prob', 'score'\]"):
        GateConfig(gate="authors").resolve()
    published = SparsifyConfig().resolve()
    assert published.gates.gate == "published" and published.gates.init_bias == 10.0 and published.tau_end == 1.0
    old = SparsifyConfig(gates=GateConfig(gate="log_prob")).resolve()
    assert old.gates.init_bias == 8.0 and old.tau_end == 0.1 and old.gates.renormalise
