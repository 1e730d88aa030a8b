"""The circuit steps' refusals that come before any search."""

import pytest

from workbench.steps.circuits import find_circuit
from workbench.workspace import Workspace


def test_ensure_on_a_circuit_needs_its_name(tiny, tmp_path):
    with pytest.raises(ValueError, match="needs the circuit's name"):
        find_circuit(Workspace(tmp_path), tiny[0], "a b", "c", ensure=True)
