"""The sweep's row store: chunks give back exactly what was put, in memory and through files; the files reopen;
a folder of another build is refused; a chunk with edges where none can be is refused rather than cut."""

from __future__ import annotations

import pytest
import torch

from workbench.circuits.feature.row_store import RowStore
from workbench.errors import BadValueError


def test_chunks_round_trip_in_memory_and_through_files(tmp_path):
    rows = torch.randn(3, 10)
    rows[:, 2:6] = 0  # 6 feature columns, the targets read before features 2..5 write
    for folder in (None, tmp_path / "rows"):
        store = RowStore(folder, {"tokens": [1, 2]}, 10, 6)
        assert store.get("L1", 0) is None
        assert torch.equal(store.put("L1", 0, rows.clone(), 2), rows)
        assert torch.equal(store.get("L1", 0), rows)
    assert sorted(p.name for p in (tmp_path / "rows").iterdir()) == ["L1-00000.pt", "rows.json"]  # no temp file
    assert torch.equal(RowStore(tmp_path / "rows", {"tokens": [1, 2]}, 10, 6).get("L1", 0), rows)


def test_another_builds_folder_and_impossible_edges_are_refused(tmp_path):
    RowStore(tmp_path, {"tokens": [1, 2], "batch_size": 4}, 10, 6)
    with pytest.raises(BadValueError, match=r"holds the rows of another build \(it differs in \['batch_size'\]\)"):
        RowStore(tmp_path, {"tokens": [1, 2], "batch_size": 8}, 10, 6)
    with pytest.raises(RuntimeError, match="edges from features after column 2"):
        RowStore(None, {}, 10, 6).put("L1", 0, torch.ones(1, 10), 2)
