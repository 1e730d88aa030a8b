"""Where an attribution graph's sweep keeps its rows (attribution_graph._sweep): in memory, or chunk files in a
folder so a long build holds one chunk at a time and a stopped build resumes. Each chunk is written atomically
under its (targets, chunk) name; the folder's manifest records what the rows are of, so a build started again
with the same arguments reuses every chunk already there and one with other arguments is refused.

A chunk of rows whose targets read layer L keeps only the feature columns below layer L (the others are zero:
those features write after the targets read), so the files hold about half of [rows x all sources].
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from workbench.atomic import atomic_path, atomic_write_text
from workbench.errors import BadValueError, UserError

MANIFEST = "rows.json"


class BuildStopped(UserError):
    """The build stopped after max_batches backward batches; its rows so far are in the work folder."""


class RowStore:
    """Chunks of rows [n, n_columns] by (name, index): a dict, or `folder`/{name}-{index}.pt."""

    def __init__(self, folder: str | Path | None, key: dict, n_columns: int, n_features: int):
        self.folder, self.n_columns, self.n_features = folder and Path(folder), n_columns, n_features
        self._held: dict = {}
        if self.folder is not None:
            self._open(key)

    def _open(self, key: dict) -> None:
        manifest = self.folder / MANIFEST
        if manifest.is_file():
            held = json.loads(manifest.read_text()).get("key")
            if held != key:
                diff = sorted(k for k in set(key) | set(held or {}) if (held or {}).get(k) != key.get(k))
                raise BadValueError(
                    f"work_dir {str(self.folder)!r} holds the rows of another build (it differs in {diff}): give "
                    "another folder, or delete it to start again"
                )
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(manifest, json.dumps({"key": key}))

    def _path(self, name: str, index: int) -> Path:
        return self.folder / f"{name}-{index:05d}.pt"

    def get(self, name: str, index: int) -> torch.Tensor | None:
        """The chunk's full rows, or None if it was never stored."""
        if self.folder is None:
            kept = self._held.get((name, index))
        else:
            path = self._path(name, index)
            kept = torch.load(path, weights_only=True) if path.is_file() else None
        return None if kept is None else self._full(kept)

    def _full(self, kept: dict) -> torch.Tensor:
        rows, n_kept = kept["rows"], kept["features"]
        full = rows.new_zeros(rows.shape[0], self.n_columns)
        full[:, :n_kept] = rows[:, :n_kept]
        full[:, self.n_features :] = rows[:, n_kept:]
        return full

    def put(self, name: str, index: int, rows: torch.Tensor, n_kept: int) -> torch.Tensor:
        """Store a chunk, keeping its first n_kept feature columns (the rest must be zero) and every other one;
        returns the rows as `get` will give them, so a resumed build sees exactly what a fresh one saw."""
        if rows[:, n_kept : self.n_features].any():
            raise RuntimeError(f"chunk {name}-{index} has edges from features after column {n_kept}, read after it")
        rows[:, n_kept : self.n_features] = 0  # +0.0, as get gives them
        kept = {"features": n_kept, "rows": torch.cat([rows[:, :n_kept], rows[:, self.n_features :]], 1)}
        if self.folder is None:
            self._held[(name, index)] = kept
        else:
            with atomic_path(self._path(name, index)) as tmp:
                torch.save(kept, tmp)
        return rows
