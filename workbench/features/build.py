"""`build_stores`: one pass over cached tokens fills a feature store beside each SAE.

SAEs on the same hook share the pass: each chunk of cached rows is read once and encoded by every
SAE. A transcoder's activations come from its input hook (what it reads, metadata.hook_name) and its
logit effects from its decoder, which writes its target (metadata.hook_name_out, an MLP's output in the
residual stream). A chunk's non-zero activations are saved under features/.partial/ before the next chunk
starts, so an interrupted build resumes at the first missing chunk. The statistics are computed
at the end from all chunks at once (workbench.features.compute), the files written atomically,
and the manifest last: its presence means the store is complete.
"""

from __future__ import annotations

import json
import math
import shutil
import time
import warnings
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from workbench.atomic import atomic_path, atomic_write_text, sha256_file
from workbench.errors import BadValueError, DamagedFileError
from workbench.features import across, compute
from workbench.features.config import FeatureConfig
from workbench.features.store import FORMAT, MANIFEST, STORE
from workbench.lock import output_lock
from workbench.readback import digest, json_or_empty, npy_file, sealed_json, write_sealed_json
from workbench.sae.scores import shown

PARTIAL = ".partial"
RESID_HOOKS = ("hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_mlp_out", "hook_attn_out", "hook_embed")


def _save_npy(path: Path, arr: np.ndarray) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, np.ascontiguousarray(arr), allow_pickle=False)


def _load_npy(path: Path) -> np.ndarray:
    return npy_file(path, "partial feature store chunk", "rerun the build with --overwrite")


def _layout(sae) -> tuple[int, int, int]:
    """(sparse latents, scaffold rank, block size) of a SAELens-format SAE."""
    r = int(getattr(sae.cfg, "scaffold_rank", 0))
    return sae.cfg.d_sae - r, r, int(getattr(sae.cfg, "block_size", 1))


