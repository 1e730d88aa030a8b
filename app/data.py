"""The app's read-only view of a workspace: artifacts, SAE folders, feature stores.

Every path the app reads comes from a query parameter or a listing and goes through `resolve`,
which keeps it inside the workspace: absolute paths, `..` and symlinks that lead out are refused.
Nothing here imports torch; files are JSON, JSON lines, parquet and .npy (no pickle).
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath

from workbench.errors import UserError

WORKSPACE_ENV = "WORKBENCH_WORKSPACE"
KINDS = ("models", "caches", "saes", "features", "circuits")
ARTIFACT = "artifact.json"


class OutsideWorkspace(UserError):
    """A path names something outside the workspace, or nothing at all."""


def workspace_root() -> Path:
    return Path(os.environ.get(WORKSPACE_ENV, "workspace")).resolve()


def resolve(root: Path, rel: str) -> Path:
    """The workspace-relative path `rel` as an absolute path inside root, or OutsideWorkspace."""
    p = PurePosixPath(rel)
    if not rel or p.is_absolute() or rel.startswith("~"):
        raise OutsideWorkspace(f"{rel!r} is not a path inside the workspace: give it relative to {root}")
    if ".." in p.parts:
        raise OutsideWorkspace(f"{rel!r} is refused: '..' may not appear in a workspace path")
    full = (root / p).resolve()
    if not full.is_relative_to(root):
        raise OutsideWorkspace(f"{rel!r} is refused: it leads outside the workspace {root} (through a symlink)")
    if not full.exists():
        raise OutsideWorkspace(f"{rel!r} does not exist in the workspace {root}")
    return full


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError as e:
        raise UserError(f"unreadable JSON file {path}: {e}") from e


def read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def artifacts(root: Path) -> list[dict]:
    """Every recorded artifact: {kind, name, rel, manifest}, from <root>/<kind>/<name>/artifact.json."""
    out = []
    for kind in KINDS:
        for m in sorted((root / kind).glob(f"*/{ARTIFACT}")):
            if m.resolve().is_relative_to(root):
                out.append({"kind": kind, "name": m.parent.name, "rel": f"{kind}/{m.parent.name}", "manifest": read_json(m)})
    return out


def sae_dirs(root: Path) -> list[str]:
    """Workspace-relative folders holding an SAE (cfg.json + weights), recorded or not."""
    found = {p.parent for p in root.glob("saes/**/cfg.json") if (p.parent / "sae_weights.safetensors").is_file()}
    return sorted(str(p.relative_to(root)) for p in found if p.resolve().is_relative_to(root))


def sae_info(root: Path, rel: str) -> dict:
    """An SAE folder's cfg.json, workbench.json, metrics.json, curves and feature-store manifest."""
    d = resolve(root, rel)
    if not (d / "cfg.json").is_file():
        raise UserError(f"{rel!r} is not an SAE folder (no cfg.json)")
    cfg = read_json(d / "cfg.json")
    return {"rel": rel, "name": d.name, "cfg": cfg, "hook": (cfg.get("metadata") or {}).get("hook_name"),
            "workbench": read_json(d / "workbench.json"), "metrics": read_json(d / "metrics.json"),
            "curves": read_jsonl(d / "curves.jsonl"), "artifact": read_json(d / ARTIFACT),
            "store": read_json(d / "features" / "manifest.json")}


def open_store(root: Path, rel: str):
    from workbench.features import FeatureStore

    return FeatureStore(resolve(root, rel))


def model_dirs(root: Path) -> list[str]:
    """Saved models in the workspace (config.json + model.safetensors)."""
    return sorted(str(p.parent.relative_to(root)) for p in root.glob("models/*/model.safetensors")
                  if (p.parent / "config.json").is_file() and p.resolve().is_relative_to(root))
