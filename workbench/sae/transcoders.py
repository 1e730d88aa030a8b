"""Transcoder sets: one transcoder per MLP layer of a model, trained side by side on one pass over a cache
where memory allows, and in several passes (consecutive layers each) where it does not.

A set folder holds `passes.json` (the run's passes, planned against the memory budget when it started), the
run's checkpoint (one pass) or passes/<i>/checkpoint.pt (several), one SAELens-format folder per (layer,
config) and, written last, `transcoders.json`: the manifest naming the model, the cache, the passes with
their memory estimate, and for each layer its input hook (the normalised residual the MLP reads, or
hook_mlp_in without LayerNorm), its target (hook_mlp_out) and its transcoders. `load_set` reads it back and
refuses a set whose members disagree about the model.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from workbench.errors import BadValueError, ConfigError, DamagedFileError, MissingInputError
from workbench.readback import damaged, json_file, reading, sealed_json, verify_artifact, write_sealed_json
from workbench.sae.config import SAEConfig, TrainConfig

SET_MANIFEST = "transcoders.json"
PLAN = "passes.json"  # the run's passes, recorded when it starts: a resume keeps them whatever memory is free
PASSES = "passes"  # a multi-pass run's per-pass checkpoints: passes/<i>/checkpoint.pt (one pass: in the set folder)
SCHEMA = "workbench.transcoder_set"
_BLOCK = re.compile(r"blocks\.(\d+)\.")


def parse_layers(spec: str, n_layers: int) -> list[int]:
    """'all' or comma-separated layer numbers ('0,2') -> sorted distinct layers of a model with n_layers."""
    valid = f"'all' or comma-separated layers in 0..{n_layers - 1}"
    if spec.strip() == "all":
        return list(range(n_layers))
    try:
        layers = sorted({int(part) for part in spec.split(",")})
    except ValueError:
        raise BadValueError(f"--transcoders {spec!r} is not {valid}") from None
    bad = [layer for layer in layers if not 0 <= layer < n_layers]
    if bad:
        raise BadValueError(f"--transcoders {spec!r}: the model has no layer {bad[0]}; use {valid}")
    return layers


def cache_layers(cache) -> int:
    """The model's number of layers: recorded in the cache's manifest, else the deepest cached block + 1."""
    n = cache.manifest.get("n_layers")
    if n is None:
        found = [int(m.group(1)) for h in cache.hooks if (m := _BLOCK.match(h))]
        n = max(found) + 1 if found else 0
    return int(n)


def train_set(
    cache_path: str | Path,
    layers: str,
    sae_configs: list[SAEConfig],
    train_cfg: TrainConfig,
    out_dir: str | Path,
    resume: bool = False,
) -> tuple[Path, list[Path]]:
    """Train every config as a transcoder on each layer of `layers` ('all' or '0,2'), side by side in as few
    passes over the cache as train_cfg.memory_budget_mib allows (see `plan_passes`); returns (the set folder, the
    transcoder folders). Each member is named L<layer>-<its config's name>."""
    import torch.distributed

    from workbench.cache import ActivationCache
    from workbench.checkpoint import dist_info
    from workbench.sae.trainer import CHECKPOINT, fit_cache

    cache = ActivationCache.open(cache_path)
    chosen = parse_layers(layers, cache_layers(cache))
    groups = {layer: _layer_group(cache, cache_path, layer, sae_configs) for layer in chosen}
    out = Path(out_dir)
    plan = _start_plan(cache, groups, train_cfg, out, resume)
    folders: dict[int, list[Path]] = {}
    for i, members in enumerate(plan["passes"]):
        state = out if len(plan["passes"]) == 1 else out / PASSES / str(i)
        done = fit_cache(
            cache_path,
            [groups[layer] for layer in members],
            train_cfg,
            out,
            resume and (state / CHECKPOINT).is_file(),  # a pass not yet checkpointed starts from its beginning
            window_rows=plan["window_rows"],
            state_dir=state,
        )
        per = len(sae_configs)
        folders.update({layer: done[j * per : (j + 1) * per] for j, layer in enumerate(members)})
    manifest = {
        "schema": SCHEMA,
        "version": 1,
        "model": cache.manifest.get("model"),
        "cache": os.path.relpath(Path(cache_path).resolve(), out.resolve()),
        "n_layers": cache_layers(cache),
        "layers": [
            {
                "layer": layer,
                "input_hook": hook,
                "target_hook": target,
                "input_kind": hook.split(".", 2)[-1],
                "transcoders": [f.name for f in folders[layer]],
            }
            for layer, (hook, target, _) in groups.items()
        ],
        "memory": {k: plan[k] for k in ("passes", "budget_mib", "estimate_mib") if k in plan},
    }
    rank, world = dist_info()
    if rank == 0:  # under torchrun, like the members' folders (fit saves them on rank 0)
        write_sealed_json(out / SET_MANIFEST, manifest, indent=2)
    if world > 1:
        torch.distributed.barrier()  # no rank returns before the manifest exists
    return out, [f for layer in chosen for f in folders[layer]]


