"""harvest(): one forward pass per batch writes every requested hook into on-disk shards;
write_array_cache(): the same cache from rows a callable gives (synthetic activations, no model).

Layout of a cache folder:
  progress.json            the config of a harvest in progress (deleted once manifest.json exists)
  manifest.json            written last: config, shapes, per-file sizes and checksums, per-hook stats
  stats/<hook>.npy         float64 [2, d]: mean and std over the train split
  train/s000000/           whole forward batches of the train split (see shards.py)
      act.<hook>.npy       [rows, d] activations (float32, float16, or bfloat16 bits as uint16)
      norm.<hook>.npy      [rows] float32 L2 norms; outlier = norm > the manifest's threshold
      moments.<hook>.npy   float64 [2, d]: sum and sum of squares of the rows
      tokens.npy positions.npy seq_index.npy doc_ids.npy label.<name>.npy   [rows] per-row metadata
      sequences.npy        int32 [n_seq, ctx_len]: the full sequences the rows came from
      shard.json           rows, sequence range, file sizes and checksums
  heldout/s000000/ ...     same, from the corpus's held-out split

Determinism is what makes --resume exact: batch k of a split always holds the corpus's sequences
[k*batch_size, (k+1)*batch_size) and shards close only between batches, so a resumed harvest
replays the very same forward passes a clean run would have made.
"""

from __future__ import annotations

import dataclasses
import errno
import shutil
import sys
import threading
from collections import deque
from collections.abc import Callable
from contextlib import contextmanager
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from workbench.atomic import check_output_dir, write_json
from workbench.cache.config import CacheConfig, HarvestConfig
from workbench.cache.format import CHECKSUM
from workbench.cache.hooks import mlp_in_hooks, stop_layer, validate_hooks
from workbench.cache.prefetch import prefetched
from workbench.cache.reader import FORMAT, ActivationCache
from workbench.cache.shards import ShardWriter, check_shard, read_record, shard_dirs, shard_name
from workbench.cache.stats import hook_stats
from workbench.corpus.base import SPLITS
from workbench.errors import BadValueError, DamagedFileError, DiskFullError, OutputExistsError
from workbench.provenance import model_id
from workbench.readback import json_file, reading

SHARD_BYTES = 1 << 30  # default shard size: ~1 GiB of activations over all hooks


def harvest(
    model,
    corpus,
    hooks,
    out_dir,
    n_tokens: int | None = None,
    *,
    cfg: HarvestConfig | None = None,
    special_ids=None,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    **options,
) -> ActivationCache:
    """Run `model` over `corpus` once and store the activations of every hook in `hooks`.

    cfg (HarvestConfig) holds every choice and its default; n_tokens and `options` (its field names,
    e.g. dtype="float32") override it. The rows: n_tokens activation rows, train + held-out (exact;
    the last sequence may be cut); held-out rows come from the corpus's held-out split, whose
    documents never appear in train. special_ids: the token ids dropped when cfg.exclude_special
    (default: the tokenizer's BOS/EOS/pad/unk). Rows with a norm above outlier_factor times the
    median train norm are flagged (ActivationCache.outliers). A harvest stops with an error when
    more than max_unknown_fraction of the corpus's tokens are the tokenizer's unknown token (checked
    after every batch; the share is recorded in the manifest as "unknown_fraction"). resume:
    continue an interrupted harvest in out_dir (must have the same config); the result equals a
    clean run. overwrite: replace an existing cache in out_dir.
    """
    if resume and overwrite:
        raise BadValueError("pass resume=True or overwrite=True, not both")
    cfg = dataclasses.replace(cfg or HarvestConfig(), **options, **({} if n_tokens is None else {"n_tokens": n_tokens}))
    cfg, dims = _resolve(model, corpus, hooks, cfg, special_ids)
    out, done, fresh, existed = _start(out_dir, cfg, resume, overwrite)
    if done is None:  # resume of a finished cache
        return ActivationCache.open(out)
    unknown = _UnknownCounter(model.tokenizer, cfg)
    with _writing(out, fresh, existed) as closer, _bar(cfg, done, f"harvest {out.name}", progress) as bar:
        for split in SPLITS:
            _harvest_split(model, corpus, cfg, split, out / split, done[split], closer, bar, unknown)
        closer.join()
        extra = {"n_layers": model.cfg.n_layers, "unknown_fraction": _unknown_fraction(out, unknown)}
        _finalize(out, cfg, corpus.label_names, dims, extra)
    return ActivationCache.open(out)


