"""`explain_store`: template explanations of a store's latents and their scores, saved in the store.

The run goes by chunks of latents; each finished chunk is a sealed record under explanations/.partial/, so an
interrupted run resumes at the first missing chunk (and refuses one made with other settings). The end writes
explanations.jsonl (one line per latent) and the manifest last, with the provenance: the explainer and its
settings, the scorers, the model, the SAE's weights and the store's manifest checksum. Memory is bounded by a
chunk: the SAE re-encodes only a random pool (once) and each chunk's near-neighbour rows.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from workbench.atomic import atomic_write_text, sha256_file
from workbench.cache.reader import ActivationCache
from workbench.errors import BadValueError
from workbench.features.build import row_metadata
from workbench.features.explain import SCORERS, ExplainConfig, template_explanation
from workbench.features.explanations import FOLDER, FORMAT, LINES
from workbench.features.llm import Client, Usage
from workbench.features.llm_explain import llm_explanation, llm_scores
from workbench.features.scoring import Contexts, Encoder, score_chunk
from workbench.features.steering import Steerer
from workbench.features.store import MANIFEST, FeatureStore
from workbench.lock import output_lock
from workbench.models import load
from workbench.readback import digest, sealed_json, write_sealed_json
from workbench.sae.io import load_sae


def _record(store: FeatureStore, cfg: ExplainConfig, scorers: tuple, n: int, client: Client | None) -> dict:
    return {
        "explainer": cfg.explainer,
        **({"llm": client.describe()} if client is not None else {}),
        "config": cfg.to_dict(),
        "scorers": list(scorers),
        "n_latents": n,
        "model": store.manifest["model"],
        "sae": store.manifest["sae"],
        "sae_weights": store.manifest["sae_weights"],
        "store": sha256_file(store.path / MANIFEST),
    }


def _check_scorers(scorers) -> tuple:
    bad = [s for s in scorers if s not in SCORERS]
    if bad:
        raise BadValueError(f"unknown scorer {bad[0]!r}; choose from {list(SCORERS)}")
    return tuple(dict.fromkeys(scorers))


def _resume(folder: Path, record: dict, overwrite: bool) -> Path:
    partial = folder / ".partial"
    if overwrite and folder.exists():
        shutil.rmtree(folder)
    if (folder / MANIFEST).is_file():
        raise BadValueError(f"{folder} already holds explanations; pass --overwrite to make them again")
    prog = partial / "progress.json"
    if prog.is_file():
        old = sealed_json(prog, "partial explanations record", "rerun it with --overwrite")
        if old != record:
            diff = [k for k in record if old.get(k) != record[k]]
            raise BadValueError(
                f"{folder} holds an unfinished run with a different {', '.join(diff)}; rerun it with the same "
                "options, or pass --overwrite to start over"
            )
    else:
        write_sealed_json(prog, record)
    return partial


def explain_store(
    path,
    cfg: ExplainConfig | None = None,
    scorers=("detection", "fuzz"),
    latents: int | None = None,
    *,
    out: str | Path | None = None,
    overwrite: bool = False,
    progress: bool = True,
    device: str = "cpu",
    model=None,
) -> Path:
    """Explain (and score) the store's first `latents` latents (None: all); returns the explanations folder.
    model: the store's model (a loaded one or a spec), needed by the intervention scorer only."""
    cfg, scorers = cfg or ExplainConfig(), _check_scorers(scorers)
    store = FeatureStore(path)
    n = store.n_units if latents is None else min(latents, store.n_units)
    folder = store.path / FOLDER
    with output_lock(folder, "workbench features explain"):
        client = None
        if cfg.explainer == "openai":  # the only way the client runs: asked for by name
            client = Client.from_env(timeout=cfg.llm_timeout, retries=cfg.llm_retries)
        record = _record(store, cfg, scorers, n, client)
        partial = _resume(folder, record, overwrite)
        ctx = open_contexts(store, cfg, device)
        meta, cache = ctx.meta, ctx.enc.cache
        steer = steerer(store, model, cache, cfg, device) if "intervention" in scorers else None
        chunks = range(0, n, cfg.chunk)
        bar = _bar(len(chunks), progress)
        for c, a in enumerate(chunks):
            done = partial / f"c{c:06d}.json"
            if not done.is_file():
                before = client.usage.to_dict() if client else {}
                lines = _chunk(list(range(a, min(n, a + cfg.chunk))), store, meta, ctx, steer, cfg, scorers, client)
                used = {k: v - before[k] for k, v in client.usage.to_dict().items()} if client else {}
                write_sealed_json(done, {"run": digest(record), "chunk": c, "lines": lines, "usage": used}, indent=None)
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        return _finish(folder, partial, record, len(chunks), out)


