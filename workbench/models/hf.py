"""Models made by other tools: a Hugging Face model folder (transformers' `save_pretrained`, with its
tokenizer) or a Hub id, converted to a HookedTransformer through TransformerLens.

The only module that builds a model from another library's files, so a later TransformerLens 4 port
(its TransformerBridge) stays here. The conversion is TransformerLens's own config mapping and weight
converters with no weight processing (as `from_pretrained_no_processing`: no LayerNorm folding, no
centering), so hook activations and logits are the transformers model's own; `convert` measures that
(`logit_gap`). TransformerLens 3.9 accepts a local folder only through its lower-level loaders, and
they have two bugs this module works around: a folder path containing "llama" (or "gemma") is taken
for a Llama (Gemma) by name, and a GPT-2 config saved by transformers 5 has no `n_ctx`. Gemma and
Gemma-2 are mapped by name only in TransformerLens 3.9 (a local folder has no such name), so their
config is read from the folder's own config here, field by field as TransformerLens's named entries do.
"""

from __future__ import annotations

import json
import socket
import tempfile
from pathlib import Path
from urllib.parse import urlparse

import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig
from transformer_lens import loading_from_pretrained as loading

from workbench.errors import ModelSpecError

HF_WEIGHTS = ("*.safetensors", "*.bin")
GEMMA = ("GemmaForCausalLM", "Gemma2ForCausalLM")
NAME_SENSITIVE = ("llama", "gemma")  # substrings TransformerLens 3.9 dispatches on by name
EQUIVALENCE_TOLERANCE = 1e-4  # float32 logits, transformers vs the converted model (max abs difference)
PROBE_SECONDS = 3.0
GENERIC_TOKENIZERS = ("TokenizersBackend", "PreTrainedTokenizerFast")


def is_hf_folder(path: Path) -> bool:
    """A folder holding a transformers config (`model_type`), not a workbench-saved one."""
    try:
        meta = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and "model_type" in meta and "hooked_transformer_config" not in meta


def read_folder(path: Path, dtype: torch.dtype = torch.float32):
    """(transformers model, tokenizer) saved in `path`, read with local files only."""
    from transformers import AutoModelForCausalLM

    try:
        tokenizer = _tokenizer(Path(path))
    except Exception as e:  # transformers raises several types for a missing or damaged tokenizer
        raise ModelSpecError(
            f"{path} holds a Hugging Face model config but no usable tokenizer ({type(e).__name__}: "
            f"{str(e).splitlines()[0][:200]}); save one beside it with tokenizer.save_pretrained({str(path)!r})"
        ) from e
    try:
        hf_model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, local_files_only=True)
    except Exception as e:  # unknown model_type, missing or damaged weights
        raise ModelSpecError(
            f"cannot read the Hugging Face model in {path} ({type(e).__name__}: {str(e).splitlines()[0][:200]})"
        ) from e
    return hf_model.eval(), tokenizer


def _tokenizer(path: Path):
    """The folder's tokenizer as saved: a generic one (tokenizer.json, tokenizer_class TokenizersBackend or
    PreTrainedTokenizerFast) is read as such, where transformers 5's AutoTokenizer would build the model type's
    own class (a Qwen2 folder's word-level tokenizer re-read as Qwen2's byte-level BPE)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    cfg = path / "tokenizer_config.json"
    cls = json.loads(cfg.read_text()).get("tokenizer_class") if cfg.is_file() else None
    if cls in GENERIC_TOKENIZERS and (path / "tokenizer.json").is_file():
        # add_bos_token=True as TransformerLens would re-load it (through AutoTokenizer, hence the wrong class)
        return PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True, add_bos_token=True)
    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def tl_config(hf_config, name: str, device: str, dtype: torch.dtype) -> HookedTransformerConfig:
    """TransformerLens's config for a transformers config, whatever the folder it came from is called."""
    arch = (hf_config.architectures or [""])[0]
    if arch in GEMMA:
        return HookedTransformerConfig.from_dict(
            {**_gemma_fields(hf_config), **_common(arch, name, device, dtype), "d_vocab": hf_config.vocab_size}
        )
    meta = hf_config.to_dict()
    if arch == "GPT2LMHeadModel":
        meta.setdefault("n_ctx", meta["n_positions"])  # transformers 5 no longer saves it; TL 3.9 reads it
    with tempfile.TemporaryDirectory(prefix="hf-config-") as tmp:
        folder = Path(tmp) / "model"  # a neutral name: TL 3.9 dispatches on "llama"/"gemma" in the path
        if any(s in str(folder).lower() for s in NAME_SENSITIVE):
            raise ModelSpecError(f"the temporary folder {folder} names {NAME_SENSITIVE}; set TMPDIR elsewhere")
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(meta))
        try:
            cfg = loading.get_pretrained_model_config(str(folder), hf_cfg=meta, device=device, dtype=dtype)
        except NotImplementedError as e:
            raise ModelSpecError(f"TransformerLens cannot convert the {arch or 'unnamed'} architecture ({e})") from e
    cfg.model_name = name
    cfg.tokenizer_name = None
    return cfg


