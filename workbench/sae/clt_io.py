"""A CLT's folder: the workbench's own weights and manifest, and circuit-tracer's CLT format beside them.

`clt.json` (schema workbench.clt) names the model, the layers, each layer's input and target hooks, the full
config (every choice, e.g. clt_loss and clt_sparsity) and the run; `clt_weights.safetensors` is the module's state
(training units; its checksum in clt.json). `circuit_tracer/` holds what circuit-tracer's `load_clt` reads
(`W_enc_{i}.safetensors` with W_enc_{i} [n, d_in], b_enc_{i}, b_dec_{i}, threshold_{i}; `W_dec_{i}.safetensors`
with W_dec_{i} [n, n_layers - i, d_out]) and a `config.yaml` with model_kind cross_layer_transcoder, every scale
folded in so it reads raw activations. circuit-tracer 0.5.0's CLT has ReLU or JumpReLU codes and no skip path in
its files, so only BatchTopK, Matryoshka, JumpReLU and standard CLTs (JumpReLU at their thresholds, ReLU at 0)
without scaffold or skip are written there; the manifest says why when it is not.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from workbench.atomic import atomic_path, atomic_write_text, sha256_file
from workbench.errors import DamagedFileError, MissingInputError
from workbench.readback import read_json, verify_artifact
from workbench.sae.config import BATCH_RANKED

MANIFEST, WEIGHTS, TRACER = "clt.json", "clt_weights.safetensors", "circuit_tracer"
SCHEMA = "workbench.clt"


def is_clt(folder: str | Path) -> bool:
    return (Path(folder) / MANIFEST).is_file()


def save_clt(clt, folder: str | Path, metadata: dict | None = None, workbench_info: dict | None = None) -> Path:
    """Write the weights, the circuit-tracer files where the CLT fits that format, then clt.json (last: a folder
    without it is not a CLT)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().float().cpu().contiguous() for k, v in clt.state_dict().items()}
    with atomic_path(folder / WEIGHTS) as tmp:
        save_file(state, str(tmp))
    meta = metadata or {}
    reason = tracer_unsupported(clt.cfg)
    if reason is None:
        write_circuit_tracer(clt, folder / TRACER, meta)
    manifest = {
        "schema": SCHEMA,
        "version": 1,
        "model": meta.get("model_name"),
        "layers": meta.get("layers"),
        "input_hooks": meta.get("input_hooks"),
        "target_hooks": meta.get("target_hooks"),
        "metadata": meta,
        "clt_config": clt.cfg.to_dict(),
        "weights_sha256": sha256_file(folder / WEIGHTS),
        "circuit_tracer": {"folder": TRACER} if reason is None else {"folder": None, "why_not": reason},
        **(workbench_info or {}),
    }
    atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=2))
    return folder


def tracer_unsupported(cfg) -> str | None:
    """Why circuit-tracer 0.5.0's CLT format cannot hold this CLT exactly (None: it can)."""
    if cfg.architecture not in (*BATCH_RANKED, "jumprelu", "standard"):  # JumpReLU (ReLU: threshold 0) at inference
        return f"circuit-tracer's CLT codes are ReLU or JumpReLU; a {cfg.architecture} CLT's rule is not one of them"
    if cfg.skip or cfg.scaffold_rank:
        return "circuit-tracer 0.5.0's CLT files hold no skip path or scaffold"
    return None


@torch.no_grad()
def tracer_tensors(clt) -> list[tuple[dict, dict]]:
    """Per layer (encoder file, decoder file) tensors in circuit-tracer's names, in raw units."""
    L, d = clt.n_layers, clt.cfg.d_out
    out = []
    for i, m in enumerate(clt.members):
        W_enc, b_enc = m.W_enc.detach().float().cpu(), m.b_enc.detach().float().cpu()
        s = float(m.input_scale)
        so = clt.output_scale.detach().float().cpu()
        W_dec = m.W_dec.detach().float().cpu().view(-1, L - i, d) / so[i:, None]
        enc = {
            f"W_enc_{i}": (W_enc * s).contiguous(),
            f"b_enc_{i}": b_enc - W_enc @ m.b_in.detach().float().cpu(),
            f"b_dec_{i}": clt.bias(i).detach().float().cpu().contiguous(),
            f"threshold_{i}": m.threshold.detach().float().cpu().expand(m.cfg.n_latents).clone()
            if hasattr(m, "threshold")  # an imported CLT's per-latent thresholds
            else m.inference_threshold().detach().float().cpu(),
        }
        out.append((enc, {f"W_dec_{i}": W_dec.contiguous()}))
    return out


def write_circuit_tracer(clt, folder: Path, meta: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, (enc, dec) in enumerate(tracer_tensors(clt)):
        for name, tensors in ((f"W_enc_{i}", enc), (f"W_dec_{i}", dec)):
            with atomic_path(folder / f"{name}.safetensors") as tmp:
                save_file(tensors, str(tmp))
    hooks = meta.get("input_hooks") or []
    targets = meta.get("target_hooks") or []
    lines = [
        "model_kind: cross_layer_transcoder",
        f"model_name: {json.dumps(meta.get('model_name'))}",
        f"feature_input_hook: {json.dumps(hooks[0].split('.', 2)[-1] if hooks else 'ln2.hook_normalized')}",
        f"feature_output_hook: {json.dumps(targets[0].split('.', 2)[-1] if targets else 'hook_mlp_out')}",
    ]
    atomic_write_text(folder / "config.yaml", "\n".join(lines) + "\n")


def read_manifest(folder: str | Path) -> dict:
    folder = Path(folder)
    if not (folder / MANIFEST).is_file():
        raise MissingInputError(f"{folder} is not a CLT: {MANIFEST} is missing")
    verify_artifact(folder, "cross-layer transcoder")  # every file its artifact.json lists, against its checksum
    return read_json(folder / MANIFEST, DamagedFileError, "retrain the CLT or restore the file")


def load_clt(folder: str | Path, device: str = "cpu"):
    """The saved CLT as a workbench CrossLayerTranscoder (eval mode), its weights checked against clt.json."""
    from workbench.sae.architectures import build
    from workbench.sae.config import CLTConfig

    folder = Path(folder)
    manifest = read_manifest(folder)
    if not (folder / WEIGHTS).is_file():
        raise MissingInputError(f"CLT {folder}: {WEIGHTS} is missing")
    if sha256_file(folder / WEIGHTS) != manifest.get("weights_sha256"):
        raise DamagedFileError(
            f"{folder / WEIGHTS} does not match the checksum in {folder / MANIFEST}; retrain or restore the CLT"
        )
    clt = build(CLTConfig.from_dict(manifest["clt_config"]))
    state = load_file(str(folder / WEIGHTS))
    if not all(torch.isfinite(v).all() for v in state.values()):
        raise DamagedFileError(f"{folder / WEIGHTS} holds NaN/inf values; the file is damaged")
    clt.load_state_dict({k: v.to(clt.state_dict()[k].dtype) for k, v in state.items()})
    return clt.to(device).eval()
