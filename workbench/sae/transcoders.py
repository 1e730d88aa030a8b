"""Transcoder sets: one transcoder per MLP layer of a model, trained side by side on one pass over a cache.

A set folder holds the run's checkpoint, one SAELens-format folder per (layer, config) and
`transcoders.json`, the manifest naming the model, the cache, and for each layer its input hook (the
normalised residual the MLP reads, or hook_mlp_in without LayerNorm), its target (hook_mlp_out) and
its transcoders. `load_set` reads it back and refuses a set whose members disagree about the model.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

from workbench.atomic import atomic_write_text
from workbench.errors import BadValueError, MissingInputError
from workbench.sae.config import SAEConfig, TrainConfig

SET_MANIFEST = "transcoders.json"
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
    """Train every config as a transcoder on each layer of `layers` ('all' or '0,2') in one pass over the cache;
    returns (the set folder, the transcoder folders). Each member is named L<layer>-<its config's name>."""
    import torch.distributed

    from workbench.cache import ActivationCache, transcoder_hooks
    from workbench.checkpoint import dist_info
    from workbench.sae.trainer import fit_cache

    cache = ActivationCache.open(cache_path)
    chosen = parse_layers(layers, cache_layers(cache))
    groups = []
    for layer in chosen:
        hook, target = transcoder_hooks(layer, cache.hooks)
        missing = [h for h in (hook, target) if h not in cache.hooks]
        if missing:
            raise BadValueError(
                f"layer {layer}'s transcoder needs {' and '.join(missing)}, not in the cache at {cache_path}; "
                "harvest them (the default `workbench cache` hooks include every MLP's input and output)"
            )
        named = [
            dataclasses.replace(c, name=f"L{layer}-{c.name or _default_name(c, cache, hook, target)}")
            for c in sae_configs
        ]
        groups.append((hook, target, named))
    folders = fit_cache(cache_path, groups, train_cfg, out_dir, resume)
    out = Path(out_dir)
    per = len(sae_configs)
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
                "transcoders": [f.name for f in folders[i * per : (i + 1) * per]],
            }
            for i, (layer, (hook, target, _)) in enumerate(zip(chosen, groups))
        ],
    }
    rank, world = dist_info()
    if rank == 0:  # under torchrun, like the members' folders (fit saves them on rank 0)
        atomic_write_text(out / SET_MANIFEST, json.dumps(manifest, indent=2))
    if world > 1:
        torch.distributed.barrier()  # no rank returns before the manifest exists
    return out, folders


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
    manifest = json.loads(path.read_text())
    for entry in manifest["layers"]:
        for name in entry["transcoders"]:
            cfg_path = folder / name / CFG
            if not cfg_path.is_file():
                raise MissingInputError(f"transcoder set {folder}: member {name} has no {CFG}")
            meta = json.loads(cfg_path.read_text()).get("metadata", {})
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