def _common(arch: str, name: str, device: str, dtype: torch.dtype) -> dict:
    """The fields `get_pretrained_model_config` adds to every architecture's entry."""
    return {
        "original_architecture": arch,
        "model_name": name,
        "init_weights": False,
        "device": device,
        "dtype": dtype,
        "n_devices": 1,
        "from_checkpoint": False,
        "default_prepend_bos": True,
    }


def _gemma_fields(c) -> dict:
    """Gemma / Gemma-2 from the config's values, as TransformerLens's google/gemma-* entries set them."""
    head = c.head_dim
    fields = {
        "d_model": c.hidden_size,
        "d_head": head,
        "n_heads": c.num_attention_heads,
        "d_mlp": c.intermediate_size,
        "n_layers": c.num_hidden_layers,
        "n_ctx": c.max_position_embeddings,
        "eps": c.rms_norm_eps,
        "act_fn": getattr(c, "hidden_activation", None) or c.hidden_act,
        "initializer_range": c.initializer_range,
        "normalization_type": "RMS",
        "rotary_base": loading._get_rope_theta(c),
        "rotary_dim": head,
        "positional_embedding_type": "rotary",
        "use_attn_scale": True,
        "n_key_value_heads": c.num_key_value_heads,
        "gated_mlp": True,
        "final_rms": True,
    }
    if c.architectures[0] == "Gemma2ForCausalLM":
        types = getattr(c, "layer_types", None) or ["sliding_attention", "full_attention"] * (c.num_hidden_layers // 2)
        fields |= {
            "window_size": c.sliding_window,
            "use_local_attn": True,
            "attn_types": ["local" if t == "sliding_attention" else "global" for t in types],
            "attn_scores_soft_cap": c.attn_logit_softcapping or -1.0,
            "output_logits_soft_cap": c.final_logit_softcapping or -1.0,
            "use_normalization_before_and_after": True,
            "attn_scale": float(c.query_pre_attn_scalar) ** 0.5,
        }
    return fields


def convert(hf_model, tokenizer, name: str, device: str = "cpu") -> HookedTransformer:
    """The transformers model as a HookedTransformer, weights unprocessed (no LN folding or centering)."""
    cfg = tl_config(hf_model.config, name, device, next(hf_model.parameters()).dtype)
    arch = cfg.original_architecture
    try:
        # the name argument must be an existing path or an official name; with hf_model given it only
        # selects by prefix (NeelNanda/..., remote-code models), so any neutral existing folder serves
        state = loading.get_pretrained_state_dict(tempfile.gettempdir(), cfg, hf_model, dtype=cfg.dtype)
    except ValueError as e:
        raise ModelSpecError(f"TransformerLens has no weight converter for {arch} ({e})") from e
    model = HookedTransformer(cfg, tokenizer=tokenizer, move_to_device=False)
    model.load_and_process_state_dict(
        state,
        fold_ln=False,
        center_writing_weights=False,
        center_unembed=False,
        fold_value_biases=False,
        refactor_factored_attn_matrices=False,
    )
    return model.to(device).eval()


@torch.no_grad()
def logit_gap(hf_model, model: HookedTransformer, n_tokens: int = 16, seed: int = 0) -> float:
    """Max |logit difference| between the transformers model and its conversion on random token ids."""
    g = torch.Generator().manual_seed(seed)
    n = min(n_tokens, model.cfg.n_ctx)
    tokens = torch.randint(0, model.cfg.d_vocab, (2, n), generator=g)
    ours = model(tokens.to(model.cfg.device)).float().cpu()
    theirs = hf_model(tokens.to(hf_model.device)).logits.float().cpu()
    return float((ours - theirs[..., : ours.shape[-1]]).abs().max())


def load_folder(path: Path, device: str = "cpu") -> HookedTransformer:
    """A Hugging Face model folder as a HookedTransformer (converted on every call: `model import` keeps one)."""
    hf_model, tokenizer = read_folder(path)
    return convert(hf_model, tokenizer, Path(path).resolve().name, device)


def source_checksum(path: Path) -> str:
    """sha256 over the folder's config and weight files (names and contents), what an import records."""
    import hashlib

    from workbench.atomic import sha256_file

    h = hashlib.sha256()
    files = sorted({p for pat in ("config.json", *HF_WEIGHTS) for p in Path(path).glob(pat)})
    for p in files:
        h.update(f"{p.name}:{sha256_file(p)}\n".encode())
    return h.hexdigest()


def check_hub(repo: str) -> None:
    """Fail in seconds, naming the cache and the way to fetch, when `repo` is neither cached nor reachable."""
    import huggingface_hub.constants as hub
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(repo, "config.json", cache_dir=hub.HF_HUB_CACHE), str):
        return
    why = offline_reason()
    if why:
        raise ModelSpecError(
            not_cached(f"model {repo!r}", why, f"`workbench model import {repo}` (or `hf download` into that cache)")
            + ", or pass a saved model folder or 'tiny'"
        )