def _start(out_dir, cfg: CacheConfig, resume: bool, overwrite: bool):
    """(folder, shards already done per split or None when the cache is finished, whether the folder was absent
    or empty, whether it existed): what a write needs before its first shard."""
    out = Path(out_dir)
    existed = out.exists()
    fresh = not existed or (out.is_dir() and not any(out.iterdir()))
    return out, _prepare(out, cfg, resume, overwrite), fresh, existed


def _bar(cfg: CacheConfig, done: dict[str, list[dict]], desc: str, progress: bool):
    initial = sum(r["rows"] for rs in done.values() for r in rs)
    return tqdm(total=cfg.n_tokens, initial=initial, unit="tok", desc=desc, disable=not progress)


@contextmanager
def _writing(out: Path, fresh: bool, existed: bool):
    """A _Closer for the shards of one write into `out`, joined on every way out. A ValueError (the input or
    config is unusable: a rerun fails the same way) leaves the folder as the write found it; a full disk
    becomes DiskFullError, naming the complete shards a resume keeps."""
    closer = _Closer()
    try:
        yield closer
    except ValueError:
        closer.join(raise_error=False)
        if fresh and out.is_dir():  # leave the folder as this call found it, so the corrected command can run
            shutil.rmtree(out)
            if existed:
                out.mkdir()
        raise
    except OSError as e:
        closer.join(raise_error=False)
        if e.errno == errno.ENOSPC:
            n = len([d for s in SPLITS for d in shard_dirs(out / s)])
            raise DiskFullError(
                errno.ENOSPC,
                f"disk full while writing the cache {out}: the {n} complete shards there "
                f"are valid; free some space and rerun with resume=True (--resume)",
            ) from e
        raise
    except BaseException:
        closer.join(raise_error=False)
        raise