def open_contexts(store: FeatureStore, cfg: ExplainConfig, device: str = "cpu") -> Contexts:
    """The scorers' contexts of a store: its SAE and cache opened, the pass's row metadata read."""
    sae = load_sae(store.path.parent, device=device).eval()
    m = store.manifest
    cache = ActivationCache.open(m["cache"])
    meta = row_metadata(cache, m["split"], m["n_rows"], store.vocab)
    return Contexts(store, meta, Encoder(sae, cache, m["hook"], m["split"], m["n_sparse"], m["block_size"]), cfg)


def steerer(store, model, cache, cfg: ExplainConfig, device: str) -> Steerer:
    if model is None:
        raise BadValueError("the intervention scorer runs the model: pass the store's model (--model)")
    if isinstance(model, str):
        model = load(model, device=device)[0]
    return Steerer(store, model, cache, cfg, device)


def _bar(total: int, progress: bool):
    if not progress:
        return None
    return tqdm(total=total, desc="explain", unit="chunk")


def _chunk(units: list[int], store, meta, ctx, steer, cfg: ExplainConfig, scorers, client) -> list[dict]:
    """One chunk's lines: each latent's explanation (the template's, or the language model's when a client is
    given, scored by its simulations) and its scores."""
    expl = {u: template_explanation(u, store, meta, cfg) for u in units}
    rng = np.random.default_rng([cfg.seed, units[0]])
    if client is None:
        scores = score_chunk(units, {u: e["predicate"] for u, e in expl.items()}, ctx, scorers, rng)
    else:
        for u in units:
            expl[u] |= {"text": llm_explanation(u, ctx, client, cfg), "predicate": None}
        near = ctx.near_negatives(units, {u: ctx.near_candidates(u) for u in units}) if "detection" in scorers else {}
        none = np.zeros(0, np.int64)
        scores = {u: llm_scores(u, expl[u]["text"], ctx, near.get(u, none), client, cfg, scorers, rng) for u in units}
    if steer is not None:
        for u in units:
            scores[u]["intervention"] = steer.score(u, expl[u]["promoted"])
    return [
        {
            "latent": u,
            "explanation": e["text"],
            "explainer": cfg.explainer,
            "predicate": e["predicate"],
            "promoted": e["promoted"],
            "suppressed": e["suppressed"],
            "scores": scores[u],
        }
        for u, e in expl.items()
    ]


def _finish(folder: Path, partial: Path, record: dict, n_chunks: int, out) -> Path:
    lines, usage = [], Usage()
    for c in range(n_chunks):
        rec = sealed_json(partial / f"c{c:06d}.json", "partial explanations chunk", "rerun it with --overwrite")
        if rec.get("run") != digest(record) or rec.get("chunk") != c:
            raise BadValueError(f"{partial / f'c{c:06d}.json'} belongs to another run; rerun it with --overwrite")
        lines += rec["lines"]
        usage.add(rec.get("usage") or {})
    text = "".join(json.dumps(x) + "\n" for x in lines)
    atomic_write_text(folder / LINES, text)
    manifest = {"format": FORMAT, **record, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if "llm" in record:  # the server's token counts, and the calls made and answered from the prompt cache
        manifest["usage"] = usage.to_dict()
    manifest["files"] = {LINES: sha256_file(folder / LINES)}
    atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=1))
    shutil.rmtree(partial)
    if out is not None:
        keys = ("latent", "explanation", "explainer", "scores")
        atomic_write_text(Path(out), "".join(json.dumps({k: x[k] for k in keys}) + "\n" for x in lines))
    return folder
