"""Save trained SAEs in SAELens format (cfg.json + sae_weights.safetensors) and load them back.

Top-k saves as SAELens `topk`; BatchTopK and Matryoshka as `jumprelu` with their threshold theta
(as SAELens does); JumpReLU as `jumprelu`, gated as `gated`, standard (ReLU + L1) as `standard`; block-sparse and scaffold SAEs as the architectures in workbench.sae.saelens.
Transcoders: BatchTopK, Matryoshka, JumpReLU and gated (the JumpReLU a gated encoder equals) as sae-lens's
`jumprelu_transcoder` (`jumprelu_skip_transcoder` with a skip path), standard as `transcoder` (`skip_transcoder`), Top-k as `workbench_topk_transcoder`, block-sparse and scaffolded ones as the
workbench architectures with d_out set; metadata.hook_name is what they read, hook_name_out what
they write.
The input scaling used in training is folded into the weights, so the saved SAE reads raw
activations. workbench.json beside them holds the full workbench config and run information.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from sae_lens import SAE, GatedSAEConfig, JumpReLUSAEConfig, StandardSAEConfig, TopKSAEConfig
from sae_lens.saes.sae import SAEMetadata
from sae_lens.saes.transcoder import (
    JumpReLUSkipTranscoderConfig,
    JumpReLUTranscoderConfig,
    SkipTranscoderConfig,
    TranscoderConfig,
)
from safetensors.torch import save_file

from workbench.atomic import atomic_path, atomic_write_text, sha256_file
from workbench.errors import DamagedFileError, MissingInputError
from workbench.readback import read_json, verify_artifact
from workbench.sae import saelens
from workbench.sae.base import SparseAutoencoder

WEIGHTS, CFG, WORKBENCH = "sae_weights.safetensors", "cfg.json", "workbench.json"


@torch.no_grad()
def export(sae: SparseAutoencoder, metadata: dict | None = None):
    """(SAELens config object, state dict) for a trained workbench SAE or transcoder, scaling folded in."""
    c = sae.cfg
    s = float(sae.input_scale)
    so = float(sae.output_scale) if c.transcoder else s
    W_enc, b_enc, W_dec = (t.detach().float().cpu() for t in sae.weights())
    theta = sae.inference_threshold().detach().float().cpu()
    native_gated = c.architecture == "gated" and not (c.transcoder or c.scaffold_rank)
    if c.architecture == "gated" and not native_gated:  # elsewhere a gated SAE saves as the JumpReLU it equals
        W_enc, b_enc, theta = (t.float().cpu() for t in sae.jumprelu_form())
    t = {
        "W_enc": (W_enc * s).T.contiguous(),
        "b_enc": b_enc.clone(),
        "W_dec": W_dec / so,
        "b_dec": sae.b_dec.detach().float().cpu() / so,
    }
    if c.transcoder:
        t["b_in"] = sae.b_in.detach().float().cpu() / s
    if c.skip:
        t["W_skip"] = sae.W_skip.detach().float().cpu() * (s / so)
    meta = SAEMetadata(**(metadata or {}), training_architecture=c.architecture)
    common = {"d_in": c.d_in, "metadata": meta}
    # a transcoder's encoder reads x itself (sae-lens) or x - b_in (the workbench classes), never x - b_dec
    tc = {"d_out": c.d_out, "apply_b_dec_to_input": False} if c.transcoder else {}
    if c.is_block or c.scaffold_rank or (c.transcoder and c.architecture == "topk"):
        return _workbench_config(sae, t, theta, {**common, **tc, "skip": c.skip}), _contiguous(t)
    if c.transcoder:  # sae-lens's ReLU or JumpReLU transcoders, b_in folded into b_enc
        t["b_enc"] -= W_enc @ sae.b_in.detach().float().cpu()
        del t["b_in"]
        if c.architecture == "standard":
            cls = SkipTranscoderConfig if c.skip else TranscoderConfig
        else:
            t["threshold"] = theta
            cls = JumpReLUSkipTranscoderConfig if c.skip else JumpReLUTranscoderConfig
        return cls(**common, **tc, d_sae=c.n_latents), _contiguous(t)
    if c.architecture == "topk":
        return TopKSAEConfig(**common, d_sae=c.n_latents, k=c.k, rescale_acts_by_decoder_norm=False), _contiguous(t)
    if c.architecture == "standard":
        return StandardSAEConfig(**common, d_sae=c.n_latents), _contiguous(t)
    if native_gated:
        t["b_gate"] = t.pop("b_enc")
        t["r_mag"], t["b_mag"] = sae.r_mag.detach().float().cpu(), sae.b_mag.detach().float().cpu()
        return GatedSAEConfig(**common, d_sae=c.n_latents), _contiguous(t)
    t["threshold"] = theta
    return JumpReLUSAEConfig(**common, d_sae=c.n_latents), _contiguous(t)


def _contiguous(t: dict) -> dict:
    return {k: v.contiguous() for k, v in t.items()}


def _workbench_config(sae: SparseAutoencoder, t: dict, theta: torch.Tensor, common: dict):
    """The config of a workbench-registered architecture (block-sparse, scaffold, Top-k transcoder); the
    scaffold's U is appended to W_dec and its V saved as scaffold_V (workbench.sae.saelens)."""
    c = sae.cfg
    s = float(sae.input_scale)
    so = float(sae.output_scale) if c.transcoder else s
    r = c.scaffold_rank
    if r:
        U, V = sae.scaffold.U.detach().float().cpu(), sae.scaffold.V.detach().float().cpu()
        t["W_dec"] = torch.cat([t["W_dec"], (U / so).T])
        t["scaffold_V"] = (V * s).contiguous()
    else:
        t["scaffold_V"] = torch.zeros(c.d_in, 0)
    extra = {"d_sae": c.n_latents + r, "scaffold_rank": r, "scaffold_encoder_input": c.scaffold_encoder_input}
    if c.is_block:
        rule = {"block_jumprelu": "threshold", "group_lasso": "soft"}.get(c.architecture, "topk")
        t["threshold"] = sae.theta.detach().float().cpu() if rule != "topk" else torch.zeros(c.n_units)
        return saelens.BlockSparseSAEConfig(
            **common, **extra, block_size=c.block_size, rule=rule, n_active_blocks=c.n_active_blocks
        )
    t["threshold"] = theta
    cls = (
        saelens.TopKTranscoderConfig
        if c.transcoder and c.architecture == "topk" and not r
        else saelens.ScaffoldSAEConfig
    )
    return cls(**common, **extra, base="topk" if c.architecture == "topk" else "jumprelu", k=c.k)


