"""ActivationCache: the read side. Activation rows are read with pread, in runs of whole chunks, into
one reusable window buffer; nothing is loaded whole except the small per-row metadata columns a
caller asks for, so a cache of any size reads in bounded memory.

Why not np.memmap: pages of a file mapping count in the process's RSS, and the kernel maps up to
64 KiB around every faulting row (fault-around), so shuffled reads through a map grow RSS towards
the cache size (bench/results/cache.md shows it); dropping pages with madvise makes the next
batch fault them back in. pread keeps the data in the page cache, outside the RSS, at the speed
of a memory copy."""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch

from workbench.cache.config import CacheConfig
from workbench.cache.format import CHECKSUM, STORE_DTYPES, NpyReader, checksum
from workbench.cache.sampler import RowSampler
from workbench.cache.shards import RECORD, check_shard, read_record, shard_name
from workbench.corpus.base import SPLITS, check_split
from workbench.errors import BadValueError, DamagedFileError, MissingInputError
from workbench.provenance import model_id
from workbench.readback import verify_artifact

FORMAT = "workbench-activation-cache/1"
MANIFEST_KEYS = ("config", "dtype", "model", "hooks", "d", "shards", "stats", "labels")  # what every reader uses
MAX_OPEN_FILES = 256
WINDOW_BYTES = 128 << 20  # batches() reads about this much at a time (its buffer)
# (path, size, mtime) of the files whose checksum matched the manifest in this process: each file is
# hashed once, the first time it is read, so flipped bytes never reach a caller (xxh3 hashes at GB/s)
_VERIFIED: set[tuple[str, int, int]] = set()