def write_array_cache(
    out_dir,
    rows: Callable[[str, int, int], np.ndarray],
    hook: str,
    d: int,
    n_tokens: int,
    *,
    source: str,
    heldout_fraction: float = 0.05,
    dtype: str = "float32",
    block_rows: int = 65_536,
    shard_tokens: int | None = None,
    outlier_factor: float = 10.0,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
) -> ActivationCache:
    """A cache of rows that no model made (synthetic activations with a known dictionary, or ones computed
    elsewhere), in the harvest's format, so the SAE trainer and every reader take it as they take a harvest.

    rows(split, start, n) -> float array [n, d]: rows start..start+n of a split; it must return the same
    rows for the same arguments, since a resume replays the blocks (of block_rows rows) after the last
    complete shard, like a harvest replays its forward passes. `source` names what made the rows; it is
    recorded as the manifest's model and corpus, and a resume with another source is refused. Each row is
    its own one-token "sequence" (token id 0), so per-token metadata stays well defined.
    """
    if resume and overwrite:
        raise BadValueError("pass resume=True or overwrite=True, not both")
    if not (isinstance(d, int) and d >= 1):
        raise BadValueError(f"d={d!r} must be a positive integer (the rows' width)")
    row_bytes = d * (4 if dtype == "float32" else 2)
    cfg = CacheConfig(
        model=source,
        corpus=source,
        hooks=(hook,),
        n_tokens=int(n_tokens),
        ctx_len=1,
        batch_size=block_rows,
        dtype=dtype,
        shard_tokens=max(1, SHARD_BYTES // row_bytes) if shard_tokens is None else shard_tokens,
        heldout_fraction=heldout_fraction,
        exclude_special=False,
        special_ids=(),
        outlier_factor=outlier_factor,
        max_unknown_fraction=1.0,
    )
    out, done, fresh, existed = _start(out_dir, cfg, resume, overwrite)
    if done is None:  # resume of a finished cache
        return ActivationCache.open(out)
    with _writing(out, fresh, existed) as closer, _bar(cfg, done, f"write {out.name}", progress) as bar:
        for split in SPLITS:
            _write_rows(rows, cfg, d, split, out / split, done[split], closer, bar)
        closer.join()
        _finalize(out, cfg, {}, {hook: d}, {})
    return ActivationCache.open(out)


def _write_rows(rows, cfg: CacheConfig, d: int, split: str, split_dir: Path, records: list[dict], closer, bar) -> None:
    """One split of write_array_cache, block by block from the row after the last complete shard."""
    target, hook = cfg.n_rows(split), cfg.hooks[0]
    start = records[-1]["seq_end"] if records else 0  # one sequence per row
    if start >= target:
        return
    split_dir.mkdir(exist_ok=True)
    n_shards, shard = len(records), None
    try:
        for a in range(start, target, cfg.batch_size):
            n = min(cfg.batch_size, target - a)
            x = np.asarray(rows(split, a, n))
            if x.shape != (n, d) or not np.issubdtype(x.dtype, np.floating):
                raise BadValueError(
                    f"rows({split!r}, {a}, {n}) returned a {x.dtype} array of shape {x.shape}; expected floats of "
                    f"shape ({n}, {d})"
                )
            x64 = x.astype(np.float64)
            idx = np.arange(a, a + n)
            block = {
                "tokens": np.zeros(n, np.int32),
                "positions": np.zeros(n, np.int32),
                "seq_index": idx,
                "doc_ids": idx,
                "sequences": np.zeros((n, 1), np.int32),
                f"norm.{hook}": np.sqrt((x64 * x64).sum(1)).astype(np.float32),
                f"act.{hook}": _to_store(torch.from_numpy(np.ascontiguousarray(x, np.float32)), cfg.dtype),
            }
            if shard is None:
                shard = ShardWriter(split_dir / shard_name(n_shards), a)
                n_shards += 1
            shard.append(block, {hook: torch.from_numpy(np.stack([x64.sum(0), (x64 * x64).sum(0)]))}, a + n)
            bar.update(n)
            if shard.rows >= cfg.shard_tokens and a + n < target:
                shard, full = None, shard
                closer.submit(full)
    except BaseException:
        if shard is not None:
            shard.abort()
        raise
    if shard is not None:
        closer.submit(shard)


def _resolve(model, corpus, hooks, cfg: HarvestConfig, special_ids) -> tuple[CacheConfig, dict[str, int]]:
    """The CacheConfig a harvest records (every choice resolved against the model) and each hook's row width."""
    hooks = validate_hooks(model, hooks)
    _check_separators(model, corpus)
    ctx_len = model.cfg.n_ctx if cfg.ctx_len is None else cfg.ctx_len
    if ctx_len > model.cfg.n_ctx:
        raise BadValueError(f"ctx_len={ctx_len} exceeds the model's n_ctx={model.cfg.n_ctx}")
    dims = _probe_dims(model, hooks)
    if special_ids is None:
        special_ids = getattr(model.tokenizer, "all_special_ids", None) or []
    row_bytes = sum(dims.values()) * (4 if cfg.dtype == "float32" else 2)
    cfg = CacheConfig(
        model=model_id(model),
        corpus=corpus.spec,
        hooks=hooks,
        n_tokens=int(cfg.n_tokens),
        ctx_len=ctx_len,
        batch_size=cfg.batch_size,
        dtype=cfg.dtype,
        shard_tokens=max(1, SHARD_BYTES // row_bytes) if cfg.shard_tokens is None else cfg.shard_tokens,
        heldout_fraction=cfg.heldout_fraction,
        exclude_special=cfg.exclude_special,
        special_ids=tuple(sorted(int(i) for i in special_ids)) if cfg.exclude_special else (),
        outlier_factor=cfg.outlier_factor,
        max_unknown_fraction=cfg.max_unknown_fraction,
    )
    return cfg, dims


def _check_separators(model, corpus) -> None:
    """The ids a corpus puts between documents (its tokenizer's BOS and EOS) must have a row in the model's
    embedding: a tokenizer/model pair that breaks this is refused before any work, naming the id and the size."""
    tok, n = getattr(corpus, "tokenizer", None), model.cfg.d_vocab
    for name in ("bos", "eos"):
        i = getattr(tok, f"{name}_token_id", None)
        if i is not None and not 0 <= i < n:
            raise BadValueError(
                f"the corpus tokenizer's {name.upper()} token id {i} lies past the model's embedding (vocabulary "
                f"size {n}: ids 0..{n - 1}); the tokenizer is not this model's: load the corpus with the model's "
                "own tokenizer, or use a model whose vocabulary holds it"
            )


@torch.inference_mode()
def _probe_dims(model, hooks: tuple[str, ...]) -> dict[str, int]:
    """Row width of each hook, from a 2-token forward; rejects hooks that are not one row per token."""
    dims = {}

    def grab(act, hook):
        if act.shape[:2] != (1, 2):
            raise BadValueError(
                f"hook {hook.name!r} has shape {tuple(act.shape)}, not [batch, pos, ...]; "
                "only per-token activations can be cached"
            )
        dims[hook.name] = int(np.prod(act.shape[2:], dtype=np.int64))

    tokens = torch.zeros(1, 2, dtype=torch.long, device=model.cfg.device)
    _run(model, tokens, [(h, grab) for h in hooks], stop_layer(hooks))
    return dims


def _run(model, tokens, fwd_hooks, stop):
    with mlp_in_hooks(model, [name for name, _ in fwd_hooks]), model.hooks(fwd_hooks=fwd_hooks):
        if stop is None:
            model(tokens, return_type=None)
        else:
            model(tokens, stop_at_layer=stop)


def _prepare(out: Path, cfg: CacheConfig, resume: bool, overwrite: bool) -> dict[str, list[dict]] | None:
    """Check the output folder against resume/overwrite; return the shards already done per split."""
    manifest, progress = out / "manifest.json", out / "progress.json"
    if out.exists() and not out.is_dir():
        raise OutputExistsError(f"output path {out} exists and is not a folder")
    check_output_dir(out, "cache folder")
    if out.exists() and any(out.iterdir()):
        is_cache = manifest.is_file() or progress.is_file()
        if overwrite:
            if not is_cache:
                raise OutputExistsError(
                    f"{out} is not empty and holds no activation cache (no manifest.json or "
                    "progress.json); refusing to delete it: choose another output folder"
                )
            shutil.rmtree(out)
        elif not resume:
            what = "an activation cache" if is_cache else "other files"
            raise OutputExistsError(
                f"output folder {out} already holds {what}; pass resume=True (--resume) to continue "
                "an interrupted harvest or overwrite=True (--overwrite) to replace it"
            )
        elif not is_cache:
            raise OutputExistsError(f"cannot resume in {out}: it holds no activation cache (no progress.json)")
        else:
            state = manifest if manifest.is_file() else progress
            way_out = "use overwrite=True (--overwrite) to harvest it afresh"
            on_disk = json_file(state, "cache harvest record", way_out, fields={"config": dict})
            with reading(state, "cache harvest record", way_out):
                old = CacheConfig.from_dict(on_disk["config"])
            if old != cfg:
                raise DamagedFileError(
                    f"cannot resume {out}: it was harvested with another config ("
                    + "; ".join(old.diff(cfg))
                    + "); use overwrite=True (--overwrite) to replace it"
                )
            return None if manifest.is_file() else {s: _resumable_shards(out / s) for s in SPLITS}
    out.mkdir(parents=True, exist_ok=True)
    write_json(progress, {"format": FORMAT, "config": cfg.to_dict()}, indent=1)
    return {s: [] for s in SPLITS}


def _resumable_shards(split_dir: Path) -> list[dict]:
    """Complete shards, checksummed; unfinished .tmp shards are deleted (they are redone)."""
    if split_dir.is_dir():
        for tmp in split_dir.glob("*.tmp"):
            shutil.rmtree(tmp)
    records = []
    for d in shard_dirs(split_dir):
        rec = read_record(d)
        try:
            check_shard(d, rec["files"], full=True)
        except DamagedFileError as e:
            raise DamagedFileError(
                f"{e}; delete shard folder {d} and every later one in {split_dir}, then resume again to redo them"
            ) from e
        records.append(rec)
    return records


class _UnknownCounter:
    """Share of the corpus's tokens (specials aside) that are the tokenizer's unknown token."""

    def __init__(self, tokenizer, cfg: CacheConfig):
        self.unk = getattr(tokenizer, "unk_token_id", None)
        self.special = [int(i) for i in getattr(tokenizer, "all_special_ids", None) or [] if i != self.unk]
        self.cfg, self.n, self.n_unk = cfg, 0, 0

    def fraction(self, tokens: np.ndarray) -> tuple[int, int]:
        if self.unk is None:
            return 0, 0
        text = tokens[~np.isin(tokens, self.special)]
        return int((text == self.unk).sum()), len(text)

    def add(self, tokens: np.ndarray) -> None:
        """Count one batch; raise when the share so far is above cfg.max_unknown_fraction."""
        unk, n = self.fraction(tokens)
        self.n_unk, self.n = self.n_unk + unk, self.n + n
        if self.n and self.n_unk / self.n > self.cfg.max_unknown_fraction:
            raise DamagedFileError(
                f"corpus {self.cfg.corpus}: {self.n_unk} of the first {self.n} tokens ({self.n_unk / self.n:.0%}) are "
                f"unknown to the model's tokenizer (<unk>), above max_unknown_fraction={self.cfg.max_unknown_fraction}; "
                "use text in the model's vocabulary (`workbench model info` shows the model) or pass "
                "--max-unknown-fraction 1 to cache it anyway"
            )


def _harvest_split(
    model,
    corpus,
    cfg: CacheConfig,
    split: str,
    split_dir: Path,
    records: list[dict],
    closer: _Closer,
    bar,
    unknown: _UnknownCounter,
) -> None:
    target = cfg.n_rows(split)
    rows = sum(r["rows"] for r in records)
    seq = records[-1]["seq_end"] if records else 0
    if rows >= target or seq % cfg.batch_size:  # finished: target reached, or the corpus ran out mid-batch
        return
    split_dir.mkdir(exist_ok=True)
    n_shards, shard = len(records), None
    sequences = corpus.sequences(ctx_len=cfg.ctx_len, start=seq, split=split)
    try:
        # the next corpus batches are built on a thread while the model runs
        for batch in prefetched(iter(lambda: list(islice(sequences, cfg.batch_size)), [])):
            block, moments, n_seq = _forward(model, batch, seq, cfg, target - rows)
            unknown.add(block["sequences"])
            if shard is None:
                shard = ShardWriter(split_dir / shard_name(n_shards), seq)
                n_shards += 1
            seq += n_seq
            shard.append(block, moments, seq)
            n = len(block["tokens"])
            rows += n
            bar.update(n)
            if rows >= target:
                break
            if shard.rows >= cfg.shard_tokens:
                shard, full = None, shard
                closer.submit(full)
        else:
            # a notice, not warnings.warn: that prints a line of this file's source under the message
            print(
                f"workbench: corpus {cfg.corpus} ran out after {rows} {split} rows of the {target} requested",
                file=sys.stderr,
            )
    except BaseException:
        if shard is not None:  # its rows are redone on resume; deleting it frees the space now
            shard.abort()
        raise
    if shard is not None:
        closer.submit(shard)


@torch.inference_mode()
def _forward(model, batch, first_seq: int, cfg: CacheConfig, remaining: int):
    """One forward pass -> (file stem -> rows to append, hook -> float64 [2, d] moments, sequences used)."""
    tokens = np.stack([s.tokens for s in batch])
    b, t = tokens.shape
    if t != cfg.ctx_len:
        raise BadValueError(f"corpus {cfg.corpus} yielded sequences of {t} tokens, expected ctx_len={cfg.ctx_len}")
    flat = tokens.reshape(-1)
    keep = np.flatnonzero(~np.isin(flat, cfg.special_ids)) if cfg.exclude_special else np.arange(b * t)
    n_seq = b
    if len(keep) > remaining:  # last batch of the split: keep exactly the rows still wanted
        keep = keep[:remaining]
        n_seq = int(keep[-1]) // t + 1
    device = model.cfg.device
    idx = torch.from_numpy(keep).to(device)
    captured = {}

    def grab(act, hook):
        captured[hook.name] = act.reshape(b * t, -1).index_select(0, idx)

    _run(model, torch.from_numpy(tokens).to(device), [(h, grab) for h in cfg.hooks], stop_layer(cfg.hooks))
    block = {
        "tokens": flat[keep].astype(np.int32),
        "positions": (keep % t).astype(np.int32),
        "seq_index": first_seq + keep // t,
        "doc_ids": np.stack([s.doc_ids for s in batch]).reshape(-1)[keep],
    }
    for name in batch[0].labels:
        block[f"label.{name}"] = np.stack([s.labels[name] for s in batch]).reshape(-1)[keep]
    block["sequences"] = tokens[:n_seq].astype(np.int32)
    moments = {}
    for h in cfg.hooks:
        x = captured[h].float()
        sq = x * x
        # per-batch float32 sums (cascade-summed by torch) go into float64 shard accumulators
        moments[h] = torch.stack([x.sum(0), sq.sum(0)]).double()
        block[f"norm.{h}"] = sq.sum(1).sqrt_().cpu().numpy()
        block[f"act.{h}"] = _to_store(captured[h], cfg.dtype)
    return block, moments, n_seq


def _to_store(x: torch.Tensor, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return x.to(torch.bfloat16).view(torch.int16).cpu().numpy().view(np.uint16)
    return x.to(getattr(torch, dtype)).cpu().numpy()


class _Closer:
    """Finishes shards (fsync, checksum, rename) in order on a worker thread, so the next forward
    passes overlap with the disk; the first error is re-raised in the harvesting thread."""

    def __init__(self):
        self._queue: deque[ShardWriter] = deque()
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="cache-shard-closer", daemon=True)
        self._thread.start()

    def submit(self, shard: ShardWriter) -> None:
        with self._cond:
            self._cond.wait_for(lambda: len(self._queue) < 2 or self._error is not None)
            if self._error is None:
                self._queue.append(shard)
                self._cond.notify_all()
                return
        shard.abort()
        self.join()

    def _work(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._closed)
                if not self._queue:
                    return
                shard = self._queue[0]
            try:
                if self._error is None:
                    shard.finish()
                else:
                    shard.abort()
            except BaseException as e:  # noqa: BLE001 - handed to the harvesting thread
                shard.abort()
                self._error = e
            with self._cond:
                self._queue.popleft()
                self._cond.notify_all()

    def join(self, raise_error: bool = True) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()
        if raise_error and self._error is not None:
            raise self._error


def _unknown_fraction(out: Path, unknown: _UnknownCounter) -> float:
    """Share of the cached sequences' tokens (specials aside) that are the tokenizer's unknown token."""
    counts = np.array([unknown.fraction(np.load(d / "sequences.npy")) for s in SPLITS for d in shard_dirs(out / s)])
    return float(counts[:, 0].sum() / max(1, counts[:, 1].sum())) if len(counts) else 0.0


def _finalize(out: Path, cfg: CacheConfig, label_names: dict, dims: dict[str, int], extra: dict) -> None:
    """Stats and manifest.json (written last: its presence marks the cache finished); `extra`: what only one
    kind of writer records (a harvest: the model's n_layers, the unknown-token share)."""
    shards = {s: [read_record(d) for d in shard_dirs(out / s)] for s in SPLITS}
    if not shards["train"]:
        raise BadValueError(f"corpus {cfg.corpus} yielded no train rows; nothing to cache")
    (out / "stats").mkdir(exist_ok=True)
    stats = {h: hook_stats(out, h, shards, cfg.outlier_factor) for h in cfg.hooks}
    first = shards["train"][0]["files"]
    n_rows = {s: sum(r["rows"] for r in recs) for s, recs in shards.items()}
    manifest = {
        "format": FORMAT,
        "model": cfg.model,
        "corpus": cfg.corpus,
        "hooks": list(cfg.hooks),
        "d": dims,
        "dtype": cfg.dtype,
        "ctx_len": cfg.ctx_len,
        "n_tokens": n_rows,
        "n_sequences": {s: recs[-1]["seq_end"] if recs else 0 for s, recs in shards.items()},
        "shapes": {s: {h: [n_rows[s], dims[h]] for h in cfg.hooks} for s in SPLITS},
        "labels": sorted(f[len("label.") : -len(".npy")] for f in first if f.startswith("label.")),
        "label_names": label_names,
        "config": cfg.to_dict(),
        "checksum": CHECKSUM,
        "stats": stats,
        **extra,  # a harvest: n_layers (so a transcoder set knows the model's layers without loading it)
        "shards": shards,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    write_json(out / "manifest.json", manifest, indent=1)
    (out / "progress.json").unlink()