def save_sae(
    sae: SparseAutoencoder, folder: str | Path, metadata: dict | None = None, workbench_info: dict | None = None
) -> Path:
    """Write cfg.json, sae_weights.safetensors and workbench.json (each atomically); a CLT: its own folder
    (workbench.sae.clt_io)."""
    from workbench.sae.clt import CrossLayerTranscoder

    if isinstance(sae, CrossLayerTranscoder):
        from workbench.sae.clt_io import save_clt

        return save_clt(sae, folder, metadata, workbench_info)
    saelens.register()  # so sae_lens.SAE.load_from_disk reads it back in this process
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cfg, tensors = export(sae, metadata)
    with atomic_path(folder / WEIGHTS) as tmp:
        save_file(tensors, str(tmp))
    atomic_write_text(folder / CFG, json.dumps(cfg.to_dict(), indent=2))
    info = {
        "sae_config": sae.cfg.to_dict(),
        "input_scale": float(sae.input_scale),
        "encoder_init_scale": float(sae.encoder_init_scale),
        "weights_sha256": sha256_file(folder / WEIGHTS),
        **(workbench_info or {}),
    }
    atomic_write_text(folder / WORKBENCH, json.dumps(info, indent=2))
    return folder


def load_sae(folder: str | Path, device: str = "cpu") -> SAE:
    """The saved SAE as a SAELens object (any architecture SAELens or workbench registers).

    Damaged files are refused rather than evaluated: the weights must match the checksum that
    workbench.json records (when it records one), parse, and be finite.
    """
    folder = Path(folder)
    for name in (CFG, WEIGHTS):
        if not (folder / name).is_file():
            raise MissingInputError(f"{folder} is not an SAE folder: {name} is missing")
    verify_artifact(folder, "SAE")
    want = read_info(folder).get("weights_sha256")
    if want and sha256_file(folder / WEIGHTS) != want:
        raise DamagedFileError(
            f"{folder / WEIGHTS} does not match the checksum in {folder / WORKBENCH}: the weights "
            "were changed or damaged after saving; retrain or restore the SAE"
        )
    saelens.register()
    try:
        cfg = json.loads((folder / CFG).read_text())
        if not isinstance(cfg, dict):
            raise DamagedFileError(f"{folder / CFG} holds a JSON {type(cfg).__name__}, not an SAE config object")
        sae = SAE.load_from_disk(folder, device=device)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DamagedFileError(f"{folder / CFG} is not valid JSON: {e}") from None
    except Exception as e:  # safetensors and sae_lens raise several types for damaged files
        if isinstance(e, DamagedFileError):
            raise
        detail = " ".join(str(e).split())[:300]  # sae_lens's size-mismatch report spans lines
        which = f"{WEIGHTS} does not fit {CFG}" if "state_dict" in detail else f"{WEIGHTS} or {CFG} is damaged"
        raise DamagedFileError(f"cannot load the SAE in {folder} ({type(e).__name__}: {detail}); {which}") from e
    bad = [n for n, p in sae.state_dict().items() if p.is_floating_point() and not torch.isfinite(p).all()]
    if bad:
        raise DamagedFileError(f"{folder / WEIGHTS} holds NaN/inf values in {', '.join(bad)}; the file is damaged")
    return sae


def read_info(folder: str | Path) -> dict:
    """workbench.json of a saved SAE ({} for SAEs trained elsewhere)."""
    p = Path(folder) / WORKBENCH
    if not p.is_file():
        return {}
    return read_json(p, DamagedFileError, "retrain the SAE or restore the file", "SAE training record")
