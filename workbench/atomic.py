"""Atomic file writes and checksums: a crash never leaves a half-written file under its real name."""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
from contextlib import contextmanager
from pathlib import Path

from workbench.errors import BadValueError


def check_output_file(path: str | Path, what: str = "output file") -> Path:
    """Refuse, before any work, a file path that a later atomic write could not create."""
    path = Path(path)
    if path.is_dir():
        raise BadValueError(f"{what} {path} is an existing folder; give a file path such as {path / 'out.json'}")
    _check_creatable(path.parent, path, what)
    return path


def check_output_dir(path: str | Path, what: str = "output folder") -> Path:
    """Refuse, before any work, a folder path that cannot be created or written to."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise BadValueError(f"{what} {path} is an existing file, not a folder; choose another path")
    _check_creatable(path, path, what)
    return path


def _check_creatable(folder: Path, target: Path, what: str) -> None:
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise BadValueError(f"{what} {target} cannot be created: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise BadValueError(f"{what} {target} cannot be written: no write permission in {existing}")


@contextmanager
def atomic_path(path: str | Path):
    """Yield a temp path beside `path`; on success fsync it and rename it over `path`. A write that fails on a full
    disk raises OSError(ENOSPC) naming `path`, whichever library wrote (see `_disk_full`)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)  # the rename itself survives a power cut
    except Exception as e:
        code = _disk_full(e, path.parent)
        if code is not None:
            raise OSError(code, os.strerror(code), str(path)) from e
        raise
    finally:
        if tmp.exists():
            tmp.unlink()


FULL_BELOW = 1 << 20  # bytes free under which a library's failed write is put down to a full disk


def _disk_full(e: Exception, folder: Path) -> int | None:
    """The errno (ENOSPC, EDQUOT) of a write that failed for want of space, to be raised naming the file, or None.
    A plain write's OSError carries it without the file's name; torch.save reports it as a RuntimeError of its
    stream writer, safetensors as a SafetensorError, numpy as an OSError without errno: tracebacks, unless
    confirmed here by the file system (under FULL_BELOW bytes left on it)."""
    if isinstance(e, OSError) and e.errno is not None:
        return e.errno if e.errno in (errno.ENOSPC, errno.EDQUOT) and e.filename is None else None
    if not isinstance(e, (OSError, RuntimeError)) and type(e).__name__ != "SafetensorError":
        return None
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return errno.ENOSPC if st.f_bavail * st.f_frsize < FULL_BELOW else None


def fsync_dir(folder: Path) -> None:
    """Make a rename or a new file inside `folder` survive a power cut (the folder's entry list is data too)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text)


def sha256_file(path: str | Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def jsonable(x):
    """A JSON-safe copy: arrays and tensors (anything with .tolist()) to lists, NaN/inf to None."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if hasattr(x, "tolist") and not isinstance(x, (str, bytes)):
        return jsonable(x.tolist())
    return x


def write_json(path: str | Path, data, indent: int | None = None) -> None:
    """The one way the workbench saves JSON: made JSON-safe (jsonable), folder created, written atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(jsonable(data), indent=indent))
