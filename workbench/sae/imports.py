"""Dictionaries made by other tools, checked against the model they will run on and copied into the workspace.

A circuit-tracer transcoder set (config.yaml naming feature_input_hook / feature_output_hook, and one
layer_<i>.safetensors per layer, ReLU or JumpReLU, with or without a skip path) becomes a workbench
transcoder set: each layer converted to a SAELens `jumprelu_transcoder` (`jumprelu_skip_transcoder` with a
skip path; ReLU as threshold 0): W_enc transposed to SAELens's [d_in, d_sae], the threshold key renamed.
A circuit-tracer cross-layer transcoder (its W_enc_<i> / W_dec_<i> files) becomes a workbench CLT (`tracer_clt`).

A SAELens folder (cfg.json + sae_weights.safetensors) of any architecture sae-lens 6 loads (standard,
gated, JumpReLU, Top-k, transcoders, skip transcoders, and the workbench's own) imports from anywhere on
disk: its hooks must exist in the model and its widths match theirs, and the copy's
`metadata.model_name` becomes the workbench's id of that model (the original is kept as
`source_model_name`), which is how the app's live views find the model to run it on. sparsify checkpoints and dictionary_learning
dictionaries are converted to SAELens folders first (workbench.sae.foreign) and imported the same way.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import torch

from workbench.atomic import atomic_path, atomic_write_text
from workbench.errors import BadValueError, MissingInputError
from workbench.readback import confined, damaged, safetensors_file, tensors, yaml_file
from workbench.sae.foreign import (
    DL_WEIGHTS,
    FORMATS,
    RUN_CONFIG,
    SPARSIFY_WEIGHTS,
    Member,
    is_dictionary_learning,
    is_sparsify,
)
from workbench.sae.io import CFG, WEIGHTS, load_sae

TRACER_CONFIG = "config.yaml"
NEEDS = {  # what each format's folder holds, as `detect` looks for it
    "saelens": f"{CFG} and {WEIGHTS}",
    "circuit-tracer": f"{TRACER_CONFIG} (a transcoder set) or W_enc_0.safetensors and W_dec_0.safetensors (a CLT)",
    "sparsify": f"{SPARSIFY_WEIGHTS}, or a {RUN_CONFIG} listing hookpoints",
    "dictionary-learning": DL_WEIGHTS,
}


def detect(src: Path, fmt: str = "auto") -> str:
    """The format of `src`, checked: what --format says, or what the folder holds."""
    if fmt not in FORMATS:
        raise BadValueError(f"--format {fmt!r} is not one of {', '.join(FORMATS)}")
    if not src.is_dir():
        raise MissingInputError(
            f"{src} is not a folder; `sae import` takes a SAELens SAE folder (cfg.json + {WEIGHTS}), a sparsify "
            f"checkpoint, a circuit-tracer transcoder set ({TRACER_CONFIG} + layer_<i>.safetensors) or a "
            "dictionary_learning folder (ae.pt + config.json)"
        )
    holds = {
        "saelens": (src / CFG).is_file() and (src / WEIGHTS).is_file(),
        "circuit-tracer": (src / TRACER_CONFIG).is_file() or is_tracer_clt(src),
        "sparsify": is_sparsify(src),
        "dictionary-learning": is_dictionary_learning(src),
    }
    found = [f for f, yes in holds.items() if yes]
    if fmt == "auto" and found:
        return found[0]
    if fmt in found:
        return fmt
    if not found and (half := _half(src)) and fmt in ("auto", half[0]):
        raise MissingInputError(f"{src / half[2]} is missing: {src} holds a {half[0]} folder's {half[1]} without it")
    needs = NEEDS.get(fmt, "; ".join(f"{k}: {v}" for k, v in NEEDS.items()))
    what = f"it looks like a {found[0]} folder (--format {found[0]})" if found else f"it lacks {needs}"
    raise BadValueError(
        f"{src} is not a {'dictionary folder `sae import` reads' if fmt == 'auto' else fmt + ' folder'}: {what}; "
        f"valid formats: {', '.join(FORMATS[1:])}"
    )


def _half(src: Path) -> tuple[str, str, str] | None:
    """(format, the file there, the file missing) of a folder holding one of a format's two files, or None."""
    if (src / CFG).is_file() != (src / WEIGHTS).is_file():
        there, missing = (CFG, WEIGHTS) if (src / CFG).is_file() else (WEIGHTS, CFG)
        return "saelens", there, missing
    if (src / RUN_CONFIG).is_file() and b'"trainer"' in (src / RUN_CONFIG).read_bytes():
        return "dictionary-learning", RUN_CONFIG, DL_WEIGHTS
    return None


