"""`workbench cache`: an activation cache harvested into the workspace."""

from __future__ import annotations

import fnmatch
from pathlib import Path

from workbench.cache.config import HarvestConfig
from workbench.cache.hooks import default_hooks, hook_summary
from workbench.cache.reader import ActivationCache
from workbench.cache.writer import harvest
from workbench.corpus.sources import load_corpus
from workbench.errors import BadValueError
from workbench.guard import check_artifact
from workbench.lock import output_lock
from workbench.models import load
from workbench.steps.artifacts import complete, model_inputs, slug
from workbench.workspace import Workspace


def expand_hooks(spec: str, hook_names) -> list[str]:
    """'blocks.*.hook_resid_post' expands over the model's hooks; plain names pass through (harvest checks them)."""
    if "*" not in spec:
        return [spec]
    found = [h for h in hook_names if fnmatch.fnmatchcase(h, spec)]
    if not found:
        raise BadValueError(
            f"hook pattern {spec!r} matches no hook; valid hooks: {', '.join(hook_summary(hook_names))}"
        )
    return found


def make_cache(
    ws: Workspace,
    model_spec: str = "tiny",
    corpus_spec: str = "synthetic",
    hooks=None,
    cfg: HarvestConfig | None = None,
    *,
    out=None,
    name: str | None = None,
    corpus_seed: int = 0,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    model=None,
    ensure: bool = False,
    text_field: str = "text",
    device: str | None = None,
):
    """Harvest a cache (`workbench cache`) into <ws>/caches/<name> or `out`; returns the ActivationCache.

    model: an already loaded model for `model_spec` (the demo loads it once for every step). hooks: names or
    patterns; None: `default_hooks` (every residual stream, and each MLP's input and output for transcoders).
    """
    folder = Path(out) if out else ws.path("caches", name or slug(f"{Path(model_spec).name}-{corpus_spec}"))
    if ensure and complete(folder):
        return ActivationCache.open(folder)
    # an interrupted harvest left its progress record (a finished but unrecorded one, its manifest)
    resume = resume or (ensure and any((folder / f).is_file() for f in ("progress.json", "manifest.json")))
    check_artifact(folder, "caches", {"model_spec": model_spec, "corpus_spec": corpus_spec.split(",")})  # before work
    with output_lock(folder, "workbench cache"):  # one process per output
        if model is None:
            model, _ = load(model_spec, device=device)
        corpus = load_corpus(corpus_spec, model.tokenizer, seed=corpus_seed, text_field=text_field)
        names = [h for spec in hooks for h in expand_hooks(spec, model.hook_dict)] if hooks else default_hooks(model)
        cache = harvest(model, corpus, names, folder, cfg=cfg, resume=resume, overwrite=overwrite, progress=progress)
        ws.record(
            folder,
            "caches",
            made_by="workbench cache",
            config=cache.manifest["config"],
            inputs={
                **model_inputs(ws, model, model_spec),
                "corpus": corpus_spec,
                "corpus_seed": corpus_seed,
                **({"text_field": text_field} if text_field != "text" else {}),
            },
            summary={
                "train_tokens": cache.n_tokens("train"),
                "heldout_tokens": cache.n_tokens("heldout"),
                "hooks": len(cache.hooks),
            },
            checksums=False,
        )
        return cache
