"""Atomic file writes and checksums: a crash never leaves a half-written file under its real name."""

from __future__ import annotations

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


def check_outputs(outputs: dict, inputs: dict | None = None) -> None:
    """Refuse, before any work, output files (flag -> path; None: not given) that cannot be written, that are
    one of the inputs (flag -> path), also through a symlink, a relative path or a hard link, or that are
    each other: the later write would replace the earlier file."""
    given = {flag: Path(p) for flag, p in outputs.items() if p is not None}
    seen = {flag: Path(p) for flag, p in (inputs or {}).items() if p is not None}
    for flag, path in given.items():
        check_output_file(path, flag)
        for other, earlier in seen.items():
            if _same_file(path, earlier):
                kind = "the input" if other in (inputs or {}) else "also the output"
                raise BadValueError(
                    f"{flag} {path} is {kind} {other} {earlier}: writing it would replace that file; "
                    "choose another output path"
                )
        seen[flag] = path


def _same_file(a: Path, b: Path) -> bool:
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return a.resolve() == b.resolve()


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
    """Yield a temp path beside `path`; on success fsync it and rename it over `path`."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)  # the rename itself survives a power cut
    finally:
        if tmp.exists():
            tmp.unlink()


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


def read_json(path: str | Path, error: type[Exception], way_out: str, what: str = "workbench JSON file") -> dict:
    """A JSON object the workbench wrote, read through the one read path (workbench.readback.json_file); any
    damage raises `error`, one line naming the file, what is wrong and `way_out` (e.g. "remake it with ...")."""
    from workbench.errors import DamagedFileError
    from workbench.readback import json_file  # it imports this module

    try:
        return json_file(path, what, way_out)
    except DamagedFileError as e:
        if error is DamagedFileError:
            raise
        raise error(str(e)) from None


def write_json(path: str | Path, data, indent: int | None = None) -> None:
    """The one way the workbench saves JSON: made JSON-safe (jsonable), folder created, written atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(jsonable(data), indent=indent))
