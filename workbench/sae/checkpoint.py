"""Checkpoint files that are either complete and verified or rejected with a clear error.

torch.load does not notice flipped bytes inside a tensor, so the file carries a SHA-256 of its
payload in a one-line header; writes go to a temp file in the same folder and then os.replace.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import torch

from workbench.atomic import atomic_path
from workbench.errors import UserError

MAGIC = b"WORKBENCH-SAE-CHECKPOINT-1 "


class CheckpointError(UserError, ValueError):
    """A checkpoint is missing, corrupted, or from a different configuration."""


def write(path: Path, state: dict) -> None:
    buf = io.BytesIO()
    torch.save(state, buf)
    payload = buf.getvalue()
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n")
        f.write(payload)


def read(path: Path) -> dict:
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    data = path.read_bytes()
    head, _, payload = data.partition(b"\n")
    if not head.startswith(MAGIC):
        raise CheckpointError(f"{path} is not a workbench SAE checkpoint (bad header)")
    if hashlib.sha256(payload).hexdigest().encode() != head[len(MAGIC):]:
        raise CheckpointError(f"{path} is corrupted: its checksum does not match its contents; "
                              "delete it to start over or restore a good copy")
    try:
        return torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several types for unreadable archives
        raise CheckpointError(f"{path} is corrupted: {e}") from e


def config_diff(saved, current, prefix: str = "") -> list[str]:
    """Human-readable differences between two nested configs (dicts and lists)."""
    if isinstance(saved, dict) and isinstance(current, dict):
        keys = sorted(set(saved) | set(current))
        return [d for k in keys for d in config_diff(saved.get(k, "<absent>"), current.get(k, "<absent>"),
                                                    f"{prefix}{k}.")]
    if isinstance(saved, list) and isinstance(current, list) and len(saved) == len(current):
        return [d for i, (a, b) in enumerate(zip(saved, current)) for d in config_diff(a, b, f"{prefix}{i}.")]
    return [] if saved == current else [f"{prefix.rstrip('.')}: checkpoint {saved!r} != now {current!r}"]
