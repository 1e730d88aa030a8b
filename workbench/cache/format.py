"""On-disk primitives of the cache: appendable .npy files, checksums, atomic JSON, read-only maps.

Every byte a harvest writes goes through `_write`, the single I/O boundary (tests inject ENOSPC
there). Files are plain .npy, so `np.load(path, mmap_mode="r")` reads any of them without us.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import xxhash

from workbench.errors import DamagedFileError

CHECKSUM = "xxh3_128"
STORE_DTYPES = {"float32": np.dtype("<f4"), "float16": np.dtype("<f2"), "bfloat16": np.dtype("<u2")}  # bf16 as raw bits


def _write(fd: int, data: memoryview) -> None:
    while data.nbytes:
        n = os.write(fd, data)
        data = data[n:]


def _header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    )
    return buf.getvalue()


class NpyAppender:
    """A .npy file grown block by block; numpy reserves header room for the row count to grow,
    so close() patches the final shape in place instead of rewriting the data."""

    def __init__(self, path: Path, dtype: np.dtype, row_shape: tuple[int, ...] = ()):
        self.path, self.dtype, self.row_shape, self.rows = path, np.dtype(dtype), tuple(row_shape), 0
        self._head_len = len(_header(self.dtype, (0, *self.row_shape)))
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        _write(self.fd, memoryview(_header(self.dtype, (0, *self.row_shape))))

    def append(self, block: np.ndarray) -> None:
        block = np.ascontiguousarray(block, dtype=self.dtype)
        if block.shape[1:] != self.row_shape:
            raise DamagedFileError(
                f"{self.path.name}: block rows have shape {block.shape[1:]}, expected {self.row_shape}"
            )
        _write(self.fd, memoryview(block.reshape(-1).view(np.uint8)))
        self.rows += len(block)

    def close(self) -> None:
        head = _header(self.dtype, (self.rows, *self.row_shape))
        assert len(head) == self._head_len, "numpy header grew; cannot patch in place"
        os.pwrite(self.fd, head, 0)
        os.fsync(self.fd)
        self.abort()

    def abort(self) -> None:
        """Close without finishing (safe to call twice: a failed close() is followed by an abort)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


CHECKSUM_CHUNK = 1 << 23  # bytes checksum() reads at a time (its buffer)


def checksum(path: Path) -> str:
    h = xxhash.xxh3_128()
    buf = bytearray(CHECKSUM_CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def save_bytes(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write(fd, memoryview(data))
        os.fsync(fd)
    finally:
        os.close(fd)


def save_npy(path: Path, arr: np.ndarray) -> None:
    """Small whole arrays (sequences, moments) written like the big ones, through `_write`."""
    w = NpyAppender(path, arr.dtype, arr.shape[1:])
    try:
        w.append(arr)
    except BaseException:
        w.abort()
        raise
    w.close()


class NpyReader:
    """Reads rows of one .npy file with pread. Nothing is mapped, so the pages read stay in the
    page cache but never count in this process's RSS, whatever the size of the cache."""

    def __init__(self, path: Path):
        self.path = path
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read_header = (
                np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            )
            self.shape, fortran, self.dtype = read_header(f)
            self.offset = f.tell()
        if fortran:
            raise DamagedFileError(f"{path}: Fortran-ordered arrays are not part of the cache format")
        self.row_bytes = int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize
        self._file = open(path, "rb", buffering=0)  # a file object, so a forgotten reader still closes

    def read_into(self, start: int, out: memoryview) -> None:
        """Fill `out` (the bytes of whole rows) with rows start, start + 1, ..."""
        pos = self.offset + start * self.row_bytes
        while out.nbytes:
            n = os.preadv(self._file.fileno(), [out], pos)
            if n == 0:
                row = (pos - self.offset) // self.row_bytes
                raise DamagedFileError(f"cache file {self.path} ends before row {row} (truncated)")
            out, pos = out[n:], pos + n

    def close(self) -> None:
        self._file.close()