def hook_widths(model, hooks: list[str]) -> dict[str, int]:
    """Each hook's width (the product of its per-position dims, as SAELens flattens hook_z) on a short run."""
    missing = [h for h in hooks if h not in model.hook_dict]
    if missing:
        from workbench.cache.hooks import hook_summary

        raise BadValueError(
            f"the dictionary reads or writes {missing[0]!r}, which model {model.cfg.model_name} does not have; "
            f"its hooks: {', '.join(hook_summary(model.hook_dict))}"
        )
    tokens = torch.zeros((1, 2), dtype=torch.long, device=model.cfg.device)
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=lambda n: n in hooks)
    return {h: int(torch.tensor(cache[h].shape[2:]).prod()) for h in hooks}


def check_fits(sae, model) -> dict:
    """The dictionary's hooks and widths checked against the model; returns {hook, target?, d_in, d_sae}."""
    meta = sae.cfg.metadata
    hooks = {"hook": meta.hook_name} | ({"target": meta.hook_name_out} if getattr(meta, "hook_name_out", None) else {})
    widths = hook_widths(model, list(hooks.values()))
    want = {"hook": sae.cfg.d_in} | ({"target": sae.cfg.d_out} if "target" in hooks else {})
    for role, hook in hooks.items():
        if widths[hook] != want[role]:
            raise BadValueError(
                f"the dictionary's {'input' if role == 'hook' else 'output'} width is {want[role]}, but {hook} of "
                f"model {model.cfg.model_name} is {widths[hook]} wide: it was made for another model"
            )
    return {**hooks, "d_in": sae.cfg.d_in, "d_sae": sae.cfg.d_sae}