class _Job:
    """One SAE's store: its folder, partial chunks and resume record."""

    def __init__(self, sae_dir: Path, sae, cfg: FeatureConfig, cache, n_rows: int, overwrite: bool):
        self.dir, self.sae, self.cfg = sae_dir, sae, cfg
        self.n_sparse, self.rank, self.block = _layout(sae)
        self.n_units = self.n_sparse // self.block
        self.out = sae_dir / STORE
        self.partial = self.out / PARTIAL
        if overwrite and self.out.exists():
            shutil.rmtree(self.out)
        if (self.out / MANIFEST).is_file():
            raise BadValueError(f"{self.out} already holds a feature store; pass --overwrite to rebuild it")
        self.record = {
            "config": cfg.to_dict(),
            "cache": str(Path(cache.path).resolve()),
            "n_rows": n_rows,
            "cache_created": cache.manifest.get("created"),
            "sae_weights": sha256_file(sae_dir / "sae_weights.safetensors"),
        }
        prog = self.partial / "progress.json"
        if prog.is_file():
            old = sealed_json(prog, "partial feature store record", "rerun it with --overwrite", legacy=True)
            if old != self.record:
                diff = [k for k in self.record if old.get(k) != self.record[k]]
                raise BadValueError(
                    f"{self.out} holds an unfinished build with a different {', '.join(diff)}; "
                    "rerun it with the same options, or pass --overwrite to start over"
                )
        else:
            write_sealed_json(prog, self.record)

    def done(self, c: int) -> bool:
        """Whether chunk c was encoded: its .done record (sealed: the build, the chunk, each file's checksum) holds
        and every file matches it. A damaged chunk is named and encoded again, never used."""
        path = self.partial / f"c{c:06d}.done"
        if not path.is_file():
            return False
        try:
            rec = sealed_json(path, "partial feature store chunk record", fields={"files": dict})
            if rec.get("build") != digest(self.record) or rec.get("chunk") != c:
                raise DamagedFileError(f"{path} records chunk {rec.get('chunk')} of another build, not chunk {c}")
            for name, want in rec["files"].items():
                if not (self.partial / name).is_file() or sha256_file(self.partial / name) != want:
                    raise DamagedFileError(f"{self.partial / name} differs from the checksum {path} records")
        except DamagedFileError as e:
            warnings.warn(f"encoding a damaged feature store chunk again, not reusing it: {e}", stacklevel=2)
            return False
        return True

    @torch.no_grad()
    def encode_chunk(self, c: int, x: torch.Tensor, row0: int) -> None:
        """Non-zero unit activations of rows row0.. -> partial chunk files (a block's activation is its code norm)."""
        parts: dict[str, list] = {"units": [], "rows": [], "vals": [], "coords": []}
        for s in range(0, len(x), self.cfg.batch_rows):
            z = self.sae.encode(x[s : s + self.cfg.batch_rows].to(self.sae.dtype))[:, : self.n_sparse].float()
            zb = z.view(len(z), self.n_units, self.block)
            a = zb.norm(dim=-1) if self.block > 1 else z
            r, u = (a > 0).nonzero(as_tuple=True)
            parts["units"].append(u.int())
            parts["rows"].append((r + row0 + s).int())
            parts["vals"].append(a[r, u])
            if self.block > 1:
                parts["coords"].append(zb[r, u])
        if self.rank:  # stream moments for the scaffold panel's principal components
            xd = x.double()
            parts["s1"], parts["s2"] = [xd.sum(0, keepdim=True)], [xd.T @ xd]
        files = {}
        for k, v in parts.items():
            if v:
                _save_npy(self.partial / f"c{c:06d}.{k}.npy", torch.cat(v).numpy())
                files[f"c{c:06d}.{k}.npy"] = sha256_file(self.partial / f"c{c:06d}.{k}.npy")
        write_sealed_json(self.partial / f"c{c:06d}.done", {"build": digest(self.record), "chunk": c, "files": files})

    def entries(self, n_chunks: int) -> tuple[compute.Entries, np.ndarray | None]:
        def cat(k):
            return np.concatenate([_load_npy(self.partial / f"c{c:06d}.{k}.npy") for c in range(n_chunks)])

        e = compute.Entries(
            cat("units").astype(np.int64),
            cat("rows").astype(np.int64),
            cat("vals"),
            self.n_units,
            self.record["n_rows"],
        )
        coords = cat("coords")[e.order] if self.block > 1 else None
        return e, coords

    def dictionary(self, e: compute.Entries) -> across.Dictionary:
        """This SAE as a member of its hook's group: decoder rows and activations over the correlation's rows."""
        W = self.sae.W_dec.detach().float().cpu().numpy()[: self.n_sparse]
        return across.Dictionary(self.dir, self.record["sae_weights"], W, self.block, e.matrix(self.cfg.corr_tokens))


def build_stores(
    sae_dirs,
    cache_path,
    model_spec: str = "tiny",
    cfg: FeatureConfig | None = None,
    *,
    overwrite: bool = False,
    progress: bool = True,
    device: str = "cpu",
) -> list[Path]:
    """Build (or resume) the feature store of every SAE; SAEs on one hook share one pass over the cache."""
    from workbench.cache.reader import ActivationCache
    from workbench.models import load
    from workbench.sae.io import load_sae

    cfg = cfg or FeatureConfig()
    unique = {}  # one job per SAE folder, however it is spelled (two would delete each other's files)
    for d in map(Path, sae_dirs):
        unique.setdefault(d.resolve(), d)
    saes = []
    for d in unique.values():
        sae = load_sae(d, device=device).eval()
        if not sae.cfg.metadata.hook_name:
            raise BadValueError(f"{d}/cfg.json has no metadata.hook_name; cannot tell which activations it reads")
        saes.append((d, sae))
    with ExitStack() as held:  # one process per store, from before --overwrite deletes anything
        for d, _ in saes:
            held.enter_context(output_lock(d / STORE, "workbench features build"))
        model, tok = load(model_spec, device=device)
        hooks = sorted({s.cfg.metadata.hook_name for _, s in saes})
        cache = ActivationCache.open(cache_path, model=model, hooks=hooks)
        vocab = [tok.decode([i]) for i in range(model.cfg.d_vocab)]
        out = []
        for hook in hooks:
            group = [(d, s) for d, s in saes if s.cfg.metadata.hook_name == hook]
            out += _build_hook(cache, hook, group, model, vocab, cfg, overwrite, progress)
        return out


