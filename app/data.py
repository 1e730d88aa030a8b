"""The app's read-only view of a workspace: artifacts, SAE folders, feature stores.

Built on the read-only layer workbench.browse plus the feature-store reader. Every path the app
reads comes from a query parameter or a listing and goes through `resolve`, which keeps it inside
the workspace: absolute paths, `..` and symlinks that lead out are refused. Nothing here imports
torch; files are JSON, JSON lines, parquet and .npy (no pickle).
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath

from workbench.errors import UserError

WORKSPACE_ENV = "WORKBENCH_WORKSPACE"
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


def artifacts(root: Path) -> list[dict]:
    """Every recorded artifact: {kind, name, rel, manifest, inside}; the app opens only those inside the workspace."""
    from workbench import browse

    out = []
    for a in browse.artifacts(root):
        inside = a.path.resolve().is_relative_to(root)
        out.append(
            {
                "kind": a.kind,
                "name": a.name,
                "rel": str(a.path.resolve().relative_to(root)) if inside else str(a.path),
                "manifest": a.manifest,
                "inside": inside,
            }
        )
    return out


def sae_dirs(root: Path) -> list[str]:
    """Workspace-relative folders holding an SAE (cfg.json + weights), recorded or not."""
    found = {p.parent for p in root.glob("saes/**/cfg.json") if (p.parent / "sae_weights.safetensors").is_file()}
    return sorted(str(p.relative_to(root)) for p in found if p.resolve().is_relative_to(root))


def sae_info(root: Path, rel: str) -> dict:
    """An SAE folder's cfg.json, workbench.json, metrics.json, curves (browse.open_sae) and feature-store manifest."""
    from workbench import browse

    d = resolve(root, rel)
    v = browse.open_sae(d)
    return {
        "rel": rel,
        "name": d.name,
        "cfg": v.cfg,
        "hook": v.hook,
        "workbench": v.info,
        "metrics": v.metrics,
        "curves": v.curves,
        "artifact": read_json(d / ARTIFACT),
        "store": read_json(d / "features" / "manifest.json"),
    }


def open_store(root: Path, rel: str):
    from workbench.features import FeatureStore

    return FeatureStore(resolve(root, rel))


def model_dirs(root: Path) -> list[str]:
    """Saved models in the workspace (config.json + model.safetensors)."""
    return sorted(
        str(p.parent.relative_to(root))
        for p in root.glob("models/*/model.safetensors")
        if (p.parent / "config.json").is_file() and p.resolve().is_relative_to(root)
    )


def circuit_dirs(root: Path) -> list[str]:
    """Workspace-relative circuit folders (circuits/<name>/circuit.json), found on disk like SAE folders."""
    return sorted(
        str(p.parent.relative_to(root))
        for p in root.glob("circuits/*/circuit.json")
        if p.resolve().is_relative_to(root)
    )


def sparse_models(root: Path) -> list[str]:
    """Workspace-relative sparse-attention model folders (those holding an attention_report.json)."""
    return [m for m in model_dirs(root) if (root / m / "attention_report.json").is_file()]
