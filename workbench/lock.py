"""One writer per output: an exclusive lock beside an output folder for as long as a process writes it.

Two runs writing one folder (two `features build` on one SAE) would delete or overwrite each other's
partial files; the second is refused with the first one's pid and command instead. The lock is an
flock on `.<name>.lock` beside the output, so it dies with its process (kill -9 included) and never
needs clearing by hand; the file is removed on release.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from contextlib import contextmanager
from pathlib import Path

from workbench.errors import UserError


class OutputBusyError(UserError, BlockingIOError):
    """Another process is writing the same output."""


def lock_path(target: str | Path) -> Path:
    target = Path(target)
    return target.parent / f".{target.name}.lock"


@contextmanager
def output_lock(target: str | Path, command: str):
    """Hold the lock on output `target` (a folder or file, which need not exist yet) while the body runs."""
    path = lock_path(target)
    made = [d for d in (path.parent, *path.parent.parents) if not d.exists()]  # removed again if left empty
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputBusyError(
                f"{target} is being written by another process ({_holder(path)}); wait for it to finish, or "
                "stop it and rerun this command"
            ) from None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)  # the holder removed the file between our open and flock: lock the new one
    try:
        os.ftruncate(fd, 0)
        info = {"pid": os.getpid(), "command": command, "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        os.write(fd, json.dumps(info).encode())
        yield path
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)
        for d in made:
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()


def stale_locks(root: str | Path) -> list[Path]:
    """Lock files under root that no process holds (left by a killed one): safe to delete."""
    out = []
    for path in Path(root).rglob(".*.lock"):
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            out.append(path)
        except BlockingIOError:
            pass
        finally:
            os.close(fd)
    return out


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text())
        return f"pid {info['pid']}, {info['command']}, since {info['since']}"
    except (OSError, ValueError, KeyError, TypeError):  # it is still writing its record
        return "its pid not yet recorded"