def _build_hook(cache, hook, group, model, vocab, cfg, overwrite, progress) -> list[Path]:
    t0 = time.time()
    avail = cache.n_tokens(cfg.split)
    n_rows = min(cfg.n_tokens or avail, avail)
    if n_rows == 0:
        raise BadValueError(f"the cache at {cache.path} has no {cfg.split} rows; choose another --split")
    for d, s in group:
        if s.cfg.d_in != cache.d(hook):
            raise BadValueError(
                f"SAE {d} has d_in={s.cfg.d_in} but hook {hook!r} in {cache.path} has width {cache.d(hook)}"
            )
    jobs = [_Job(d, s, cfg, cache, n_rows, overwrite) for d, s in group]
    n_chunks = math.ceil(n_rows / cfg.chunk_rows)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=n_rows, desc=f"features {hook}", unit="tok", unit_scale=True)
    for c in range(n_chunks):
        a, b = c * cfg.chunk_rows, min(n_rows, (c + 1) * cfg.chunk_rows)
        todo = [j for j in jobs if not j.done(c)]
        if todo:
            x = cache.rows(hook, np.arange(a, b), split=cfg.split)
            for j in todo:
                j.encode_chunk(c, x, a)
        if bar is not None:
            bar.update(b - a)
    if bar is not None:
        bar.close()
    meta = row_metadata(cache, cfg.split, n_rows, vocab)
    loaded = [(j, *j.entries(n_chunks)) for j in jobs]
    group = [j.dictionary(e) for j, e, _ in loaded]  # matched with each other: workbench.features.across
    return [_finalize(j, e, coords, group, n_chunks, cache, hook, model, vocab, meta, t0) for j, e, coords in loaded]


def row_metadata(cache, split: str, n: int, vocab: list[str]) -> dict:
    """Per-row tokens, sequence positions and labels of the first n rows, and the (sequence, position) -> row map."""
    seq, pos = cache.seq_index(split)[:n].astype(np.int64), cache.positions(split)[:n]
    sequences = cache.sequences(split)
    seqpos_row = np.full(sequences.shape, -1, np.int64)
    seqpos_row[seq, pos] = np.arange(n)
    labels = {k: v[:n].astype(np.int64) for k, v in cache.labels(split).items()}
    names = {k: list(v) for k, v in cache.manifest.get("label_names", {}).items()}
    tokens = cache.token_ids(split)[:n]
    kinds = {}
    for k, lab in labels.items():
        if k == "entity" and "role" in labels:
            continue
        nv = max(int(lab.max()) + 1 if len(lab) else 1, len(names.get(k, [])))
        kinds[k] = (lab, [names[k][i] if i < len(names.get(k, [])) else str(i) for i in range(nv)])
    if "entity" in labels and "role" in labels:
        # the entity label refines a role into a specific value; name each pair by its token
        ent, role = labels["entity"], labels["role"]
        width = int(ent.max()) + 1 if len(ent) and ent.max() >= 0 else 1
        key = np.where(ent >= 0, role * width + ent, -1)
        values, first = np.unique(key[key >= 0], return_index=True)
        rows = np.flatnonzero(key >= 0)[first]
        dense = np.full(int(key.max()) + 1 if (key >= 0).any() else 1, -1, np.int64)
        dense[values] = np.arange(len(values))
        rn = kinds.get("role", (None, []))[1]
        label = [
            f"{rn[int(v) // width] if int(v) // width < len(rn) else int(v) // width}={vocab[tokens[r]].strip()}"
            for v, r in zip(values, rows)
        ]
        kinds["entity"] = (np.where(key >= 0, dense[np.maximum(key, 0)], -1), label)
    return {"seq": seq, "pos": pos, "sequences": sequences, "seqpos_row": seqpos_row, "tokens": tokens, "labels": kinds}


