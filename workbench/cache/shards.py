"""One shard: whole forward batches of one split, one .npy per hook and per metadata column.

A shard is built in `<name>.tmp/`, and only when every file is complete, fsync'ed and
checksummed (recorded in its shard.json) is the folder renamed to `<name>/` — so a folder without
the .tmp suffix is always a complete shard, whatever moment a harvest was killed at.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import torch

from workbench.atomic import fsync_dir
from workbench.cache.format import CHECKSUM, NpyAppender, checksum, save_bytes, save_npy
from workbench.errors import DamagedFileError
from workbench.readback import json_file, reading

RECORD = "shard.json"


def shard_name(i: int) -> str:
    return f"s{i:06d}"


class ShardWriter:
    def __init__(self, final_dir: Path, seq_start: int):
        self.final_dir, self.seq_start, self.seq_end = final_dir, seq_start, seq_start
        self.tmp = final_dir.with_name(final_dir.name + ".tmp")
        self.tmp.mkdir()
        self.files: dict[str, NpyAppender] = {}
        self.moments: dict[str, torch.Tensor] = {}

    @property
    def rows(self) -> int:
        return self.files["tokens"].rows if self.files else 0

    def append(self, block: dict[str, np.ndarray], moments: dict[str, torch.Tensor], seq_end: int) -> None:
        """block: file stem -> rows to append (row counts differ: `sequences` has one row per sequence)."""
        for stem, arr in block.items():
            if stem not in self.files:
                self.files[stem] = NpyAppender(self.tmp / f"{stem}.npy", arr.dtype, arr.shape[1:])
            self.files[stem].append(arr)
        for hook, m in moments.items():
            self.moments[hook] = self.moments[hook] + m if hook in self.moments else m
        self.seq_end = seq_end

    def finish(self) -> dict:
        """Close, fsync, checksum, record, rename: after this the shard is complete on disk."""
        for f in self.files.values():
            f.close()
        for hook, m in self.moments.items():
            save_npy(self.tmp / f"moments.{hook}.npy", m.cpu().numpy())
        files = {p.name: {"bytes": p.stat().st_size, CHECKSUM: checksum(p)} for p in sorted(self.tmp.iterdir())}
        record = {
            "name": self.final_dir.name,
            "rows": self.rows,
            "seq_start": self.seq_start,
            "seq_end": self.seq_end,
            "files": files,
        }
        save_bytes(self.tmp / RECORD, json.dumps(record, indent=1).encode())
        fsync_dir(self.tmp)
        os.replace(self.tmp, self.final_dir)
        fsync_dir(self.final_dir.parent)
        return record

    def abort(self) -> None:
        for f in self.files.values():
            f.abort()
        shutil.rmtree(self.tmp, ignore_errors=True)


def shard_dirs(split_dir: Path) -> list[Path]:
    """Complete shards in order; raises if the sequence of shard names has a gap."""
    if not split_dir.is_dir():
        return []
    dirs = sorted(p for p in split_dir.iterdir() if p.is_dir() and not p.name.endswith(".tmp"))
    for i, d in enumerate(dirs):
        if d.name != shard_name(i):
            raise DamagedFileError(
                f"{split_dir}: expected shard folder {shard_name(i)}, found {d.name} "
                f"(shards must be numbered without gaps)"
            )
    return dirs


def read_record(shard_dir: Path) -> dict:
    path = shard_dir / RECORD
    if not path.is_file():
        raise DamagedFileError(f"shard {shard_dir} has no {RECORD}")
    record = json_file(path, "cache shard record", "re-harvest the cache (or delete the shard and --resume)")
    with reading(path, "cache shard record"):
        int(record["rows"]), int(record["seq_end"]), dict(record["files"])
    return record


def check_shard(shard_dir: Path, files: dict, full: bool) -> None:
    """Sizes always (cheap: catches truncation); checksums when `full` (reads every byte)."""
    for name, meta in files.items():
        path = shard_dir / name
        if not path.is_file():
            raise DamagedFileError(f"missing cache file {path}")
        size = path.stat().st_size
        if size != meta["bytes"]:
            raise DamagedFileError(
                f"truncated or overwritten cache file {path}: {size} bytes, the manifest records {meta['bytes']}"
            )
        if full and checksum(path) != meta[CHECKSUM]:
            raise DamagedFileError(f"corrupted cache file {path}: {CHECKSUM} checksum does not match the manifest")
