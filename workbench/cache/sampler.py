"""Shuffled batches of row indices: deterministic, resumable, disjoint across ranks, disk-friendly.

Each epoch cuts the rows into chunks of `chunk_rows` contiguous rows (at a random offset, so the
few rows left over at the ends differ per epoch), permutes the chunks with a seed shared by all
ranks and deals them out: rank r takes chunks r, r + world_size, ... so ranks never read the same
row in an epoch. A rank reads its chunks a window (about `window_rows` rows from thousands of
random chunks) at a time, and each batch is a random subset of one window: reads stay sequential
runs of whole chunks, while a batch mixes rows from all over the cache. Rows of a window that do
not fill a last batch are skipped that epoch. Memory is O(rows / chunk_rows) indices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.errors import BadValueError

MAX_CHUNKS = 1 << 22  # chunks per epoch; bigger caches get longer chunks, capping index memory at 32 MiB


@dataclass
class Window:
    rows: np.ndarray  # int64, ascending: the rows to read, whole chunks
    batches: list[np.ndarray]  # each: ascending positions into `rows`


class RowSampler:
    def __init__(
        self,
        n_rows: int,
        batch_size: int,
        *,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        exclude: np.ndarray | None = None,
        chunk_rows: int = 16,
        window_rows: int = 1 << 16,
    ):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
        if batch_size < 1:
            raise BadValueError(f"batch_size must be >= 1, got {batch_size}")
        # long chunks for huge caches (bounded index memory), short ones for small caches (each epoch
        # leaves out < 2 chunks at the ends, so keep that a small share of each rank's rows)
        c = max(min(chunk_rows, n_rows // (64 * world_size)), -(-n_rows // MAX_CHUNKS), 1)
        self.chunk, self.n_chunks = c, max(0, (n_rows - c + 1) // c)
        self.per_rank = self.n_chunks // world_size
        self.window = -(-max(window_rows // batch_size, 1) * batch_size // c)  # chunks per window: k batches + < c rows
        self.batch_size, self.seed, self.rank, self.world_size = batch_size, seed, rank, world_size
        self.exclude = exclude if exclude is not None and len(exclude) else None
        if self._batches_per_window(self._starts(0)).sum() < 1:
            raise BadValueError(
                f"batch_size={batch_size} is too large: rank {rank} of {world_size} gets "
                f"{self.per_rank * c} of the {n_rows} rows per epoch, in windows of {self.window * c} rows"
            )

    def _starts(self, epoch: int) -> np.ndarray:
        """First row of each chunk this rank reads in `epoch`, in reading order."""
        rng = np.random.default_rng([self.seed, epoch])
        offset = int(rng.integers(self.chunk))
        chunks = rng.permutation(self.n_chunks)[self.rank :: self.world_size][: self.per_rank]
        return offset + chunks.astype(np.int64) * self.chunk

    def _batches_per_window(self, starts: np.ndarray) -> np.ndarray:
        per_chunk = np.full(len(starts), self.chunk, dtype=np.int64)
        if self.exclude is not None:
            per_chunk -= np.searchsorted(self.exclude, starts + self.chunk) - np.searchsorted(self.exclude, starts)
        if not len(starts):
            return per_chunk
        return np.add.reduceat(per_chunk, np.arange(0, len(starts), self.window)) // self.batch_size

    def batches_per_epoch(self, epoch: int = 0) -> int:
        return int(self._batches_per_window(self._starts(epoch)).sum())

    def _window(self, epoch: int, w: int, starts: np.ndarray, first_batch: int) -> Window:
        rows = (np.sort(starts[w * self.window : (w + 1) * self.window])[:, None] + np.arange(self.chunk)).reshape(-1)
        keep = np.arange(len(rows))
        if self.exclude is not None:
            pos = np.minimum(np.searchsorted(self.exclude, rows), len(self.exclude) - 1)
            keep = keep[self.exclude[pos] != rows]
        order = np.random.default_rng([self.seed, epoch, self.rank, w]).permutation(keep)
        b = self.batch_size
        return Window(rows, [np.sort(order[k * b : (k + 1) * b]) for k in range(first_batch, len(order) // b)])

    def windows(self, start_batch: int = 0):
        """Infinite iterator of windows; the first one starts at batch `start_batch`."""
        epoch, skip = 0, start_batch
        if self.exclude is None:  # every epoch has the same number of batches: jump straight there
            epoch, skip = divmod(start_batch, self.batches_per_epoch(0))
        while True:
            starts = self._starts(epoch)
            counts = self._batches_per_window(starts)
            if skip >= counts.sum():
                skip -= int(counts.sum())
                epoch += 1
                continue
            edges = np.concatenate([[0], np.cumsum(counts)])
            first = int(np.searchsorted(edges, skip, side="right")) - 1
            for w in range(first, len(counts)):
                yield self._window(epoch, w, starts, skip - int(edges[w]) if w == first else 0)
            epoch, skip = epoch + 1, 0

    def batches(self, start_batch: int = 0):
        """Infinite iterator of ascending row-index arrays; batch k is the same whatever start_batch is."""
        for win in self.windows(start_batch):
            for pos in win.batches:
                yield win.rows[pos]