def offline_reason() -> str | None:
    """Why the Hugging Face Hub cannot be used now (HF_HUB_OFFLINE, or one failed connection), or None."""
    import huggingface_hub.constants as hub

    return "HF_HUB_OFFLINE is set" if hub.HF_HUB_OFFLINE else _unreachable(hub.ENDPOINT)


def not_cached(what: str, why: str, fetch: str) -> str:
    """The one line for something on the Hub that is not in the local cache while the Hub cannot be reached."""
    import huggingface_hub.constants as hub

    return (
        f"cannot load {what} from the Hugging Face Hub: it is not in the local cache ({hub.HF_HUB_CACHE}) and "
        f"{why}; fetch it once online with {fetch}"
    )


def _unreachable(endpoint: str) -> str | None:
    """Why the Hub cannot be reached (one connection attempt), or None when it can."""
    url = urlparse(endpoint)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=PROBE_SECONDS).close()
    except OSError as e:
        return f"{url.hostname} cannot be reached ({type(e).__name__}: {e})"
    return None


def resolve_source(source: str) -> Path:
    """The local folder of a model import: a Hugging Face folder as given, or a Hub id's cached snapshot
    (downloaded once when online)."""
    path = Path(source)
    if path.exists():
        if not is_hf_folder(path):
            raise ModelSpecError(
                f"{path} is not a Hugging Face model folder (its config.json needs a 'model_type'; a folder "
                "saved by transformers' save_pretrained has one); a workbench model folder needs no import"
            )
        return path
    if source.count("/") > 1 or not source.strip():
        raise ModelSpecError(f"{source!r} is neither a folder nor a Hugging Face Hub id (owner/name)")
    check_hub(source)
    from huggingface_hub import snapshot_download

    patterns = ["*.json", "*.safetensors", "*.model", "*.txt"]
    try:
        return Path(snapshot_download(source, allow_patterns=patterns))
    except Exception as e:  # huggingface_hub: not found, gated, network
        raise ModelSpecError(f"cannot fetch {source!r} from the Hugging Face Hub ({type(e).__name__}: {e})") from e
