"""One model loader for every step: `load(spec) -> (HookedTransformer, tokenizer)`.

Specs: "tiny" (the embedded model under data/models/tiny), a path to a saved workbench model
folder, a Hugging Face model folder (converted on each load by models/hf.py; `workbench model import`
converts once into a workbench folder), or any TransformerLens model name
(HookedTransformer.from_pretrained; needs a network or a populated Hugging Face cache).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformer_lens import HookedTransformer, HookedTransformerConfig
from transformers import PreTrainedTokenizerFast

from workbench.atomic import atomic_path, atomic_write_text
from workbench.attention.gates import install_from_dict
from workbench.config import check_device
from workbench.errors import DamagedFileError, ModelSpecError  # noqa: F401  (ModelSpecError re-exported: the name callers catch)
from workbench.provenance import model_id  # noqa: F401  (re-exported: its home has no TransformerLens)
from workbench.readback import verify_artifact

DATA_DIR = Path(__file__).resolve().parents[2] / "data"
# tiny-sparse, small-sparse: attention/card.py; small: the 48-head model for the sparse-attention circuit claims
EMBEDDED = {name: DATA_DIR / "models" / name for name in ("tiny", "tiny-sparse", "small", "small-sparse")}
WEIGHTS, CONFIG = "model.safetensors", "config.json"
# Architecture extensions: a model may carry `workbench_extensions = {key: json config}`; save() writes
# them into config.json and load() re-installs each with `install(model, config)` before the weights
# load (so the saved state dict matches).
EXTENSIONS = {"attention_gates": install_from_dict}


def save(model: HookedTransformer, out_dir: str | Path, extra: dict | None = None) -> Path:
    """Save weights, config and tokenizer so `load(out_dir)` rebuilds the same model."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    with atomic_path(out / WEIGHTS) as tmp:
        save_file(state, str(tmp))
    model.tokenizer.save_pretrained(str(out))
    meta = {
        "hooked_transformer_config": config_dict(model),
        **getattr(model, "workbench_extensions", {}),
        **(extra or {}),
    }
    atomic_write_text(out / CONFIG, json.dumps(meta, indent=2))
    return out


def config_dict(model: HookedTransformer) -> dict:
    """The model's HookedTransformerConfig as JSON-able fields: enough to rebuild the architecture."""

    def jsonable(v) -> bool:
        try:
            json.dumps(v)
            return True
        except TypeError:
            return False

    return {k: v for k, v in model.cfg.to_dict().items() if jsonable(v)}


def _load_dir(path: Path, device: str) -> tuple[HookedTransformer, PreTrainedTokenizerFast]:
    if not (path / CONFIG).is_file() or not (path / WEIGHTS).is_file():
        raise ModelSpecError(f"{path} is not a saved workbench model (needs {CONFIG} and {WEIGHTS})")
    verify_artifact(path, "saved model")
    try:
        meta = json.loads((path / CONFIG).read_text())
        cfg = HookedTransformerConfig(**{**meta["hooked_transformer_config"], "device": device})
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as e:
        raise DamagedFileError(f"{path / CONFIG} is not a workbench model config ({type(e).__name__}: {e})") from None
    try:
        tokenizer = PreTrainedTokenizerFast.from_pretrained(str(path))
    except Exception as e:  # transformers raises several types for a missing or damaged tokenizer
        raise DamagedFileError(f"cannot load the tokenizer saved in {path} ({type(e).__name__}: {e})") from e
    model = HookedTransformer(cfg, tokenizer=tokenizer, move_to_device=False)
    for key, install in EXTENSIONS.items():
        if key in meta:
            install(model, meta[key])
    try:
        state = load_file(str(path / WEIGHTS))
        model.load_state_dict(state, strict=True)
    except Exception as e:  # safetensors: SafetensorError / OSError; torch: RuntimeError on missing keys or shapes
        raise DamagedFileError(
            f"{path / WEIGHTS} is damaged or does not fit {path / CONFIG} "
            f"({type(e).__name__}: {str(e).splitlines()[0][:200]})"
        ) from e
    model.to(device)
    model.eval()
    return model, model.tokenizer  # TransformerLens may re-create the tokenizer; hand out the one it uses


def load(spec: str = "tiny", device: str | None = None) -> tuple[HookedTransformer, PreTrainedTokenizerFast]:
    check_device(device, ModelSpecError)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if spec in EMBEDDED:
        if not (EMBEDDED[spec] / WEIGHTS).is_file():
            raise ModelSpecError(
                f"the embedded model {spec!r} is missing from {EMBEDDED[spec]}; rebuild it with `workbench model train`"
            )
        return _load_dir(EMBEDDED[spec], device)
    from workbench.models import hf  # here: only a Hugging Face folder or Hub id needs it

    path = Path(spec)
    if path.exists():
        if hf.is_hf_folder(path):
            model = hf.load_folder(path, device)
            return model, model.tokenizer
        return _load_dir(path, device)
    from transformer_lens.loading_from_pretrained import OFFICIAL_MODEL_NAMES, get_official_model_name

    try:
        get_official_model_name(spec)
    except ValueError:
        raise ModelSpecError(
            f"unknown model spec {spec!r}: expected one of {sorted(EMBEDDED)}, a saved model folder, or a "
            f"TransformerLens model name (e.g. {', '.join(OFFICIAL_MODEL_NAMES[:3])}, ...)"
        ) from None
    hf.check_hub(get_official_model_name(spec))  # offline and not cached: one error in seconds, not retries
    try:
        model = HookedTransformer.from_pretrained(spec, device=device)
    except OSError as e:  # offline without a cached copy (huggingface_hub errors are OSErrors)
        raise ModelSpecError(
            f"cannot load model {spec!r} from the Hugging Face Hub: it is not in the local cache and "
            f"the Hub cannot be reached ({type(e).__name__}); go online once, or pass a saved model "
            "folder or 'tiny'"
        ) from e
    model.eval()
    return model, model.tokenizer
