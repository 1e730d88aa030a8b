"""`record`: what the Python API made (a cache, SAEs, a model, a circuit file) recorded in a workspace, so `workbench
ls` and the app list it like a command's output."""

from __future__ import annotations

from pathlib import Path

from workbench.cache.reader import ActivationCache
from workbench.errors import BadValueError
from workbench.readback import json_file
from workbench.sae.io import read_info
from workbench.steps.circuits import import_circuit
from workbench.steps.dictionaries import record_sae
from workbench.workspace import Workspace

API = "Python API"  # the made_by of what `record` adopts


def record(ws: Workspace, *paths) -> list[Path]:
    """Record what the Python API made, so `workbench ls` and the app list it like a command's output.

    Each path is a cache folder (`workbench.cache.harvest`), an SAE folder or a folder of them
    (`workbench.sae.train`), a saved model folder (`workbench.models.save`), or a circuit file
    (`Circuit.save`, copied into <ws>/circuits/<stem>/ with its exports). Folders stay where they are
    (outside the workspace they are registered in it). Returns the manifests' folders.
    """
    out = []
    for p in map(Path, paths):
        if p.is_file():
            out.append(_record_circuit_file(ws, p))
        elif (p / "manifest.json").is_file():
            out.append(_record_cache(ws, p))
        elif (p / "cfg.json").is_file():
            out.append(_adopt_sae(ws, p))
        elif (p / "config.json").is_file() and (p / "model.safetensors").is_file():
            ws.record(p, "models", made_by=API, config={})
            out.append(p)
        elif saes := sorted(d for d in p.glob("*/") if (d / "cfg.json").is_file()):
            out += [_adopt_sae(ws, d) for d in saes]
        else:
            raise BadValueError(
                f"{p} is none of what `record` takes: a cache folder (manifest.json), an SAE folder (cfg.json) or "
                "a folder of them, a saved model folder (config.json + model.safetensors), or a circuit file"
            )
    return out


def _record_cache(ws: Workspace, folder: Path) -> Path:
    cache = ActivationCache.open(folder)
    m = cache.manifest
    summary = {"train_tokens": cache.n_tokens("train"), "heldout_tokens": cache.n_tokens("heldout")}
    inputs = {"model": m["model"], "corpus": m["corpus"]}
    ws.record(folder, "caches", made_by=API, config=m["config"], inputs=inputs, summary=summary, checksums=False)
    return folder


def _adopt_sae(ws: Workspace, folder: Path) -> Path:
    meta = json_file(folder / "cfg.json", "SAE's SAELens config", "retrain the SAE").get("metadata", {})
    cache = (folder / meta["dataset_path"]).resolve() if meta.get("dataset_path") else None
    record_sae(ws, folder, API, cache, {"train": read_info(folder).get("train_config", {})})
    return folder


def _record_circuit_file(ws: Workspace, path: Path) -> Path:
    return import_circuit(ws, path, made_by=API)[1]
