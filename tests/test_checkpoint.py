"""The checksummed checkpoint format every resumable job shares."""

import pytest
import torch

from workbench import checkpoint
from workbench.errors import DamagedFileError


def test_round_trip_with_a_str_path(tmp_path):
    path = str(tmp_path / "c.pt")
    checkpoint.write(path, {"step": 3, "w": torch.arange(4.0)})
    state = checkpoint.read(path)
    assert state["step"] == 3 and torch.equal(state["w"], torch.arange(4.0))


def test_a_damaged_or_foreign_file_is_refused_by_name(tmp_path):
    path = tmp_path / "c.pt"
    checkpoint.write(path, {"step": 1})
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(DamagedFileError, match="checksum does not match"):
        checkpoint.read(path)
    torch.save({"step": 1}, path)  # a plain torch file: no header
    with pytest.raises(DamagedFileError, match="not a workbench checkpoint"):
        checkpoint.read(path)
    with pytest.raises(DamagedFileError, match="no checkpoint at"):
        checkpoint.read(tmp_path / "missing.pt")


def test_resuming_under_another_configuration_names_the_difference(tmp_path):
    path = tmp_path / "c.pt"
    checkpoint.write(path, {"record": {"lr": 0.001, "steps": 10}})
    assert checkpoint.read_matching(path, {"lr": 0.001, "steps": 10})["record"]["steps"] == 10
    with pytest.raises(DamagedFileError, match="lr"):
        checkpoint.read_matching(path, {"lr": 0.01, "steps": 10})
