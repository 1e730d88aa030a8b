"""Where an attribution graph's sweep keeps its rows (attribution_graph._sweep): in memory, or chunk files in a
folder so a long build holds one chunk at a time and a stopped build resumes. Each chunk is written atomically
under its (targets, chunk) name; the folder's manifest records what the rows are of, so a build started again
with the same arguments reuses every chunk already there and one with other arguments is refused. Each chunk
carries a checksum and its key (the build, its name, its index, its shape) and the manifest is sealed JSON, so
a chunk with changed bytes, or one copied from another build or layer, is named and computed again, never used.

A chunk of rows whose targets read layer L keeps only the feature columns below layer L (the others are zero:
those features write after the targets read), so the files hold about half of [rows x all sources].
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from workbench import checkpoint
from workbench.errors import BadValueError, DamagedFileError, UserError
from workbench.readback import digest, sealed_json, write_sealed_json

MANIFEST = "rows.json"
CHUNK = "graph row chunk"


class BuildStopped(UserError):
    """The build stopped after max_batches backward batches; its rows so far are in the work folder."""


class RowStore:
    """Chunks of rows [n, n_columns] by (name, index): a dict, or `folder`/{name}-{index}.pt."""

    def __init__(self, folder: str | Path | None, key: dict, n_columns: int, n_features: int):
        self.folder, self.n_columns, self.n_features = folder and Path(folder), n_columns, n_features
        self.build = digest({"key": key})  # what each chunk file says it belongs to
        self._held: dict = {}
        if self.folder is not None:
            self._open(key)

    def _open(self, key: dict) -> None:
        manifest = self.folder / MANIFEST
        if manifest.is_file():
            way_out = f"delete the folder {str(self.folder)!r} to start the build again"
            held = sealed_json(manifest, "graph build's work-folder manifest", way_out, fields={"key": dict})["key"]
            if held != key:
                diff = sorted(k for k in set(key) | set(held) if held.get(k) != key.get(k))
                raise BadValueError(
                    f"work_dir {str(self.folder)!r} holds the rows of another build (it differs in {diff}): give "
                    "another folder, or delete it to start again"
                )
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        write_sealed_json(manifest, {"key": key})

    def _path(self, name: str, index: int) -> Path:
        return self.folder / f"{name}-{index:05d}.pt"

    def get(self, name: str, index: int, rebuild: bool = True) -> torch.Tensor | None:
        """The chunk's full rows, or None if it was never stored; a damaged chunk file (changed bytes, or another
        build's or chunk's) is named and deleted, and None returned so it is computed again (rebuild=False:
        refused)."""
        if self.folder is None:
            kept = self._held.get((name, index))
            return None if kept is None else self._full(kept)
        path = self._path(name, index)
        if not path.is_file():
            return None
        try:
            return self._full(self._read(path, name, index))
        except DamagedFileError as e:
            if not rebuild:
                raise
            warnings.warn(f"not reusing a damaged {CHUNK}: {e}", stacklevel=2)
            path.unlink()
            return None

    def _read(self, path: Path, name: str, index: int) -> dict:
        kept = checkpoint.read(path, CHUNK, "its rows are computed again")
        key = kept.get("key") if isinstance(kept, dict) else None
        want = {"build": self.build, "name": name, "index": index}
        if not isinstance(key, dict) or {k: key.get(k) for k in want} != want:
            got = {k: key.get(k) for k in want} if isinstance(key, dict) else {}
            raise DamagedFileError(
                f"{path} ({CHUNK}) holds chunk {got.get('name')}-{got.get('index')} of build "
                f"{str(got.get('build'))[:12]}, not {name}-{index} of build {self.build[:12]}; its rows are computed again"
            )
        rows, n_kept, shape = kept.get("rows"), kept.get("features"), key.get("shape")
        width = n_kept + self.n_columns - self.n_features if isinstance(n_kept, int) else None
        found = list(rows.shape) if isinstance(rows, torch.Tensor) else type(rows).__name__
        if found != shape or not isinstance(shape, list) or shape[1:] != [width]:
            raise DamagedFileError(
                f"{path} ({CHUNK}) holds rows of shape {found}; its key says {shape}, this build {['n', width]}; "
                "its rows are computed again"
            )
        return kept

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
            key = {"build": self.build, "name": name, "index": index, "shape": list(kept["rows"].shape)}
            checkpoint.write(self._path(name, index), {"key": key, **kept})
        return rows
