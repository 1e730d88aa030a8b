"""`workbench sae import` and `sae export`: dictionaries made by other tools checked against the model and recorded
in the workspace, and ours written in their files."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from safetensors.torch import save_file

from workbench.atomic import atomic_path, atomic_write_text, sha256_file
from workbench.circuits.feature.tracer_export import write_transcoder_set
from workbench.dictionaries.kinds import CLT, SAE, TRANSCODERS, kind_of
from workbench.errors import BadValueError, OutputExistsError
from workbench.models import load
from workbench.provenance import model_id
from workbench.readback import json_file
from workbench.sae import foreign, hub, imports
from workbench.sae.clt_io import save_clt
from workbench.sae.io import load_sae
from workbench.sae.transcoders import SCHEMA, SET_MANIFEST
from workbench.steps.artifacts import model_inputs, slug
from workbench.steps.dictionaries import record_sae
from workbench.transaction import artifact_transaction
from workbench.workspace import Workspace, check_name


def import_sae(
    ws: Workspace,
    source,
    model_spec: str = "tiny",
    *,
    fmt: str = "auto",
    name: str | None = None,
    model=None,
    hook: str | None = None,
    sae_id: str | None = None,
):
    """A dictionary made by another tool (sae/imports.py, sae/foreign.py) checked against the model and copied into
    the workspace bound to it (`workbench sae import`): a SAELens folder into <ws>/saes/imported/<name>; a
    circuit-tracer set, or a sparsify run of per-layer transcoders, into <ws>/transcoders/<name>; a circuit-tracer
    CLT into <ws>/clts/<name>; a sparsify run's SAEs into <ws>/saes/imported/<name>/<hookpoint>; a Hub id (a sae_lens
    release with `sae_id`, or a circuit-tracer Hub config) through its library's own loader (sae/hub.py) the same
    ways; returns (summary, folder)."""
    if name is not None:
        check_name(name)  # before anything is fetched or loaded
    via = hub.route(str(source), fmt, sae_id)
    if via:
        if hook:
            raise BadValueError("--hook is for sparsify and dictionary_learning files; a Hub id names its hooks")
        return _import_hub(ws, str(source), via, sae_id, model_spec, name=name, model=model)
    src = Path(source)
    fmt = imports.detect(src, fmt)
    name = name or slug(src.resolve().name)
    hooks = foreign.parse_hooks(hook)
    if hooks and fmt in ("saelens", "circuit-tracer"):
        raise BadValueError(f"--hook is for sparsify and dictionary_learning files; a {fmt} folder names its hooks")
    model = model if model is not None else load(model_spec, device="cpu")[0]
    if fmt == "circuit-tracer" and imports.is_tracer_clt(src):
        return import_tracer_clt(ws, src, ws.path(CLT.workspace, name), model, model_spec)
    if fmt == "saelens":
        return import_one(ws, src, ws.path(SAE.workspace, "imported", name), model, model_spec, fmt, src)
    if fmt == "circuit-tracer":
        members = imports.tracer_members(*imports.tracer_layers(src))
    elif fmt == "sparsify":
        members = foreign.sparsify_members(src, model, hooks)
    else:
        members = [foreign.dictionary_learning_member(src, model, hooks)]
    if fmt == "circuit-tracer" or (len(members) > 1 and all(m.target and m.layer is not None for m in members)):
        return import_set(ws, src, ws.path(TRANSCODERS.workspace, name), model, model_spec, fmt, members)
    return _import_converted(ws, ws.path(SAE.workspace, "imported", name), model, model_spec, fmt, members)


def _import_hub(ws: Workspace, ref: str, via: str, sae_id, model_spec: str, *, name, model) -> tuple[dict, Path]:
    """A Hub id fetched by its library's own loader (sae/hub.py) before the model loads, then imported as the folder
    it became: a sae_lens SAE as a SAELens folder, circuit-tracer's files as its set or CLT."""
    name = name or slug(f"{ref}-{sae_id}" if via == "saelens" else ref.removeprefix("hf://"))
    if via == "saelens":
        folder = ws.path(SAE.workspace, "imported", name)
        ws.root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=ws.root) as tmp:
            fetched = hub.saelens_folder(ref, sae_id, Path(tmp) / "sae")
            model = model if model is not None else load(model_spec, device="cpu")[0]
            return import_one(ws, fetched, folder, model, model_spec, via, f"{ref} --sae-id {sae_id}")
    cfg, files = hub.tracer_files(ref)
    model = model if model is not None else load(model_spec, device="cpu")[0]
    if isinstance(files, Path):
        return import_tracer_clt(ws, files, ws.path(CLT.workspace, name), model, model_spec)
    folder = ws.path(TRANSCODERS.workspace, name)
    return import_set(ws, files[0].parent, folder, model, model_spec, via, imports.tracer_members(cfg, files))


