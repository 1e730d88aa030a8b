"""What the app computes live from a model: cached model and SAE loading, the model a file names, and a
circuit node's details (attention pattern, direct logit effect, SAE features at the answer position).

Attention patterns are computed here from the model, not stored with circuits: a pattern is
layers x heads x n^2 numbers per prompt (GPT-2 small at 128 tokens: 2.4M, more than the circuit
file), it is needed only for the node a user clicks, and one cached forward pass gives all of them.
Torch is imported inside the functions.
"""

from __future__ import annotations

import streamlit as st

from app import data, ui
from workbench.errors import UserError


@st.cache_resource(show_spinner="loading the model...", max_entries=4)
def load_model(spec: str):
    from workbench.models import load, model_id

    model, _ = load(spec, device="cpu")
    return model, model_id(model)


@st.cache_resource(show_spinner="loading the SAE...", max_entries=8)
def load_sae(path: str, stamp: float):
    from workbench.sae.io import load_sae as load

    return load(path, device="cpu").eval()


def model_specs() -> list[str]:
    """The models the app can run: the embedded one and each saved model of the workspace (absolute paths)."""
    return ["tiny"] + [str(data.resolve(ui.root(), m)) for m in data.model_dirs(ui.root())]


class ModelNotFound(UserError):
    """A file names a model that is neither the embedded one nor a saved model in the workspace."""


def spec_of(model_id: str, what: str = "this SAE") -> str:
    """The spec (tiny or a workspace model's path) of the model whose id is `model_id`, or ModelNotFound."""
    for spec in model_specs():
        try:
            if load_model(spec)[1] == model_id:
                return spec
        except (UserError, ValueError, OSError):
            continue
    raise ModelNotFound(
        f"the model {what} reads ({model_id}) is neither the embedded model nor a saved model in the workspace's "
        "models/ folder, so it cannot run here"
    )


def find_model(model_id: str, what: str = "this SAE"):
    """The loaded model with this id, or a page error."""
    try:
        return load_model(spec_of(model_id, what))[0]
    except ModelNotFound as e:
        ui.fail(e)


def sae_for(rel: str):
    folder = data.resolve(ui.root(), rel)
    return load_sae(str(folder), (folder / "sae_weights.safetensors").stat().st_mtime)


@st.cache_data(show_spinner="running the model on the prompt...", max_entries=32)
def run_prompt(spec: str, tokens: tuple[int, ...]) -> dict:
    """One forward pass: attention patterns [L][H][q][k], and per node its direct effect on every logit at the
    answer (last) position, through the final LayerNorm's scale of that run (W_U applied, bias left out)."""
    import torch

    model, _ = load_model(spec)
    toks = torch.tensor([tokens])
    with torch.no_grad():
        _, cache = model.run_with_cache(toks)
        L, H = model.cfg.n_layers, model.cfg.n_heads
        patterns = torch.stack([cache[f"blocks.{i}.attn.hook_pattern"][0] for i in range(L)])
        scale = cache["ln_final.hook_scale"][0, -1] if "ln_final.hook_scale" in cache else torch.ones(1)
        outs = {}
        for i in range(L):
            z = cache[f"blocks.{i}.attn.hook_z"][0, -1]  # [H, d_head]
            per_head = torch.einsum("hd,hdm->hm", z, model.W_O[i])
            for h in range(H):
                outs[f"a{i}.h{h}"] = per_head[h]
            if f"blocks.{i}.hook_mlp_out" in cache:
                outs[f"m{i}"] = cache[f"blocks.{i}.hook_mlp_out"][0, -1]
        dla = {n: ((v / scale) @ model.W_U).numpy() for n, v in outs.items()}
    return {
        "patterns": patterns.numpy(),
        "dla": dla,
        "str_tokens": model.to_str_tokens(toks[0]),
        "vocab": model.to_str_tokens(torch.arange(model.cfg.d_vocab)),
    }


def stream_features(spec: str, tokens: tuple[int, ...], sae_rel: str, hook: str, k: int = 8) -> list[tuple[int, float]]:
    """The SAE's k most active units (latents, or block norms) at the answer position, strongest first."""
    import torch

    model, _ = load_model(spec)
    sae = sae_for(sae_rel)
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.tensor([tokens]), names_filter=hook)
        z = sae.encode(cache[hook][0, -1:].to(sae.dtype))[0].float()
    z = z[: sae.cfg.d_sae - int(getattr(sae.cfg, "scaffold_rank", 0))]
    b = int(getattr(sae.cfg, "block_size", 1))
    a = z.view(-1, b).norm(dim=-1) if b > 1 else z
    vals, idx = a.topk(min(k, len(a)))
    return [(int(i), float(v)) for i, v in zip(idx, vals) if v > 0]
