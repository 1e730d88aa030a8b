"""A read-only view of a workspace for the app and `workbench ls`: no torch, TransformerLens or sae_lens.

Everything here reads plain files (JSON, JSONL, .npy through numpy memory maps): the artifacts of a
workspace by kind, an SAE folder's config, metrics and training curves, a circuit file, and a
cache's manifest and token ids. Opening a model or running an SAE is the engine's job, not this layer's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbench.errors import MissingInputError
from workbench.workspace import KINDS, Artifact, Workspace

__all__ = ["Artifact", "CacheView", "KINDS", "SAEView", "artifacts", "open_cache", "open_circuit", "open_sae"]


def artifacts(workspace: str | Path, kind: str | None = None) -> list[Artifact]:
    """Every artifact recorded in the workspace (inside it or registered from elsewhere), by kind."""
    return Workspace(workspace).artifacts(kind)


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise MissingInputError(f"{path} does not exist") from None
    except json.JSONDecodeError as e:
        raise MissingInputError(f"{path} is not valid JSON ({e}); was it written by the workbench?") from None


def _json_or_empty(path: Path) -> dict:
    return _json(path) if path.is_file() else {}


@dataclass
class SAEView:
    """An SAE folder as data: cfg.json (SAELens), workbench.json, metrics.json and curves.jsonl."""

    path: Path
    cfg: dict
    info: dict  # workbench.json: sae_config, train_config, data, final curve point ({} if trained elsewhere)
    metrics: dict  # metrics.json ({} until `workbench sae eval` ran)
    curves: list[dict]  # one dict per logged step

    @property
    def hook(self) -> str | None:
        return self.cfg.get("metadata", {}).get("hook_name")


def open_sae(folder: str | Path) -> SAEView:
    folder = Path(folder)
    if not (folder / "cfg.json").is_file():
        raise MissingInputError(f"{folder} is not an SAE folder (no cfg.json)")
    curves_path = folder / "curves.jsonl"
    curves = (
        [json.loads(line) for line in curves_path.read_text().splitlines() if line.strip()]
        if curves_path.is_file()
        else []
    )
    return SAEView(
        folder,
        _json(folder / "cfg.json"),
        _json_or_empty(folder / "workbench.json"),
        _json_or_empty(folder / "metrics.json"),
        curves,
    )


def open_circuit(path: str | Path) -> dict:
    """A workbench circuit file (or an artifact folder holding circuit.json) as its JSON dict."""
    path = Path(path)
    if path.is_dir():
        path = path / "circuit.json"
    d = _json(path)
    if d.get("schema") != "workbench.circuit":
        raise MissingInputError(f"{path} is not a workbench circuit file (schema {d.get('schema')!r})")
    return d


@dataclass
class CacheView:
    """An activation cache's manifest and per-row metadata, memory-mapped (activations stay on disk)."""

    path: Path
    manifest: dict

    @property
    def hooks(self) -> list[str]:
        return list(self.manifest["hooks"])

    def n_tokens(self, split: str = "train") -> int:
        return sum(r["rows"] for r in self._shards(split))

    def _shards(self, split: str) -> list[dict]:
        shards = self.manifest["shards"]
        if split not in shards:
            raise MissingInputError(f"cache {self.path} has no split {split!r}; it has: {', '.join(shards)}")
        return shards[split]

    def column(self, split: str, stem: str) -> np.ndarray:
        """One per-row (or per-sequence) column over all shards: a read-only memmap when one shard holds it."""
        parts = [np.load(self.path / split / r["name"] / f"{stem}.npy", mmap_mode="r") for r in self._shards(split)]
        if not parts:
            return np.empty((0,), np.int32)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def token_ids(self, split: str = "train") -> np.ndarray:
        """The token id of every cached row."""
        return self.column(split, "tokens")

    def sequences(self, split: str = "train") -> np.ndarray:
        """[n_seq, ctx_len] token ids of the sequences the rows came from."""
        return self.column(split, "sequences")


def open_cache(folder: str | Path) -> CacheView:
    folder = Path(folder)
    if not (folder / "manifest.json").is_file():
        raise MissingInputError(f"no finished activation cache at {folder} (no manifest.json)")
    return CacheView(folder, _json(folder / "manifest.json"))