def train_clt(
    cache_path: str | Path,
    layers: str,
    clt_cfg,
    train_cfg: TrainConfig,
    out_dir: str | Path,
    resume: bool = False,
) -> Path:
    """Train one cross-layer transcoder (workbench.sae.clt) over `layers` ('all' or '0,2') from the same stream rows
    a set reads ([x_0 | y_0 | x_1 | y_1 | ...]); refused before any work when its estimated memory exceeds the budget
    (a CLT's loss couples its layers, so it cannot be split into passes). Returns the CLT's folder, out/<name>."""
    from workbench.cache import ActivationCache
    from workbench.sae.trainer import _cache_batches, _rel, _resolve_group, fit

    if clt_cfg.threshold_per_latent:
        raise ConfigError(
            "threshold_per_latent comes from an imported circuit-tracer CLT; training learns one per layer"
        )
    cache = ActivationCache.open(cache_path)
    chosen = parse_layers(layers, cache_layers(cache))
    groups = {layer: _layer_group(cache, cache_path, layer, [clt_cfg]) for layer in chosen}
    (hook0, target0, _), stream = groups[chosen[0]], [h for hook, target, _ in groups.values() for h in (hook, target)]
    widths = {(cache.d(hook), cache.d(target)) for hook, target, _ in groups.values()}
    if len(widths) > 1:
        raise ConfigError(f"a CLT needs every layer's input and target at one width each; the cache has {widths}")
    _resolve_group(cache, cache, hook0, target0, [], train_cfg.n_tokens)  # the hooks are there
    cfg = dataclasses.replace(clt_cfg, transcoder=True).resolve(
        cache.d(hook0), train_cfg.n_tokens, cache.d(target0), len(chosen)
    )
    _check_clt_memory(cache, cfg, stream, train_cfg)
    m, cache_rel = cache.manifest, _rel(cache_path, out_dir)
    meta = {
        "model_name": m.get("model"),
        "context_size": m.get("ctx_len"),
        "dataset_path": cache_rel,
        "layers": chosen,
        "input_hooks": [groups[layer][0] for layer in chosen],
        "target_hooks": [groups[layer][1] for layer in chosen],
    }
    data = {
        "cache": cache_rel,
        "model": m.get("model"),
        "corpus": m.get("corpus"),
        "cache_n_tokens": cache.n_tokens("train"),
        "clt_layers": chosen,
        "stream": stream,
    }

    def make_batches(start: int, rank: int, world: int):
        return _cache_batches(cache, stream, train_cfg, None, start=start, rank=rank, world_size=world)

    return fit([cfg], train_cfg, make_batches, None, out_dir, resume, data, meta)[0]