def copy_bound(src: Path, dest: Path, model_id: str) -> dict:
    """Copy the folder's files into `dest` with cfg.json's metadata.model_name set to `model_id`; returns cfg.json."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.iterdir()):
        if f.is_file() and f.name not in (CFG, "artifact.json"):
            with atomic_path(dest / f.name) as tmp:
                shutil.copyfile(f, tmp)
    cfg = json.loads((src / CFG).read_text())
    meta = cfg.setdefault("metadata", {})
    meta["source_model_name"], meta["model_name"] = meta.get("model_name"), model_id
    atomic_write_text(dest / CFG, json.dumps(cfg, indent=2))  # written last: the folder is complete with it
    return cfg


@torch.no_grad()
def encoding_gap(src: Path, dest: Path, n: int = 64, seed: int = 0) -> float:
    """Max |difference| of the codes and reconstructions of the source (sae_lens's own loader) and the copy
    (the workbench's) on the same random inputs."""
    from sae_lens import SAE

    ours, theirs = load_sae(dest), SAE.load_from_disk(str(src), device="cpu")
    x = torch.randn(n, ours.cfg.d_in, generator=torch.Generator().manual_seed(seed)) * 3
    gaps = [(ours.encode(x) - theirs.encode(x)).abs().max(), (ours(x) - theirs(x)).abs().max()]
    return float(max(gaps))


TRACER_SHAPES = {
    "W_enc": ("n", "d_in"),
    "W_dec": ("n", "d_out"),
    "b_enc": ("n",),
    "b_dec": ("d_out",),
    "activation_function.threshold": ("n",),
    "W_skip": ("d_out", "d_in"),
}
TRACER_OPTIONAL = ("activation_function.threshold", "W_skip")
WAY_OUT = "restore it from the library that saved it"


def tracer_layers(src: Path) -> tuple[dict, dict[int, Path]]:
    """(config.yaml, layer -> weights file) of a circuit-tracer transcoder set; local `transcoders` paths in the
    config are read relative to the folder (never outside it), else the folder's layer_<i>.safetensors files,
    numbered from 0 without a gap (tracer_members reads and checks them)."""
    hooks = {"feature_input_hook": str, "feature_output_hook": str}
    cfg = yaml_file(src / TRACER_CONFIG, "circuit-tracer transcoder set config", WAY_OUT, fields=hooks)
    listed = cfg.get("transcoders") or []
    if not isinstance(listed, list) or not all(isinstance(p, str) for p in listed):
        raise damaged(src / TRACER_CONFIG, "circuit-tracer config", f"'transcoders' is {listed!r}, not a list of paths")
    local = [
        confined(src, p, "circuit-tracer config", src / TRACER_CONFIG) for p in listed if not p.startswith("hf://")
    ]
    files = dict(enumerate(local)) if local else _numbered(src, r"layer_(\d+)\.safetensors")
    if not files:
        raise MissingInputError(f"{src}: no transcoder weights (layer_<i>.safetensors, or {TRACER_CONFIG}'s list)")
    return cfg, files


def _numbered(src: Path, pattern: str) -> dict[int, Path]:
    """The files of `src` named by `pattern` (its group: the layer), by layer; a gap in 0..L-1 is refused."""
    found = {int(m[1]): f for f in src.iterdir() if (m := re.fullmatch(pattern, f.name))}
    gap = next((i for i in range(len(found)) if i not in found), None)
    if gap is not None:
        missing = pattern.replace(r"(\d+)", str(gap)).replace("\\", "")
        raise MissingInputError(f"{src / missing} is missing: layers {sorted(found)} are there, numbered from 0")
    return dict(sorted(found.items()))


def check_tracer_folder(folder: Path) -> None:
    """Read and check a circuit-tracer folder's files (a CLT's or a transcoder set's) as its import does."""
    if is_tracer_clt(folder):
        tracer_clt_hooks(folder)
        tracer_clt_files(folder)
    elif not (yaml_file(folder / TRACER_CONFIG, "circuit-tracer config", WAY_OUT).get("transcoders") or []):
        tracer_members(*tracer_layers(folder))  # a set of local files (a config listing hf:// URIs: theirs)


def tracer_members(cfg: dict, files: dict[int, Path]) -> list:
    """A circuit-tracer set's layers (config.yaml, layer -> weights file) as foreign.Member (the hooks its config
    names, per layer), every layer's tensors read and checked first (one width for all)."""
    dims = {}
    for f in files.values():
        w = safetensors_file(f, "circuit-tracer transcoder layer", WAY_OUT)
        dims = tensors(f, "circuit-tracer transcoder layer", w, TRACER_SHAPES, optional=TRACER_OPTIONAL, dims=dims)
        dims.pop("n")  # each layer may have its own number of features
    hook, target = cfg["feature_input_hook"], cfg["feature_output_hook"]
    return [
        Member(f, f"blocks.{i}.{hook}", f"blocks.{i}.{target}", i, f"L{i}-circuit-tracer") for i, f in files.items()
    ]


def tracer_to_saelens(path: Path, hooks: tuple[str, str], dest: Path, model_id: str) -> Path:
    """One circuit-tracer layer file as a SAELens transcoder folder (bound to `model_id`)."""
    import sae_lens as sl
    from sae_lens.saes.sae import SAEMetadata

    w = safetensors_file(path, "circuit-tracer transcoder layer", WAY_OUT)  # checked by tracer_layers
    d_sae, d_in = w["W_enc"].shape
    negative = int((w.get("activation_function.threshold", torch.zeros(1)) < 0).sum())
    if negative:
        raise BadValueError(
            f"{path}: {negative} JumpReLU thresholds are negative; circuit-tracer passes negative pre-activations "
            "above them and SAELens's JumpReLU does not, so this layer cannot be converted faithfully"
        )
    meta = SAEMetadata(model_name=model_id, hook_name=hooks[0], hook_name_out=hooks[1])
    skip = "W_skip" in w
    cls, cfg_cls = (
        (sl.JumpReLUSkipTranscoder, sl.JumpReLUSkipTranscoderConfig)
        if skip
        else (sl.JumpReLUTranscoder, sl.JumpReLUTranscoderConfig)
    )
    cfg = cfg_cls(d_in=d_in, d_sae=d_sae, d_out=w["W_dec"].shape[1], apply_b_dec_to_input=False, metadata=meta)
    state = {
        "W_enc": w["W_enc"].T.contiguous(),
        "W_dec": w["W_dec"],
        "b_enc": w["b_enc"],
        "b_dec": w["b_dec"],
        "threshold": w.get("activation_function.threshold", torch.zeros(d_sae)),  # ReLU: threshold 0
        **({"W_skip": w["W_skip"]} if skip else {}),
    }
    sae = cls(cfg)
    sae.load_state_dict({k: v.float() for k, v in state.items()})
    sae.save_model(str(dest))
    return dest


@torch.no_grad()
def tracer_gap(path: Path, layer: int, dest: Path, n: int = 64, seed: int = 0) -> float:
    """Max |difference| of the codes and outputs of circuit-tracer's own loader and the converted copy."""
    from circuit_tracer.transcoder.single_layer_transcoder import load_relu_transcoder

    theirs = load_relu_transcoder(str(path), layer, device=torch.device("cpu"), lazy_encoder=False, lazy_decoder=False)
    ours = load_sae(dest)
    x = torch.randn(n, ours.cfg.d_in, generator=torch.Generator().manual_seed(seed)) * 3
    return float(max((ours.encode(x) - theirs.encode(x)).abs().max(), (ours(x) - theirs(x)).abs().max()))


def is_tracer_clt(src: Path) -> bool:
    """A circuit-tracer CLT folder: CrossLayerTranscoder.to_safetensors's W_enc_<i> / W_dec_<i> files (its
    config.yaml, when there is one, says model_kind cross_layer_transcoder)."""
    return (src / "W_enc_0.safetensors").is_file() and (src / "W_dec_0.safetensors").is_file()


def tracer_clt_hooks(src: Path) -> tuple[str, str]:
    """(input, output) hook names within a block: config.yaml's, else circuit-tracer load_clt's defaults."""
    path = src / TRACER_CONFIG
    cfg = yaml_file(path, "circuit-tracer CLT config", WAY_OUT) if path.is_file() else {}
    hooks = cfg.get("feature_input_hook", "hook_resid_mid"), cfg.get("feature_output_hook", "hook_mlp_out")
    if not all(isinstance(h, str) for h in hooks):
        raise damaged(path, "circuit-tracer CLT config", f"its hooks are {list(hooks)}, not hook names")
    return hooks


def tracer_clt_files(src: Path) -> tuple[list[dict], list]:
    """(encoder files, decoder tensors) of a circuit-tracer CLT, one per layer, every tensor read and checked: one
    width and feature count for all layers, layer i's decoder writing the L - i layers from it on."""
    enc_files = _numbered(src, r"W_enc_(\d+)\.safetensors")
    dec_files = _numbered(src, r"W_dec_(\d+)\.safetensors")
    n_layers, what = len(enc_files), "circuit-tracer CLT layer"
    if len(dec_files) != n_layers:
        i = min(n_layers, len(dec_files))
        name = f"W_{'dec' if i == len(dec_files) else 'enc'}_{i}.safetensors"
        raise MissingInputError(
            f"{src / name} is missing: the CLT has {n_layers} encoder, {len(dec_files)} decoder files"
        )
    enc, dec, dims = [], [], {}
    for i in range(n_layers):
        e = safetensors_file(enc_files[i], what, WAY_OUT)
        shapes = {f"W_enc_{i}": ("n", "d_in"), f"b_enc_{i}": ("n",), f"b_dec_{i}": ("d_out",), f"threshold_{i}": ("n",)}
        dims = tensors(enc_files[i], what, e, shapes, optional=(f"threshold_{i}",), dims=dims)
        d = safetensors_file(dec_files[i], what, WAY_OUT)
        dims = tensors(dec_files[i], what, d, {f"W_dec_{i}": ("n", n_layers - i, "d_out")}, dims=dims)
        enc.append(e)
        dec.append(d[f"W_dec_{i}"])
    return enc, dec


@torch.no_grad()
def tracer_clt(src: Path):
    """A circuit-tracer CLT folder as a workbench BatchTopK CrossLayerTranscoder, exactly: member i's encoder and
    decoders into layers i..L-1 are its layer-i files', its bias into its own layer is b_dec_<i>, its thresholds
    the layer's JumpReLU thresholds (one per latent where they differ; ReLU: 0). The workbench's rule also needs
    a positive pre-activation, so a negative threshold is refused."""
    from workbench.sae.architectures import build
    from workbench.sae.config import CLTConfig

    enc, dec = tracer_clt_files(src)
    n_layers = len(enc)
    n, d_in = enc[0]["W_enc_0"].shape
    d_out = dec[0].shape[-1]
    thetas = [e.get(f"threshold_{i}", torch.zeros(n)).flatten().double() for i, e in enumerate(enc)]
    for i, theta in enumerate(thetas):
        if theta.min() < 0:
            raise BadValueError(
                f"{src / f'W_enc_{i}.safetensors'}: {int((theta < 0).sum())} of layer {i}'s JumpReLU thresholds are "
                "negative; circuit-tracer passes negative pre-activations above them and the workbench's CLT does "
                "not, so this CLT cannot be converted faithfully"
            )
    per_latent = any(theta.min() != theta.max() for theta in thetas)
    cfg = CLTConfig("batchtopk", k=1, n_latents=n, input_norm="none", threshold_per_latent=per_latent)
    clt = build(cfg.resolve(d_in, None, d_out, n_layers))
    for i, (e, m) in enumerate(zip(enc, clt.members)):
        m.W_enc.copy_(e[f"W_enc_{i}"])
        m.b_enc.copy_(e[f"b_enc_{i}"])
        m.W_dec.copy_(dec[i].reshape(n, -1))
        m.b_dec.zero_()[:d_out] = e[f"b_dec_{i}"]
        m.threshold.copy_(thetas[i] if per_latent else thetas[i][0])
    return clt.eval()


@torch.no_grad()
def tracer_clt_gap(src: Path, ours, n: int = 64, seed: int = 0) -> float:
    """Max |difference| of every layer's reconstruction from circuit-tracer's own load_clt and the workbench CLT."""
    from circuit_tracer.transcoder.cross_layer_transcoder import load_clt

    theirs = load_clt(str(src), device=torch.device("cpu"), dtype=torch.float32, lazy_decoder=False)
    x = torch.randn(ours.n_layers, n, ours.cfg.d_in, generator=torch.Generator().manual_seed(seed)) * 3
    return float((theirs(x) - torch.stack(ours.reconstruct(list(x)))).abs().max())
