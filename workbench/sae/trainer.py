"""The training loop: several SAEs on one stream of batches, exact resume, DDP under torchrun.

`Trainer` owns the SAEs, their optimisers, schedules and dead/dense counters and does one step on
one batch; `run_steps` drives it over any iterable (what benchmarks call); `fit` adds the data
position, checkpoints, curves and the saved SAELens folders; `train` reads the activation cache.

A stream row may hold several hooks side by side (one cache read gives them token by token): each
SAE then reads its own columns (`columns`), e.g. a transcoder its [input | target] pair, and a
transcoder set (workbench.sae.transcoders) every layer's pair in one pass.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from workbench import checkpoint
from workbench.atomic import atomic_write_text, check_output_dir
from workbench.checkpoint import default_device, dist_info
from workbench.errors import ConfigError, DamagedFileError, UserError
from workbench.sae.architectures import build
from workbench.sae.config import SAEConfig, TrainConfig
from workbench.sae.io import save_sae
from workbench.schedule import lr_factor

CHECKPOINT, RUN, CURVES = "checkpoint.pt", "run.json", "curves.jsonl"
# TrainConfig fields that do not change the numbers, so a resume may change them
RESUME_FREE = ("progress", "device", "extra", "checkpoint_every", "max_fvu", "memory_budget_mib")


class NonFiniteError(UserError, RuntimeError):
    """A batch or a loss contained NaN/inf, or training diverged (FVU far above 1); the message names the step.
    No checkpoint is written."""


class Trainer:
    def __init__(
        self,
        sae_cfgs: list[SAEConfig],
        train_cfg: TrainConfig,
        device: torch.device | str = "cpu",
        d_in: int | None = None,
        columns: list[tuple[int, int]] | None = None,
    ):
        """sae_cfgs must be resolved (SAEConfig.resolve) unless d_in is given, which resolves them.
        columns: the [start, end) columns of a stream row each SAE reads; None: the whole row."""
        self.rank, self.world = dist_info()
        train_cfg = train_cfg.resolve(world_size=self.world)
        if d_in is not None:
            sae_cfgs = [c.resolve(d_in, train_cfg.n_tokens) for c in sae_cfgs]
        names = [c.name for c in sae_cfgs]
        if len(set(names)) != len(names):
            raise ConfigError(f"SAE names must be unique within a run, got {names}")
        self.cfgs, self.train_cfg = sae_cfgs, train_cfg
        self.device = torch.device(device)
        self.saes = [build(c).to(self.device) for c in sae_cfgs]
        self.opts = [
            torch.optim.Adam(
                [p for p in s.parameters() if p.requires_grad], lr=train_cfg.lr, betas=train_cfg.adam_betas, fused=True
            )
            for s in self.saes
        ]
        self.scheds = [
            torch.optim.lr_scheduler.LambdaLR(
                o, lambda i: lr_factor(i, train_cfg.warmup_steps, train_cfg.n_steps, train_cfg.decay_frac)
            )
            for o in self.opts
        ]
        self.since_fired = [torch.zeros(c.n_units, dtype=torch.long, device=self.device) for c in sae_cfgs]
        self.window_fires = [torch.zeros(c.n_units, dtype=torch.long, device=self.device) for c in sae_cfgs]
        self.window_sums: list[dict] = [defaultdict(float) for _ in sae_cfgs]
        self.window_steps = self.window_tokens = 0
        self.curves: list[list[dict]] = [[] for _ in sae_cfgs]
        self.step = 0  # batches consumed = the data position
        self.tokens = 0
        self.skipped: list[int] = []
        self.initialised = False
        self.modules = self.saes
        self.columns = [slice(a, b) for a, b in columns] if columns else [slice(None)] * len(self.saes)
        if len(self.columns) != len(self.saes):
            raise ConfigError(f"{len(self.columns)} column ranges for {len(self.saes)} SAEs")

    # ---- setup -------------------------------------------------------------------------------
    def initialise(self, x: torch.Tensor) -> None:
        """Data-dependent init from the first batch(es), then wrap in DDP.

        Under torchrun every rank initialises from all ranks' rows (gathered): DDP broadcasts only
        parameters (broadcast_buffers=False), so buffers set here (scales, a transcoder's input centre)
        must come out the same on every rank, and the same as one process on the same global batch."""
        x = x.to(self.device, torch.float32)
        if self.world > 1:
            parts = [torch.empty_like(x) for _ in range(self.world)]
            dist.all_gather(parts, x.contiguous())
            x = torch.cat(parts)
        x = x[torch.isfinite(x).all(-1)]
        if x.shape[0] == 0:
            raise NonFiniteError("every row of the initialisation batch is NaN/inf")
        for sae, cols in zip(self.saes, self.columns):
            sae.init_from_batch(x[:, cols])
        self.initialised = True
        self._wrap()

    def _wrap(self) -> None:
        if self.world > 1:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.modules = [DistributedDataParallel(s, device_ids=ids, broadcast_buffers=False) for s in self.saes]

    # ---- one step ----------------------------------------------------------------------------
    def _allreduce(self, t: torch.Tensor, op=None) -> torch.Tensor:
        if self.world > 1:
            dist.all_reduce(t, op=op or dist.ReduceOp.SUM)
        return t

    def train_step(self, x: torch.Tensor) -> bool:
        """One optimisation step of every SAE on batch x (this rank's share); False if skipped."""
        if not self.initialised:
            raise RuntimeError("call Trainer.initialise(first_batch) (or load a checkpoint) before training")
        x = x.to(self.device, torch.float32, non_blocking=True)
        bad = self._allreduce(torch.tensor([float(not torch.isfinite(x).all())], device=self.device))
        if bad.item():
            if self.train_cfg.on_nonfinite == "stop":
                raise NonFiniteError(
                    f"the batch at step {self.step} contains NaN/inf; stopped "
                    f"(on_nonfinite='stop'); the last checkpoint is intact"
                )
            self.skipped.append(self.step)
            self.step += 1
            return False
        global_tokens = x.shape[0] * self.world
        use_amp = self.device.type == "cuda" and self.train_cfg.autocast
        amp = torch.autocast("cuda", dtype=torch.bfloat16) if use_amp else nullcontext()
        for i, (sae, module) in enumerate(zip(self.saes, self.modules)):
            dead = self.since_fired[i] >= sae.cfg.dead_tokens
            with amp:
                out = module(x[:, self.columns[i]], dead)
            self.opts[i].zero_grad(set_to_none=True)
            out["loss"].backward()
            loss = self._allreduce(out["loss"].detach().float().reshape(1).clone()) / self.world
            if not torch.isfinite(loss).all():
                raise NonFiniteError(
                    f"SAE {sae.cfg.name!r}: the loss is NaN/inf at step {self.step} "
                    f"(terms: { {k: float(v) for k, v in out['losses'].items()} }); "
                    "no checkpoint was written; lower the learning rate"
                )
            sae.project_decoder_grad()
            self.opts[i].step()
            self.scheds[i].step()
            sae.normalise_decoder()
            stats = self._reduce_stats(out["stats"])
            sae.after_step(stats)
            fires = stats["unit_fires"]
            self.since_fired[i] += global_tokens
            self.since_fired[i][fires > 0] = 0
            self.window_fires[i] += fires
            sums = self.window_sums[i]
            sums["loss"] += loss
            for k, v in out["losses"].items():
                sums[k] += self._allreduce(v.detach().float().reshape(1).clone()) / self.world
            for k in ("mse", "fvu", "l0", "block_l0"):
                if k in stats:
                    sums[k] += stats[k]
        self.step += 1
        self.tokens += global_tokens
        self.window_steps += 1
        self.window_tokens += global_tokens
        return True

    def _reduce_stats(self, stats: dict) -> dict:
        out = {}
        for k, v in stats.items():
            v = v.detach().clone()
            if k == "unit_fires":
                out[k] = self._allreduce(v)
            elif k == "min_kept":
                out[k] = self._allreduce(v, dist.ReduceOp.MIN if self.world > 1 else None)
            else:
                out[k] = self._allreduce(v.float()) / self.world
        return out

    # ---- curves ------------------------------------------------------------------------------
    def log_point(self) -> None:
        """Append one curve row per SAE: means over the steps since the last row."""
        if self.window_steps == 0:
            return
        for i, sae in enumerate(self.saes):
            c = sae.cfg
            row = {"step": self.step, "tokens": self.tokens, "lr": self.scheds[i].get_last_lr()[0]}
            row.update({k: float(v) / self.window_steps for k, v in self.window_sums[i].items()})
            n_dead = int((self.since_fired[i] >= c.dead_tokens).sum())
            frac = self.window_fires[i].double() / max(1, self.window_tokens)
            n_dense = int((frac > c.dense_tau).sum())
            row.update(
                {
                    "n_dead": n_dead,
                    "dead_frac": n_dead / c.n_units,
                    "n_dense": n_dense,
                    "dense_frac": n_dense / c.n_units,
                    "skipped_batches": len(self.skipped),
                }
            )
            if hasattr(sae, "threshold"):
                row["threshold"] = float(sae.threshold)
            if hasattr(sae, "sparsity_coef"):
                row["sparsity_coef"] = float(sae.sparsity_coef)
            fvu = row.get("fvu", 0.0)
            if not fvu <= self.train_cfg.max_fvu:  # also NaN
                raise NonFiniteError(
                    f"SAE {c.name!r} diverged: mean FVU {fvu:.3g} over steps {self.step - self.window_steps}"
                    f"..{self.step} (above max_fvu={self.train_cfg.max_fvu:g}; {n_dead / c.n_units:.0%} of "
                    f"latents dead); no checkpoint was written; lower the learning rate "
                    f"(lr={self.train_cfg.lr:g})"
                )
            self.curves[i].append(row)
            self.window_sums[i] = defaultdict(float)
            self.window_fires[i].zero_()
        self.window_steps = self.window_tokens = 0

    # ---- state -------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "step": self.step,
            "tokens": self.tokens,
            "skipped": list(self.skipped),
            "window_steps": self.window_steps,
            "window_tokens": self.window_tokens,
            "saes": [
                {
                    "model": sae.state_dict(),
                    "optim": self.opts[i].state_dict(),
                    "sched": self.scheds[i].state_dict(),
                    "since_fired": self.since_fired[i].cpu(),
                    "window_fires": self.window_fires[i].cpu(),
                    "window_sums": {k: float(v) for k, v in self.window_sums[i].items()},
                    "curves": self.curves[i],
                }
                for i, sae in enumerate(self.saes)
            ],
        }

    def load_state_dict(self, state: dict) -> None:
        self.step, self.tokens, self.skipped = state["step"], state["tokens"], list(state["skipped"])
        self.window_steps, self.window_tokens = state["window_steps"], state["window_tokens"]
        for i, s in enumerate(state["saes"]):
            self.saes[i].load_state_dict(s["model"])
            self.opts[i].load_state_dict(s["optim"])
            self.scheds[i].load_state_dict(s["sched"])
            self.since_fired[i] = s["since_fired"].to(self.device)
            self.window_fires[i] = s["window_fires"].to(self.device)
            self.window_sums[i] = defaultdict(float, s["window_sums"])
            self.curves[i] = list(s["curves"])
        self.initialised = True
        self._wrap()

    def params_finite(self) -> bool:
        return all(
            torch.isfinite(p).all() for sae in self.saes for p in sae.state_dict().values() if p.is_floating_point()
        )


def run_steps(trainer: Trainer, batches: Iterable[torch.Tensor], n_steps: int) -> Trainer:
    """Run n_steps steps of every SAE over `batches` (initialising from the first if needed)."""
    it = iter(batches)
    for _ in range(n_steps):
        x = next(it)
        if not trainer.initialised:
            trainer.initialise(x)
        trainer.train_step(x)
    return trainer


def _run_record(cfgs: list[SAEConfig], train_cfg: TrainConfig, data: dict) -> dict:
    tc = {k: v for k, v in train_cfg.to_dict().items() if k not in RESUME_FREE}
    # the cache may move between a crash and the resume; what it holds may not
    return {
        "sae_configs": [c.to_dict() for c in cfgs],
        "train_config": tc,
        "data": {k: v for k, v in data.items() if k != "cache"},
    }


def fit(
    sae_cfgs: list[SAEConfig],
    train_cfg: TrainConfig,
    make_batches: Callable[[int, int, int], Iterator],
    d_in: int | None,
    out_dir: str | Path,
    resume: bool = False,
    data: dict | None = None,
    metadata: dict | list[dict] | None = None,
    columns: list[tuple[int, int]] | None = None,
    state_dir: str | Path | None = None,
) -> list[Path]:
    """Train every SAE on one stream and save each in SAELens format under out_dir/<name>.

    make_batches(start_batch, rank, world_size) yields this rank's [B/world, width] batches from
    data position start_batch on. d_in resolves the configs (None: they are resolved already).
    `data` identifies the stream (compared on resume); `metadata` goes into each cfg.json (hook_name,
    model_name, ...; a list: one per SAE); columns: see Trainer. state_dir: where the run's checkpoint and
    run.json go (default out_dir; a transcoder set's passes each have their own).
    """
    out = check_output_dir(out_dir, "SAE output folder")
    run_dir = Path(state_dir) if state_dir is not None else out
    rank, world = dist_info()
    train_cfg = train_cfg.resolve(world_size=world)
    cfgs = [c if d_in is None else c.resolve(d_in, train_cfg.n_tokens) for c in sae_cfgs]
    metas = metadata if isinstance(metadata, list) else [metadata] * len(cfgs)
    record = _run_record(cfgs, train_cfg, data or {})
    ckpt = run_dir / CHECKPOINT
    if resume and not ckpt.is_file():
        raise DamagedFileError(f"resume=True (--resume) but {ckpt} does not exist; train without it first")
    if not resume and ckpt.is_file():
        raise DamagedFileError(
            f"{run_dir} already holds a run ({CHECKPOINT}); pass resume=True (--resume) to continue it, or choose another output folder"
        )
    trainer = Trainer(cfgs, train_cfg, default_device(train_cfg.device), columns=columns)
    if resume:
        trainer.load_state_dict(checkpoint.read_matching(ckpt, record)["trainer"])
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        trainer.initialise(_first_batches(make_batches(0, rank, world), train_cfg.init_batches))
        if rank == 0:
            atomic_write_text(run_dir / RUN, json.dumps(record, indent=2))
    _train_steps(trainer, train_cfg, make_batches(trainer.step, rank, world), ckpt, record, show=rank == 0)
    _save_checkpoint(trainer, ckpt, record)
    folders = [out / c.name for c in cfgs]
    if rank == 0:
        for sae, curves, folder, meta in zip(trainer.saes, trainer.curves, folders, metas):
            info = {
                "train_config": train_cfg.to_dict(),
                "data": data or {},
                "tokens_seen": trainer.tokens,
                "steps": trainer.step,
                "skipped_batches": trainer.skipped,
                "world_size": world,
                "final": curves[-1] if curves else {},
            }
            save_sae(sae, folder, meta, info)
            atomic_write_text(folder / CURVES, "".join(json.dumps(r) + "\n" for r in curves))
    if world > 1:
        dist.barrier()
    return folders


def _train_steps(trainer: Trainer, train_cfg: TrainConfig, it: Iterator, ckpt: Path, record: dict, show: bool) -> None:
    """Step until train_cfg.n_steps, logging every log_every steps and checkpointing every checkpoint_every."""
    n_steps = train_cfg.n_steps
    bar = None
    if train_cfg.progress and show:
        from tqdm.auto import tqdm

        bar = tqdm(total=n_steps, initial=trainer.step, desc="sae train", unit="step")
    while trainer.step < n_steps:
        trainer.train_step(next(it))
        if trainer.step % train_cfg.log_every == 0 or trainer.step == n_steps:
            trainer.log_point()
            if bar is not None and trainer.curves[0]:
                last = trainer.curves[0][-1]
                bar.set_postfix(fvu=f"{last.get('fvu', math.nan):.3f}", l0=f"{last.get('l0', math.nan):.1f}")
        if train_cfg.checkpoint_every and trainer.step % train_cfg.checkpoint_every == 0 and trainer.step < n_steps:
            _save_checkpoint(trainer, ckpt, record)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()


def _first_batches(it: Iterator, n: int) -> torch.Tensor:
    """The first n batches as one; the iterator (and its reader's window buffer) is let go on return."""
    return torch.cat([next(it) for _ in range(n)])


def _save_checkpoint(trainer: Trainer, path: Path, record: dict) -> None:
    if not trainer.params_finite():
        raise NonFiniteError(
            f"parameters became NaN/inf by step {trainer.step}; the checkpoint at {path} was not overwritten"
        )
    if trainer.rank == 0:
        checkpoint.write(path, {"record": record, "trainer": trainer.state_dict()})
    if trainer.world > 1:
        dist.barrier()


def train(
    cache_path: str | Path,
    hook: str,
    sae_configs: list[SAEConfig],
    train_cfg: TrainConfig,
    out_dir: str | Path,
    resume: bool = False,
    target: str | None = None,
    target_cache: str | Path | None = None,
) -> list[Path]:
    """Train SAEs on one hook of an activation cache (transcoders: from `hook` to `target`, e.g.
    blocks.1.ln2.hook_normalized -> blocks.1.hook_mlp_out); returns the saved SAELens folders.
    target_cache: read the target from another cache of the same tokens (checked row by row).

    Batches stream from the cache (never loaded whole); under torchrun each rank reads its own
    share of every batch position.
    """
    return fit_cache(cache_path, [(hook, target, sae_configs)], train_cfg, out_dir, resume, target_cache)


def _resolve_group(cache, tcache, hook: str, target: str | None, cfgs: list[SAEConfig], n_tokens: int):
    """The configs of the SAEs on one (input, target) pair, resolved against the caches' widths (tcache: the
    target's cache)."""
    for h, what, c in ((hook, "hook", cache), (target, "target hook", tcache)):
        if h is not None and h not in c.hooks:
            raise ConfigError(f"{what} {h!r} is not in the cache at {c.path}; cached hooks: {c.hooks}")
    d_in = cache.d(hook)
    for c in cfgs:
        if c.d_in is not None and c.d_in != d_in:
            raise ConfigError(
                f"SAE {c.name or c.architecture!r} has d_in={c.d_in} but hook {hook!r} in the cache has width {d_in}"
            )
    if target is None:
        return [c.resolve(d_in, n_tokens) for c in cfgs]
    return [dataclasses.replace(c, transcoder=True).resolve(d_in, n_tokens, tcache.d(target)) for c in cfgs]


def fit_cache(
    cache_path: str | Path,
    groups: list[tuple[str, str | None, list[SAEConfig]]],
    train_cfg: TrainConfig,
    out_dir: str | Path,
    resume: bool = False,
    target_cache: str | Path | None = None,
    window_rows: int | None = None,
    state_dir: str | Path | None = None,
) -> list[Path]:
    """Train every group's SAEs side by side on one pass over the cache: a group is (input hook, target
    hook or None, configs); each stream row holds every group's hooks, and each SAE reads its own.
    target_cache: the one group's target comes from this cache, whose rows must be the same tokens.
    window_rows: the reader's window in rows (see ActivationCache.batches), so that passes over different hooks
    see the same batches; state_dir: see fit."""
    from workbench.cache import ActivationCache

    check_output_dir(out_dir, "SAE output folder")  # before any work (the configs checked themselves when made)
    cache = ActivationCache.open(cache_path)
    tcache = cache
    if target_cache is not None:
        from workbench.cache.reader import check_aligned

        if len(groups) != 1 or groups[0][1] is None:
            raise ConfigError("target_cache (--target-cache) needs exactly one input hook and one --target")
        tcache = ActivationCache.open(target_cache)
        check_aligned(cache, tcache)
    m = cache.manifest
    cache_rel = _rel(cache_path, out_dir)
    stream, cfgs, columns, metadata = _layout(cache, tcache, groups, train_cfg.n_tokens, cache_rel)
    batches = partial(_cache_batches, train_cfg=train_cfg, window_rows=window_rows)

    def make_batches(start: int, rank: int, world_size: int):
        if tcache is cache:
            return batches(cache, stream, start=start, rank=rank, world_size=world_size)
        return _zip_caches(
            cache,
            stream,
            tcache,
            groups[0][1],
            train_cfg.batch_size // max(1, dist_info()[1]),
            partial(batches, start=start, rank=rank, world_size=world_size),
        )

    data = {
        "cache": cache_rel,
        **({"target_cache": _rel(target_cache, out_dir)} if target_cache is not None else {}),
        "model": m.get("model"),
        "corpus": m.get("corpus"),
        "cache_n_tokens": cache.n_tokens("train"),
        **_stream_record(groups),
    }
    return fit(cfgs, train_cfg, make_batches, None, out_dir, resume, data, metadata, columns, state_dir)


def _cache_batches(c, hooks, train_cfg: TrainConfig, window_rows, start: int, rank: int, world_size: int, **kw):
    """This rank's float32 [B/world, width] batches of `hooks` side by side from data position `start` on."""
    return c.batches(
        hooks if len(hooks) > 1 else hooks[0],
        train_cfg.batch_size // max(1, dist_info()[1]),
        split="train",
        seed=train_cfg.seed,
        start_batch=start,
        rank=rank,
        world_size=world_size,
        dtype=torch.float32,
        device=default_device(train_cfg.device),
        window_rows=window_rows,
        **kw,
    )


def _layout(cache, tcache, groups, n_tokens: int, cache_rel: str):
    """(stream hooks, resolved configs, each SAE's columns of a stream row, each SAE's cfg.json metadata)."""
    stream: list[str] = []
    cfgs, columns, metadata = [], [], []
    m = cache.manifest
    for hook, target, group in groups:
        resolved = _resolve_group(cache, tcache, hook, target, group, n_tokens)
        start = sum(cache.d(h) for h in stream)
        stream += [hook] + ([target] if target and tcache is cache else [])
        width = cache.d(hook) + (tcache.d(target) if target else 0)
        meta = {
            "hook_name": hook,
            "model_name": m.get("model"),
            "context_size": m.get("ctx_len"),
            "prepend_bos": True,
            "dataset_path": cache_rel,
            **({"hook_name_out": target} if target else {}),
        }
        cfgs += resolved
        columns += [(start, start + width)] * len(resolved)
        metadata += [meta] * len(resolved)
    if len(set(stream)) != len(stream):
        raise ConfigError(f"a hook appears in two groups of one run: {stream}; train each pair once")
    return stream, cfgs, columns, metadata


def _rel(path, out_dir) -> str:
    """`path` relative to each SAE folder (out_dir/<name>), so the SAEs and their cache can move together."""
    return (Path("..") / os.path.relpath(Path(path).resolve(), Path(out_dir).resolve())).as_posix()


def _zip_caches(cache, hooks, tcache, target, per_rank, batches):
    """[input | target] rows from two aligned caches: both samplers get the same window (in rows), so they pick
    the same rows in the same order."""
    from workbench.cache.reader import WINDOW_BYTES

    item = cache._store.itemsize
    rows = max(per_rank, WINDOW_BYTES // (sum(cache.d(h) for h in hooks) * item + tcache.d(target) * item))
    a = batches(cache, hooks, window_bytes=rows * sum(cache.d(h) for h in hooks) * item)
    b = batches(tcache, [target], window_bytes=rows * tcache.d(target) * tcache._store.itemsize)
    return (torch.cat([x, y], 1) for x, y in zip(a, b))


def _stream_record(groups) -> dict:
    """What the run read: one hook (an SAE run, as before), or the (input, target) pairs and how each input
    was chosen (the normalised residual the MLP reads, or hook_mlp_in)."""
    if len(groups) == 1 and groups[0][1] is None:
        return {"hook": groups[0][0]}
    pairs = [
        {"hook": h, "target_hook": t, "input_kind": h.split(".", 2)[-1] if h.startswith("blocks.") else h}
        for h, t, _ in groups
    ]
    return {"hook": pairs[0]["hook"], "target_hook": pairs[0]["target_hook"], "pairs": pairs}