def _finalize(job: _Job, e, coords, group, n_chunks: int, cache, hook, model, vocab, meta: dict, t0: float) -> Path:
    """Every statistic of one store from its saved chunks (entries e, block coordinates), its matches with the other
    dictionaries of its group, the files written atomically, the manifest last."""
    cfg = job.cfg
    W_dec = job.sae.W_dec.detach().float().cpu().numpy()
    files = {**_examples(e, meta, cfg, job.n_units), **_neighbours(e, W_dec, job, cfg)}
    me = next(d for d in group if d.folder == job.dir)
    others = [d for d in group if d is not me]
    if others:
        files.update(across.match(me, others, cfg.n_across))
    files.update(_token_index(e, meta, len(vocab), cfg))
    block_files, dirs = _unit_directions(e, coords, W_dec, job, cfg)
    logit_files, logit_note = _logit_effects(job, hook, model, dirs, cfg)
    files.update(block_files, **logit_files)
    info = json_or_empty(job.dir / "workbench.json", "SAE's training record")
    sae_cfg = info.get("sae_config", {})
    units, label_kinds = _unit_table(e, job, meta, sae_cfg.get("prefixes"))
    # the scaffold panel compares its directions with the stream's principal components: a transcoder's scaffold
    # writes another space than the one the store reads, so it has none
    scaffold = _scaffold(job, n_chunks, W_dec, cfg) if job.rank and _writes(job, hook) == hook else None
    _write_files(job.out, files, units, vocab, scaffold)
    manifest = _manifest(
        job, cache, hook, label_kinds, logit_note, sae_cfg.get("prefixes") if "level" in units else None
    )
    if others:
        manifest["across"] = across.listing(me, others, job.out)
        manifest["across_how"] = across.description(min(cfg.corr_tokens, job.record["n_rows"]), cfg.split)
    manifest["seconds"] = round(time.time() - t0, 1)
    manifest["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    manifest["files"] = {
        p.name: sha256_file(p) for p in sorted(job.out.iterdir()) if p.is_file() and p.name != MANIFEST
    }
    atomic_write_text(job.out / MANIFEST, json.dumps(manifest, indent=1))
    shutil.rmtree(job.partial)
    return job.out


def _examples(e: compute.Entries, meta: dict, cfg: FeatureConfig, U: int) -> dict[str, np.ndarray]:
    """Top activations, then quantile bins; token windows with the unit's activation on each token."""
    top_rows, top_vals = e.top(cfg.n_top)
    edges, q_rows, q_vals = e.quantiles(cfg.n_bins, cfg.per_bin)
    ex_rows, ex_vals = np.concatenate([top_rows, q_rows], 1), np.concatenate([top_vals, q_vals], 1)
    toks, wrows = compute.windows(
        ex_rows, meta["seq"], meta["pos"], meta["sequences"], meta["seqpos_row"], cfg.left, cfg.right
    )
    acts = e.lookup(wrows.reshape(-1), np.repeat(np.arange(U), wrows.shape[1] * wrows.shape[2])).reshape(wrows.shape)
    return {
        "ex_rows": ex_rows,
        "ex_vals": ex_vals,
        "ctx_tokens": toks,
        "ctx_acts": acts,
        "quantile_edges": edges,
        "hist": e.histogram(cfg.hist_bins),
    }


def _neighbours(e: compute.Entries, W_dec: np.ndarray, job: _Job, cfg: FeatureConfig) -> dict[str, np.ndarray]:
    """Neighbours, both kinds: by decoder direction and by activation correlation."""
    files = {}
    files["nb_cos_ids"], files["nb_cos_vals"] = compute.decoder_neighbours(
        W_dec[: job.n_sparse], job.block, cfg.n_neighbours
    )
    files["nb_corr_ids"], files["nb_corr_vals"] = compute.correlation_neighbours(e, cfg.corr_tokens, cfg.n_neighbours)
    return files


def _token_index(e: compute.Entries, meta: dict, n_vocab: int, cfg: FeatureConfig) -> dict[str, np.ndarray]:
    """The per-token search index: the units each token fires most, and how often each token occurs."""
    files = {}
    files["token_units"], files["token_means"], files["token_frac"] = compute.token_units(
        e, meta["tokens"], n_vocab, cfg.token_top
    )
    files["token_counts"] = np.bincount(meta["tokens"], minlength=n_vocab).astype(np.int64)
    return files