IMPORT, IMPORTED = "workbench sae import", "an imported dictionary"


def import_one(ws: Workspace, src: Path, folder: Path, model, model_spec: str, fmt: str, source) -> tuple[dict, Path]:
    """One SAELens folder imported into `folder` as one transaction (workbench.transaction)."""
    with artifact_transaction(ws, folder, SAE.workspace, IMPORT, {"source": src}, what=IMPORTED) as staged:
        return _import_saelens(ws, src, staged, model, model_spec, fmt, source), folder


def _import_saelens(ws: Workspace, src: Path, folder: Path, model, model_spec: str, fmt: str, source) -> dict:
    """A SAELens folder checked against the model, copied into `folder` bound to it, and recorded; `source` is the
    file or folder it came from (src itself, or the foreign file it was converted from), or the Hub id it was
    fetched by."""
    sae = load_sae(src)  # refuses damaged files by name
    weights = src if isinstance(source, str) else source  # a Hub id's files as its library fetched them
    fits = imports.check_fits(sae, model)
    cfg = imports.copy_bound(src, folder, model_id(model))
    summary = {
        **fits,
        "architecture": cfg.get("architecture"),
        "source_model_name": cfg["metadata"]["source_model_name"],
        # sae_lens's own loader runs here; sparsify and dictionary_learning in bench/sae/byo_roundtrip.py
        "max_abs_diff_vs_source": imports.encoding_gap(src, folder) if fmt == "saelens" else None,
    }
    ws.record(
        folder,
        SAE.workspace,
        made_by=IMPORT,
        config={"format": fmt, **{k: v for k, v in cfg.items() if k != "metadata"}},
        inputs={
            "source": source if isinstance(source, str) else source.resolve(),
            "source_sha256": sha256_file(weights if weights.is_file() else weights / "sae_weights.safetensors"),
            **model_inputs(ws, model, model_spec),
            **{k: fits[k] for k in ("hook", "target") if k in fits},
        },
        summary=summary,
    )
    return summary


def _import_converted(ws: Workspace, folder: Path, model, model_spec: str, fmt: str, members) -> tuple[dict, Path]:
    """sparsify or dictionary_learning dictionaries, each converted to a SAELens folder and imported as one; several
    go to <folder>/<hookpoint>; all in one transaction (the conversions beside the staged folder)."""
    one, summaries = len(members) == 1, []
    sources = {"source": [m.source for m in members]}
    with artifact_transaction(ws, folder, SAE.workspace if one else None, IMPORT, sources, what=IMPORTED) as staged:
        for m in members:
            converted = foreign.to_saelens(m, staged.parent / "converted" / m.name, model_id(model))
            dest = staged if one else staged / check_name(m.name)
            summaries.append(_import_saelens(ws, converted, dest, model, model_spec, fmt, m.source))
    return (summaries[0] if one else {"dictionaries": len(members), **summaries[0]}), folder


def import_set(ws: Workspace, src: Path, folder: Path, model, model_spec: str, fmt: str, members) -> tuple[dict, Path]:
    """Per-layer transcoders (circuit-tracer's or sparsify's) as a workbench set: each layer a SAELens member checked
    against the model; circuit-tracer's are compared with its own loader here."""
    mid, layers, gaps = model_id(model), [], {}
    with artifact_transaction(ws, folder, TRANSCODERS.workspace, IMPORT, {"source": src}, what=IMPORTED) as staged:
        for m in members:
            dest = staged / check_name(m.name)
            if fmt == "circuit-tracer":
                member = imports.tracer_to_saelens(m.source, m.hooks, dest, mid)
                gaps[m.layer] = imports.tracer_gap(m.source, m.layer, member)
            else:
                member = foreign.to_saelens(m, dest, mid)
            imports.check_fits(load_sae(member), model)
            record_sae(ws, member, IMPORT, None, {"format": fmt, "source": str(m.source)})
            entry = {"layer": m.layer, "input_hook": m.hook, "target_hook": m.target, "transcoders": [member.name]}
            layers.append({**entry, "input_kind": m.hook.split(".", 2)[-1]})
        manifest = {"schema": SCHEMA, "version": 1, "model": mid, "cache": None, "n_layers": model.cfg.n_layers}
        atomic_write_text(staged / SET_MANIFEST, json.dumps({**manifest, "layers": layers}, indent=2))
        summary = {
            "layers": ",".join(str(e["layer"]) for e in layers),
            "transcoders": len(layers),
            "input": layers[0]["input_kind"],
            "max_abs_diff_vs_source": max(gaps.values()) if gaps else None,
        }
        ws.record(
            staged,
            TRANSCODERS.workspace,
            made_by=IMPORT,
            config={"format": fmt, "members": [str(m.source) for m in members]},
            inputs={"source": src.resolve(), **model_inputs(ws, model, model_spec)},
            summary=summary,
            checksums=False,
        )
    return summary, folder