def clt_footprint(cfg, rows: int, init_rows: int, device: str, autocast: bool):
    """A CLT's memory (workbench.sae.memory.Footprint): every member's state, and their steps at once (the loss
    couples the layers, so one backward pass holds every member's working set) plus the [rows, L x d_out] targets,
    reconstruction and error (a Matryoshka CLT's: its writes, error and the error's square per prefix)."""
    from workbench.sae import memory

    parts = [memory.sae_footprint(cfg.member(i), rows, init_rows, device, autocast) for i in range(cfg.n_layers)]
    skip = 4 * cfg.n_layers * cfg.d_out * cfg.d_in * memory.F32 if cfg.skip else 0
    groups = len(cfg.prefixes) if cfg.architecture == "matryoshka" else 0
    wide = (4 + 3 * groups) * rows * cfg.n_layers * cfg.d_out * memory.F32
    return memory.Footprint(
        sum(p.state for p in parts) + skip,
        sum(p.step for p in parts) + wide,
        sum(p.saved for p in parts) + skip * 3 // 4,
    )


def _check_clt_memory(cache, cfg, stream: list[str], train_cfg: TrainConfig) -> int:
    """The CLT run's estimated bytes (its footprint and the cache's buffers), refused above the budget."""
    from workbench.cache.sampler import RowSampler
    from workbench.checkpoint import default_device, dist_info
    from workbench.sae import memory

    _, world = dist_info()
    tc = train_cfg.resolve(world_size=world)
    rows, device = tc.batch_size // world, default_device(tc.device).type
    budget = tc.memory_budget_mib or memory.default_budget_mib(device, int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
    window_rows = cache.window_rows(stream, rows)
    sampler = RowSampler(cache.n_tokens("train"), rows, world_size=world, window_rows=window_rows)
    read_rows = min(sampler.window, sampler.per_rank) * sampler.chunk
    buffers = memory.buffer_bytes([cache.d(h) for h in stream], read_rows, rows, tc.init_batches, cache._store.itemsize)
    total = memory.run_bytes([clt_footprint(cfg, rows, rows * tc.init_batches, device, tc.autocast)], buffers)
    if total > budget * memory.MIB:
        raise ConfigError(
            f"the CLT {cfg.name} needs an estimated {memory.mib(total)} MiB but memory_budget_mib={budget:g}; a CLT "
            "trains in one pass (its loss couples the layers): lower --batch-size or --expansion/--n-latents, train "
            "fewer --layers, or raise --memory-budget-mib"
        )
    return total


def _layer_group(cache, cache_path, layer: int, sae_configs: list[SAEConfig]) -> tuple[str, str, list[SAEConfig]]:
    """(input hook, target hook, the configs named L<layer>-...) of one layer's transcoders."""
    from workbench.cache import transcoder_hooks

    hook, target = transcoder_hooks(layer, cache.hooks)
    missing = [h for h in (hook, target) if h not in cache.hooks]
    if missing:
        raise BadValueError(
            f"layer {layer}'s transcoder needs {' and '.join(missing)}, not in the cache at {cache_path}; "
            "harvest them (the default `workbench cache` hooks include every MLP's input and output)"
        )
    named = [
        dataclasses.replace(c, name=f"L{layer}-{c.name or _default_name(c, cache, hook, target)}") for c in sae_configs
    ]
    return hook, target, named


def _start_plan(cache, groups: dict, train_cfg: TrainConfig, out: Path, resume: bool) -> dict:
    """The passes of this run: on resume the ones it recorded when it started (whatever memory is free now), else
    planned against the budget and recorded (rank 0's plan on every rank under torchrun). As for one SAE run, a
    folder holding a checkpoint is continued only with resume."""
    from workbench.checkpoint import dist_info, rank_zero_value
    from workbench.sae.trainer import CHECKPOINT

    rank, plan_file = dist_info()[0], out / PLAN
    # rank 0's look, taken before it writes the plan, on every rank
    ckpts, planned = rank_zero_value(
        (
            [str(p) for p in [out / CHECKPOINT, *sorted(out.glob(f"{PASSES}/*/{CHECKPOINT}"))] if p.is_file()],
            plan_file.is_file(),
        )
    )
    if resume and not (ckpts or planned):
        raise DamagedFileError(f"resume=True (--resume) but {out} holds no run ({PLAN}); train without it first")
    if not resume and ckpts:
        raise DamagedFileError(
            f"{out} already holds a run ({ckpts[0]}); pass resume=True (--resume) to continue it, "
            "or choose another output folder"
        )
    layers = list(groups)
    if resume and not planned:  # a set started before passes were planned: one pass
        return {"layers": layers, "passes": [layers], "window_rows": None}
    if resume:
        plan = read_plan(plan_file)
        if plan["layers"] != layers:
            raise ConfigError(
                f"--resume: the run in {out} trains layers {plan['layers']}, not {layers}; "
                f"resume with --transcoders {','.join(map(str, plan['layers']))}"
            )
        return plan
    plan = None
    if rank == 0:
        try:
            plan = plan_passes(cache, groups, train_cfg)
        except ConfigError as e:  # every rank raises it, none waits for a plan
            plan = {"error": str(e)}
    plan = rank_zero_value(plan)
    if "error" in plan:
        raise ConfigError(plan["error"])
    if rank == 0:
        write_sealed_json(plan_file, plan, indent=2)
    return plan


def read_plan(path: Path) -> dict:
    """A run's passes.json, its checksum checked (one written before checksums were: parsed only)."""
    way_out = f"delete {path.parent} to train the set afresh, or restore the file"
    plan = sealed_json(
        path, "transcoder set's pass plan", way_out, legacy=True, fields={"layers": list, "passes": list}
    )
    with reading(path, "transcoder set's pass plan", way_out):
        if not all(isinstance(p, list) and set(p) <= set(plan["layers"]) for p in plan["passes"]):
            raise ValueError(f"passes {plan['passes']} are not lists of its layers {plan['layers']}")
        int(plan.get("window_rows") or 0)
    return plan


def started(folder: str | Path) -> bool:
    """Whether a set's run began in `folder` (its passes are planned, or a one-pass run has a checkpoint)."""
    return (Path(folder) / PLAN).is_file() or (Path(folder) / "checkpoint.pt").is_file()


def plan_passes(cache, groups: dict, train_cfg: TrainConfig) -> dict:
    """Layers (in order) into the fewest passes whose estimated memory (workbench.sae.memory) fits the budget:
    each pass holds every state of its transcoders, the largest step and the cache's buffers for its hooks.
    Every pass reads the cache in windows of the one-pass run's rows, so it sees the same batches."""
    from workbench.cache.sampler import RowSampler
    from workbench.checkpoint import default_device, dist_info
    from workbench.sae import memory
    from workbench.sae.trainer import _resolve_group

    _, world = dist_info()
    tc = train_cfg.resolve(world_size=world)
    rows, device = tc.batch_size // world, default_device(tc.device).type
    budget = tc.memory_budget_mib or memory.default_budget_mib(device, int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
    hooks = {layer: (hook, target) for layer, (hook, target, _) in groups.items()}
    window_rows = cache.window_rows([h for pair in hooks.values() for h in pair], rows)
    sampler = RowSampler(cache.n_tokens("train"), rows, world_size=world, window_rows=window_rows)
    read_rows = min(sampler.window, sampler.per_rank) * sampler.chunk  # what one window of the sampler reads
    cost = {
        layer: [
            memory.sae_footprint(c, rows, rows * tc.init_batches, device, tc.autocast)
            for c in _resolve_group(cache, cache, hook, target, cfgs, tc.n_tokens)
        ]
        for layer, (hook, target, cfgs) in groups.items()
    }

    def estimate(members: list[int]) -> int:
        widths = [cache.d(h) for layer in members for h in hooks[layer]]
        buffers = memory.buffer_bytes(widths, read_rows, rows, tc.init_batches, cache._store.itemsize)
        return memory.run_bytes([f for layer in members for f in cost[layer]], buffers)

    for layer in groups:
        if estimate([layer]) > budget * memory.MIB:
            raise ConfigError(_too_big(layer, cost[layer], estimate([layer]), budget))
    passes = group_layers(list(groups), lambda members: estimate(members) <= budget * memory.MIB)
    return {
        "layers": list(groups),
        "passes": passes,
        "window_rows": window_rows,
        "budget_mib": budget,
        "estimate_mib": [memory.mib(estimate(p)) for p in passes],
    }


def group_layers(layers: list[int], fits) -> list[list[int]]:
    """Consecutive layers into the fewest passes for which fits(pass) holds, each layer fitting alone: greedy in
    order is optimal, since a pass's estimate only grows with its layers."""
    passes: list[list[int]] = []
    for layer in layers:
        if passes and fits([*passes[-1], layer]):
            passes[-1].append(layer)
        else:
            passes.append([layer])
    return passes


def _too_big(layer: int, footprints, total: int, budget: float) -> str:
    from workbench.sae.memory import mib

    state, step = sum(f.state for f in footprints), max(f.step for f in footprints)
    return (
        f"layer {layer}'s transcoders alone need an estimated {mib(total)} MiB (state {mib(state)}, step "
        f"{mib(step)}, cache buffers {mib(total - state - step)}) but memory_budget_mib={budget:g}; lower "
        "--batch-size or --expansion/--n-latents, train fewer configs at once, or raise --memory-budget-mib"
    )


def _default_name(cfg: SAEConfig, cache, hook: str, target: str) -> str:
    return dataclasses.replace(cfg, transcoder=True).resolve(cache.d(hook), None, cache.d(target)).name


def is_set(folder: str | Path) -> bool:
    return (Path(folder) / SET_MANIFEST).is_file()


def load_set(folder: str | Path) -> dict:
    """The set's manifest, each layer's members checked: present, transcoders, and all of the set's model."""
    from workbench.sae.io import CFG

    folder = Path(folder)
    path = folder / SET_MANIFEST
    if not path.is_file():
        raise MissingInputError(f"{folder} is not a transcoder set: {SET_MANIFEST} is missing")
    manifest = read_manifest(path)
    verify_artifact(folder, "transcoder set")
    for entry in manifest["layers"]:
        for name in entry["transcoders"]:
            cfg_path = folder / name / CFG
            if not cfg_path.is_file():
                raise MissingInputError(f"transcoder set {folder}: member {name} has no {CFG}")
            cfg = json_file(cfg_path, "transcoder's SAELens config", f"retrain the set or restore {name}")
            with reading(cfg_path, "transcoder's SAELens config", f"retrain the set or restore {name}"):
                meta = dict(cfg.get("metadata", {}))
            if meta.get("model_name") != manifest["model"]:
                raise BadValueError(
                    f"transcoder set {folder}: member {name} comes from model {meta.get('model_name')!r}, "
                    f"the set from {manifest['model']!r}; every member must come from the same model"
                )
            if meta.get("hook_name") != entry["input_hook"] or meta.get("hook_name_out") != entry["target_hook"]:
                raise BadValueError(
                    f"transcoder set {folder}: member {name} reads {meta.get('hook_name')!r} and writes "
                    f"{meta.get('hook_name_out')!r}, but the manifest says layer {entry['layer']} is "
                    f"{entry['input_hook']!r} -> {entry['target_hook']!r}"
                )
    return manifest


LAYER_FIELDS = {"layer": int, "input_hook": str, "target_hook": str, "transcoders": list}


def read_manifest(path: Path) -> dict:
    """transcoders.json, every part the readers use present and of its type (members not opened: `load_set`)."""
    what, way_out = "transcoder set manifest", f"retrain the set, or restore {path}"
    fields = {
        "model": (str, type(None)),
        "layers": list,
        "cache": (str, type(None)),
    }  # None: a set imported from another tool
    manifest = sealed_json(path, what, way_out, fields=fields, legacy=True)
    for i, entry in enumerate(manifest["layers"]):
        bad = [k for k, t in LAYER_FIELDS.items() if not isinstance(entry, dict) or not isinstance(entry.get(k), t)]
        if bad or not all(isinstance(n, str) and n for n in entry["transcoders"]):
            raise damaged(path, what, f"layers[{i}] lacks or mistypes {bad or ['transcoders']}", way_out)
    return manifest