def _unit_directions(e: compute.Entries, coords, W_dec: np.ndarray, job: _Job, cfg: FeatureConfig):
    """({block_coords} for a block architecture, else {}; each unit's write direction): a block's top examples'
    coordinates, and its mean code over its firings times its decoder block (for its logit direction)."""
    if job.block == 1:
        return {}, W_dec[: job.n_sparse]
    U = job.n_units
    i = np.clip(e.ends[:, None] - 1 - np.arange(cfg.n_top)[None, :], 0, max(len(coords) - 1, 0))
    ok = (np.arange(cfg.n_top)[None, :] < e.counts[:, None])[..., None]
    block_coords = np.where(ok, coords[i] if len(coords) else 0, 0).astype(np.float32)
    mean_code = np.stack(
        [np.bincount(e.units, weights=coords[:, k], minlength=U) for k in range(job.block)], 1
    ) / np.maximum(e.counts[:, None], 1)
    dirs = np.einsum("ub,ubd->ud", mean_code, W_dec[: job.n_sparse].reshape(U, job.block, -1))
    return {"block_coords": block_coords}, dirs


def _logit_effects(job: _Job, hook: str, model, dirs: np.ndarray, cfg: FeatureConfig) -> tuple[dict, str | None]:
    """Logit effects: the direct path through the unembedding, the final LayerNorm's scale folded in (only for
    a hook on the residual stream's width; a transcoder's decoder writes its target hook, not the hook it reads);
    returns (files, the note the manifest keeps on how they were made)."""
    if _writes(job, hook).split(".")[-1] not in RESID_HOOKS or dirs.shape[1] != model.cfg.d_model:
        return {}, None
    ln_w = getattr(getattr(model, "ln_final", None), "w", None)
    ln = ln_w.detach().float().cpu().numpy() if ln_w is not None else None
    files = {}
    files["logit_ids"], files["logit_vals"] = compute.logit_effects(
        dirs, model.W_U.detach().float().cpu().numpy(), ln, cfg.n_logits
    )
    note = (
        "decoder direction @ diag(ln_final.w) @ W_U: the final LayerNorm's scale is applied, its "
        "normalisation by the residual norm is not"
        if ln is not None
        else "decoder direction @ W_U (the model has no final LayerNorm scale, or it is folded into W_U)"
    )
    if job.block > 1:
        note += "; a block's direction is its mean code over its firings times its decoder block"
    return files, note


def _unit_table(e: compute.Entries, job: _Job, meta: dict, prefixes) -> tuple[dict, dict[str, list[str]]]:
    """units.parquet's columns (counts, Matryoshka level, each label kind's best value and the best label over
    all kinds) and the label names per kind."""
    U = job.n_units
    units = {
        "unit": np.arange(U, dtype=np.int32),
        "count": e.counts,
        "freq": e.freq(),
        "max": e.max(),
        "mean_nonzero": e.mean_nonzero(),
    }
    if prefixes and job.block == 1:
        units["level"] = np.searchsorted(np.asarray(prefixes), np.arange(U), side="right").astype(np.int32)
    label_kinds: dict[str, list[str]] = {}
    best = {
        "label_kind": np.full(U, "", object),
        "label": np.full(U, "", object),
        "label_precision": np.zeros(U, np.float32),
        "label_recall": np.zeros(U, np.float32),
        "label_f1": np.zeros(U, np.float32),
    }
    for kind, (lab, names) in meta["labels"].items():
        r = compute.unit_labels(e, lab, len(names))
        label_kinds[kind] = names
        units[f"{kind}_label"] = np.array(names + [""], dtype=object)[r["value"]]  # value -1 (never fired) -> ""
        for k in ("precision", "recall", "f1"):
            units[f"{kind}_{k}"] = r[k]
        better = r["f1"] > best["label_f1"]
        best["label_kind"][better], best["label"][better] = kind, units[f"{kind}_label"][better]
        for k in ("precision", "recall", "f1"):
            best[f"label_{k}"][better] = r[k][better]
    units.update(best)
    return units, label_kinds