class ActivationCache:
    def __init__(self, path: Path, manifest: dict):
        self.path, self.manifest = path, manifest
        self.config = CacheConfig.from_dict(manifest["config"])
        self._store = STORE_DTYPES[manifest["dtype"]]
        self._offsets = {s: np.cumsum([0] + [r["rows"] for r in manifest["shards"][s]]) for s in SPLITS}
        self._files: OrderedDict[tuple, NpyReader] = OrderedDict()

    @classmethod
    def open(cls, path, *, model=None, hooks=None, verify: bool = False) -> ActivationCache:
        """Open a finished cache. model (a model or its model_id) and hooks, when given, must match
        what the cache holds. Sizes of all files are always checked (catches truncation), and each
        file's checksum and header the first time this process reads it; verify=True checks every
        file now (reads the whole cache)."""
        path = Path(path)
        manifest_path = path / "manifest.json"
        if not manifest_path.is_file():
            if (path / "progress.json").is_file():
                raise MissingInputError(f"the harvest into {path} did not finish; rerun it with resume=True (--resume)")
            raise MissingInputError(f"no activation cache at {path} (no manifest.json)")
        try:
            manifest = json.loads(manifest_path.read_text())
        except json.JSONDecodeError as e:
            raise DamagedFileError(f"unreadable manifest {manifest_path}: {e}") from e
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            manifest = manifest if isinstance(manifest, dict) else {}
            raise DamagedFileError(f"{manifest_path} has format {manifest.get('format')!r}, expected {FORMAT!r}")
        not_written = f"{manifest_path} is not a manifest a harvest writes"
        missing = [k for k in MANIFEST_KEYS if k not in manifest]
        if missing:
            raise DamagedFileError(f"{not_written}: it lacks {', '.join(missing)}; re-harvest the cache")
        try:
            _check_names(manifest_path, manifest)
            cache = cls(path, manifest)
            cache._expect(model, hooks)
            cache._check(full=False)
        except (KeyError, TypeError, AttributeError, IndexError) as e:  # a part of the wrong JSON shape
            raise DamagedFileError(f"{not_written} ({type(e).__name__}: {e}); re-harvest the cache") from None
        verify_artifact(path, "activation cache")  # its artifact.json's sizes: each file's, the manifest's too
        if verify:
            cache.verify()
        return cache

    def _expect(self, model, hooks) -> None:
        if model is not None:
            if not isinstance(model, str):
                model = model_id(model)
            if model != self.manifest["model"]:
                raise DamagedFileError(
                    f"cache {self.path} was harvested from model {self.manifest['model']!r}, "
                    f"not the requested {model!r}"
                )
        missing = [h for h in ([hooks] if isinstance(hooks, str) else hooks or []) if h not in self.hooks]
        if missing:
            raise DamagedFileError(
                f"cache {self.path} has no hook(s) {', '.join(missing)}; it holds: {', '.join(self.hooks)}"
            )

    def _check(self, full: bool) -> None:
        for split in SPLITS:
            for rec in self.manifest["shards"][split]:
                check_shard(self.path / split / rec["name"], rec["files"], full)
        check_shard(self.path / "stats", {f"{h}.npy": s["file"] for h, s in self.manifest["stats"].items()}, full)

    def verify(self) -> int:
        """Recompute every checksum and check every activation file's header against the manifest;
        raises DamagedFileError naming every bad file, else returns the number of files checked."""
        bad, n = [], 0
        files = [(self.path / "stats", f"{h}.npy", s["file"], None) for h, s in self.manifest["stats"].items()]
        for split in SPLITS:
            for i, rec in enumerate(self.manifest["shards"][split]):
                files += [
                    (self.path / split / rec["name"], name, meta, (split, i)) for name, meta in rec["files"].items()
                ]
        for split in SPLITS:  # each shard's own record: what a resumed harvest reads back
            for rec in self.manifest["shards"][split]:
                n += 1
                try:
                    if read_record(self.path / split / rec["name"]) != rec:
                        raise DamagedFileError(f"{self.path / split / rec['name'] / RECORD} differs from the manifest")
                except DamagedFileError as e:
                    bad.append(str(e))
        for folder, name, meta, shard in files:
            n += 1
            try:
                check_shard(folder, {name: meta}, full=False)
                self._verified(folder / name, meta, force=True)
                if shard is not None and name.startswith("act."):
                    self._file(*shard, name[: -len(".npy")])
            except DamagedFileError as e:
                bad.append(str(e))
        if bad:
            raise DamagedFileError(
                f"{len(bad)} of {n} files in {self.path} are damaged: "
                + "; ".join(bad[:5])
                + ("; ..." if len(bad) > 5 else "")
                + "; re-harvest the cache"
            )
        return n

    def _verified(self, path: Path, meta: dict, force: bool = False) -> Path:
        """path, after checking its checksum against the manifest's record `meta` (once per process
        unless force, which verify() uses)."""
        st = path.stat()
        key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
        if force or key not in _VERIFIED:
            _VERIFIED.discard(key)
            if checksum(path) != meta[CHECKSUM]:
                hint = (
                    ""
                    if force
                    else (f"; re-harvest the cache (`workbench cache verify {self.path}` lists every damaged file)")
                )
                raise DamagedFileError(
                    f"corrupted cache file {path}: {CHECKSUM} checksum does not match the manifest{hint}"
                )
            _VERIFIED.add(key)
        return path

    def _shard_file(self, split: str, shard: int, stem: str) -> Path:
        rec = self.manifest["shards"][split][shard]
        name = f"{stem}.npy"
        if name not in rec["files"]:
            raise DamagedFileError(f"the manifest of {self.path} lists no file {name} in shard {split}/{rec['name']}")
        return self._verified(self._shard_dir(split, shard) / name, rec["files"][name])

    # --- shape -------------------------------------------------------------------------------

    @property
    def hooks(self) -> list[str]:
        return list(self.manifest["hooks"])

    def d(self, hook: str) -> int:
        return self.manifest["d"][self._hook(hook)]

    def n_tokens(self, split: str = "train") -> int:
        return int(self._offsets[self._split(split)][-1])

    def _hook(self, hook: str) -> str:
        if hook not in self.manifest["d"]:
            raise BadValueError(f"cache {self.path} has no hook {hook!r}; it holds: {', '.join(self.hooks)}")
        return hook

    def _split(self, split: str) -> str:
        check_split(split)
        return split

    # --- activations -------------------------------------------------------------------------

    def rows(self, hook: str, idx, split: str = "train", dtype=torch.float32, device="cpu") -> torch.Tensor:
        """Activations of the given row indices, in the order given -> [len(idx), d]."""
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        n = self.n_tokens(split)
        if len(idx) and (idx.min() < 0 or idx.max() >= n):
            raise IndexError(f"row indices must be in [0, {n}) for split {split!r}; got {idx.min()}..{idx.max()}")
        order = np.argsort(idx, kind="stable")
        data = self._gather(self._hook(hook), split, idx[order])
        out = np.empty_like(data)
        out[order] = data
        return self._tensor(out, dtype, device)

    def batches(
        self,
        hook: str,
        batch_size: int,
        split: str = "train",
        seed: int = 0,
        start_batch: int = 0,
        rank: int = 0,
        world_size: int = 1,
        dtype=torch.float32,
        device="cpu",
        skip_outliers: bool = False,
        chunk_rows: int = 16,
        window_bytes: int = WINDOW_BYTES,
        window_rows: int | None = None,
    ):
        """Infinite iterator of shuffled [batch_size, d] tensors (see sampler.py for the order).

        Deterministic given seed, so start_batch=k resumes exactly at batch k. Each rank of
        world_size reads disjoint rows within an epoch. skip_outliers drops rows flagged by
        outliers(). Memory: one window buffer of about window_bytes, whatever the cache size.
        hook may be a list of hooks: each batch is then their rows side by side ([batch_size, sum of
        d], in the order given), token by token the same rows (what a transcoder trains on). window_rows fixes the
        window (and so the order) in rows instead: the same batches whatever hooks a stream holds."""
        hooks = [hook] if isinstance(hook, str) else list(hook)
        sampler = RowSampler(
            self.n_tokens(split),
            batch_size,
            seed=seed,
            rank=rank,
            world_size=world_size,
            exclude=np.flatnonzero(np.any([self.outliers(h, split) for h in hooks], 0)) if skip_outliers else None,
            chunk_rows=chunk_rows,
            window_rows=window_rows or self.window_rows(hooks, batch_size, window_bytes),
        )
        return self._batches(hooks, split, sampler.windows(start_batch), dtype, device)

    def window_rows(self, hooks: list[str], batch_size: int, window_bytes: int = WINDOW_BYTES) -> int:
        """Rows `batches` puts in a window of a stream of these hooks: window_bytes of them, at least a batch."""
        return max(batch_size, window_bytes // (sum(self.d(h) for h in hooks) * self._store.itemsize))

    def _batches(self, hooks, split, windows, dtype, device):
        widths = [self.d(h) for h in hooks]
        ends = np.cumsum(widths)
        buf = None
        for win in windows:
            if buf is None or len(buf) < len(win.rows):
                buf = np.empty((len(win.rows), int(ends[-1])), dtype=self._store)
            for h, a, b in zip(hooks, ends - widths, ends):
                if len(hooks) == 1:
                    self._read_rows(h, split, win.rows, buf)
                else:
                    part = np.empty((len(win.rows), b - a), dtype=self._store)
                    self._read_rows(h, split, win.rows, part)
                    buf[: len(win.rows), a:b] = part
            for pos in win.batches:
                yield self._tensor(buf[pos], dtype, device)

    def _gather(self, hook: str, split: str, rows: np.ndarray) -> np.ndarray:
        """Rows (sorted ascending) of one hook, in their stored dtype."""
        out = np.empty((len(rows), self.d(hook)), dtype=self._store)
        self._read_rows(hook, split, rows, out)
        return out

    def _read_rows(self, hook: str, split: str, rows: np.ndarray, out: np.ndarray) -> None:
        """Ascending rows into out[:len(rows)], one pread per run of consecutive rows within a shard."""
        if not len(rows):
            return
        offsets = self._offsets[split]
        shard = np.searchsorted(offsets, rows, side="right") - 1
        first = np.concatenate([[0], np.flatnonzero((np.diff(rows) != 1) | (np.diff(shard) != 0)) + 1])
        ends = np.append(first[1:], len(rows)) * out[0].nbytes
        files = {s: self._file(split, s, f"act.{hook}") for s in np.unique(shard[first]).tolist()}
        view = memoryview(out.reshape(-1).view(np.uint8))
        for s, r, a, b in zip(
            shard[first].tolist(),
            (rows[first] - offsets[shard[first]]).tolist(),
            (first * out[0].nbytes).tolist(),
            ends.tolist(),
        ):
            files[s].read_into(r, view[a:b])

    def _file(self, split: str, shard: int, stem: str) -> NpyReader:
        key = (split, shard, stem)
        if key in self._files:
            self._files.move_to_end(key)
        else:
            if len(self._files) >= MAX_OPEN_FILES:
                self._files.popitem(last=False)[1].close()
            reader = NpyReader(self._shard_file(split, shard, stem))
            self._files[key] = reader
            hook = stem[len("act.") :]
            want = (self.manifest["shards"][split][shard]["rows"], self.d(hook))
            if tuple(reader.shape) != want or reader.dtype != self._store:
                raise DamagedFileError(
                    f"cache file {reader.path} holds {reader.dtype} {tuple(reader.shape)}, but the "
                    f"manifest records {self._store} {want} (rows, d); the manifest or the file "
                    "was changed: re-harvest the cache"
                )
        return self._files[key]

    def _tensor(self, arr: np.ndarray, dtype, device) -> torch.Tensor:
        t = (
            torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
            if self.manifest["dtype"] == "bfloat16"
            else torch.from_numpy(arr)
        )
        return t.to(device=device).to(dtype)

    def close(self) -> None:
        while self._files:
            self._files.popitem()[1].close()

    # --- per-row metadata --------------------------------------------------------------------

    def _shard_dir(self, split: str, shard: int) -> Path:
        return self.path / split / self.manifest["shards"][split][shard]["name"]

    def _column(self, split: str, stem: str) -> np.ndarray:
        split = self._split(split)
        parts = [np.load(self._shard_file(split, s, stem)) for s in range(len(self.manifest["shards"][split]))]
        if not parts:  # an empty split: keep the train split's dtype and row shape
            like = np.load(self._shard_file("train", 0, stem), mmap_mode="r")
            return np.empty((0, *like.shape[1:]), like.dtype)
        return np.concatenate(parts)

    def labels(self, split: str = "train") -> dict[str, np.ndarray]:
        """Per-row corpus labels (names in manifest["label_names"])."""
        return {name: self._column(split, f"label.{name}") for name in self.manifest["labels"]}

    def token_ids(self, split: str = "train") -> np.ndarray:
        return self._column(split, "tokens").astype(np.int64)

    def positions(self, split: str = "train") -> np.ndarray:
        return self._column(split, "positions").astype(np.int64)

    def seq_index(self, split: str = "train") -> np.ndarray:
        """Row -> index into sequences(split)."""
        return self._column(split, "seq_index")

    def doc_ids(self, split: str = "train") -> np.ndarray:
        return self._column(split, "doc_ids")

    def sequences(self, split: str = "train") -> np.ndarray:
        """int64 [n_seq, ctx_len]: the full token sequences the rows came from."""
        return self._column(split, "sequences").astype(np.int64)

    def norms(self, hook: str, split: str = "train") -> np.ndarray:
        return self._column(split, f"norm.{self._hook(hook)}")

    def outliers(self, hook: str, split: str = "train") -> np.ndarray:
        """bool per row: norm above outlier_factor x the median train norm of this hook."""
        return self.norms(hook, split) > self.manifest["stats"][hook]["outlier_threshold"]

    def stats(self, hook: str) -> dict:
        """Train-split statistics: mean and std vectors (float32 tensors [d]) and scalar norms."""
        s = self.manifest["stats"][self._hook(hook)]
        mean, std = np.load(self._verified(self.path / "stats" / f"{hook}.npy", s["file"]))
        return {
            "mean": torch.from_numpy(mean).float(),
            "std": torch.from_numpy(std).float(),
            "n": s["n"],
            "mean_norm": s["mean_norm"],
            "median_norm": s["median_norm"],
            "outlier_threshold": s["outlier_threshold"],
        }

    def __repr__(self) -> str:
        return (
            f"ActivationCache({str(self.path)!r}, model={self.manifest['model']!r}, hooks={len(self.hooks)}, "
            f"train={self.n_tokens('train')}, heldout={self.n_tokens('heldout')}, dtype={self.manifest['dtype']})"
        )


def check_aligned(a: ActivationCache, b: ActivationCache) -> None:
    """Refuse two caches whose rows are not the same tokens in the same order (a transcoder reading one and
    reconstructing the other would pair activations of different tokens): same model, and per split the same
    row count, token ids, sequence index and positions."""
    if a.manifest.get("model") != b.manifest.get("model"):
        raise DamagedFileError(
            f"caches {a.path} and {b.path} come from different models ({a.manifest.get('model')!r} vs "
            f"{b.manifest.get('model')!r}); their rows cannot be paired"
        )
    for split in SPLITS:
        if a.n_tokens(split) != b.n_tokens(split):
            raise DamagedFileError(
                f"caches {a.path} and {b.path} hold {a.n_tokens(split)} vs {b.n_tokens(split)} {split} rows: "
                "different token streams or splits; harvest both hooks into one cache"
            )
        for what in ("token_ids", "seq_index", "positions"):
            diff = np.flatnonzero(getattr(a, what)(split) != getattr(b, what)(split))
            if len(diff):
                raise DamagedFileError(
                    f"caches {a.path} and {b.path} differ at {split} row {int(diff[0])} ({what}): different token "
                    "streams (corpus, seed, context length or held-out split); harvest both hooks into one cache"
                )


def _check_names(manifest_path: Path, manifest: dict) -> None:
    """Shard, file and hook names in a manifest must be the plain names a harvest writes, so that a
    crafted or damaged manifest cannot make a reader (or a resume) open files outside the cache."""
    bad = []
    for split in SPLITS:
        for i, rec in enumerate(manifest.get("shards", {}).get(split, [])):
            if rec.get("name") != shard_name(i):
                bad.append(f"shard {i} of {split} is named {rec.get('name')!r}, expected {shard_name(i)!r}")
            bad += [
                f"file name {f!r} in shard {split}/{rec.get('name')}" for f in rec.get("files", {}) if not _plain(f)
            ]
    bad += [f"hook name {h!r}" for h in [*manifest.get("hooks", []), *manifest.get("stats", {})] if not _plain(h)]
    if bad:
        raise DamagedFileError(
            f"{manifest_path} is not a manifest a harvest writes: {'; '.join(bad[:3])}; re-harvest the cache"
        )


def _plain(name) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\\" not in name