def import_tracer_clt(ws: Workspace, src: Path, folder: Path, model, model_spec: str) -> tuple[dict, Path]:
    """A circuit-tracer CLT (CrossLayerTranscoder.to_safetensors's files) as a workbench CLT folder, its layers,
    hooks and widths checked against the model and its reconstructions against circuit-tracer's own loader."""
    clt, names = imports.tracer_clt(src), imports.tracer_clt_hooks(src)
    if clt.n_layers != model.cfg.n_layers:
        raise BadValueError(f"{src} is a CLT over {clt.n_layers} layers, but the model has {model.cfg.n_layers}")
    layers = list(range(clt.n_layers))
    hooks = [[f"blocks.{layer}.{h}" for layer in layers] for h in names]
    widths = imports.hook_widths(model, hooks[0] + hooks[1])
    for hook, d in [(h, clt.cfg.d_in) for h in hooks[0]] + [(h, clt.cfg.d_out) for h in hooks[1]]:
        if widths[hook] != d:
            raise BadValueError(f"the CLT's width at {hook} is {d}, but the model's is {widths[hook]}: another model")
    meta = {"model_name": model_id(model), "layers": layers, "input_hooks": hooks[0], "target_hooks": hooks[1]}
    with artifact_transaction(ws, folder, CLT.workspace, IMPORT, {"source": src}, what=IMPORTED) as staged:
        save_clt(clt, staged, {**meta, "source": str(src.resolve())})
        summary = {
            "layers": ",".join(map(str, layers)),
            "features_per_layer": clt.cfg.n_latents,
            "input": names[0],
            "max_abs_diff_vs_source": imports.tracer_clt_gap(src, clt),
        }
        ws.record(
            staged,
            CLT.workspace,
            made_by=IMPORT,
            config={"format": "circuit-tracer", **clt.cfg.to_dict()},
            inputs={"source": src.resolve(), **model_inputs(ws, model, model_spec)},
            summary=summary,
        )
    return summary, folder


EXPORT_FORMATS = ("circuit-tracer", "sparsify")


def export_dictionary(source, fmt: str, out, model_spec: str = "tiny", *, model=None) -> Path:
    """A workbench transcoder set or SAE in another library's files (`workbench sae export`): circuit-tracer's
    transcoder set (tracer_export.write_transcoder_set), or a sparsify run folder (config.json naming the
    hookpoints, one folder per hookpoint that sparsify's SparseCoder.load_from_disk reads); returns `out`."""
    if fmt not in EXPORT_FORMATS:
        raise BadValueError(f"--format {fmt!r} is not one of {', '.join(EXPORT_FORMATS)}")
    src, out = Path(source), Path(out)
    if out.exists() and any(out.iterdir()):
        raise OutputExistsError(f"{out} is not empty; export into a new folder")
    model = model if model is not None else load(model_spec, device="cpu")[0]
    if fmt == "circuit-tracer":
        return write_transcoder_set(model, src, out)
    if kind_of(src) is TRANSCODERS:
        entries = json_file(src / SET_MANIFEST, "transcoder set manifest", "re-import or retrain the set")["layers"]
        folders = [src / e["transcoders"][0] for e in entries]
    else:
        folders = [src]
    points = []
    for folder in folders:
        sae = load_sae(folder)
        meta = sae.cfg.metadata
        point = foreign.hf_hookpoint(meta.hook_name, getattr(meta, "hook_name_out", None), model)
        cfg, tensors = foreign.sparsify_tensors(sae, foreign.ln_affine(model, meta.hook_name))
        (out / point).mkdir(parents=True, exist_ok=True)
        with atomic_path(out / point / foreign.SPARSIFY_WEIGHTS) as tmp:
            save_file(tensors, str(tmp))
        atomic_write_text(out / point / "cfg.json", json.dumps(cfg))
        points.append((point, cfg))
    run = {"sae": {k: v for k, v in points[0][1].items() if k != "d_in"}, "hookpoints": [p for p, _ in points]}
    atomic_write_text(out / foreign.RUN_CONFIG, json.dumps(run, indent=2))
    return out