def _write_files(out: Path, files: dict, units: dict, vocab: list[str], scaffold: dict | None) -> None:
    """Every file of the store but the manifest, each written atomically."""
    out.mkdir(parents=True, exist_ok=True)
    for name, arr in files.items():
        _save_npy(out / f"{name}.npy", arr)
    with atomic_path(out / "units.parquet") as tmp:
        pq.write_table(pa.table({k: pa.array(list(v) if v.dtype == object else v) for k, v in units.items()}), tmp)
    atomic_write_text(out / "vocab.json", json.dumps(vocab))
    if scaffold is not None:
        atomic_write_text(out / "scaffold.json", json.dumps(scaffold, indent=1))


def _writes(job: _Job, hook: str) -> str:
    """The hook the dictionary's decoder writes: a transcoder's target, else the hook it reads."""
    return job.sae.cfg.metadata.hook_name_out or hook


def _manifest(job: _Job, cache, hook: str, label_kinds: dict, logit_note: str | None, prefixes) -> dict:
    """What the store holds and how each statistic was made (the timing and checksums are added by _finalize)."""
    cfg, n_rows, writes = job.cfg, job.record["n_rows"], _writes(job, hook)
    return {
        "format": FORMAT,
        "sae": job.dir.name,
        "sae_weights": job.record["sae_weights"],
        "hook": hook,
        "reads": hook,
        "writes": writes,
        "kind": "transcoder" if writes != hook else "sae",
        "model": cache.manifest["model"],
        "architecture": job.sae.cfg.architecture(),
        "training_architecture": job.sae.cfg.metadata.training_architecture,
        "cache": job.record["cache"],
        "split": cfg.split,
        "n_rows": n_rows,
        "n_units": job.n_units,
        "unit": "block" if job.block > 1 else "latent",
        "block_size": job.block,
        "n_sparse": job.n_sparse,
        "scaffold_rank": job.rank,
        "prefixes": prefixes,
        "config": cfg.to_dict(),
        "label_kinds": label_kinds,
        "logit_effects": logit_note,
        "neighbours": {
            "cosine": "cosine of decoder directions"
            if job.block == 1
            else "decoder subspace overlap: sqrt(mean cos^2 of the principal angles between the blocks' spans)",
            "correlation": f"Pearson correlation of activations over the first {min(cfg.corr_tokens, n_rows):,} "
            f"{cfg.split} tokens",
        },
        "histogram": f"{cfg.hist_bins} equal-width bins of the non-zero activations, from 0 to the unit's max",
        "quantiles": f"{cfg.n_bins} true quantile bins of the non-zero activations (edges in quantile_edges), "
        f"{cfg.per_bin} examples each, spread evenly by rank",
    }


def _scaffold(job: _Job, n_chunks: int, W_dec: np.ndarray, cfg: FeatureConfig) -> dict:
    """The scaffold's directions against the stream's top principal components, plus its CE cost from metrics.json."""
    s1 = sum(_load_npy(job.partial / f"c{c:06d}.s1.npy")[0] for c in range(n_chunks))
    s2 = sum(_load_npy(job.partial / f"c{c:06d}.s2.npy") for c in range(n_chunks))
    pcs, explained = compute.principal_components(s1, s2, job.record["n_rows"], min(cfg.n_pcs, W_dec.shape[1]))
    S = W_dec[job.n_sparse :].astype(np.float64)
    S = S / np.maximum(np.linalg.norm(S, axis=1, keepdims=True), 1e-12)
    cos = S @ pcs.T
    P = pcs[: job.rank]
    splice = json_or_empty(job.dir / "metrics.json", "SAE's evaluation metrics").get("splice", {})
    return {
        "rank": job.rank,
        "abs_cos_with_pcs": np.abs(cos).round(4).tolist(),
        "pc_explained": explained.round(5).tolist(),
        "in_top_r_pcs": np.linalg.norm(S @ P.T, axis=1).round(4).tolist(),
        "ce": {
            k: shown(splice, k)
            for k in ("ce_clean", "ce_sae", "ce_no_scaffold", "ce_loss_recovered", "ce_loss_recovered_no_scaffold")
            if k in splice
        },
    }
