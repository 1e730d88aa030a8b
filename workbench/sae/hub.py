"""Dictionaries named by a Hugging Face Hub id, fetched by the library that owns the name, then imported as the
folder they become: a sae_lens release (or a Hub repo in SAELens's layout) and SAE id through sae_lens's own
`SAE.from_pretrained`; a circuit-tracer transcoder config (`gemma`, `llama`, `owner/name[/subfolder][@revision]`,
`hf://...`) through circuit-tracer's own `load_transcoder_from_hub`. Both download into the Hugging Face cache;
offline, what is cached there loads, and what is not fails at once with one line naming the cache and the command
that fetches it (workbench.models.hf)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from workbench.errors import BadValueError, MissingInputError

PATH_PREFIXES = ("/", "./", "../", "~")  # spellings of a path on disk, never of a Hub id


def route(source: str, fmt: str, sae_id: str | None) -> str | None:
    """The library that loads `source` when it names no folder on disk: 'saelens' (a sae_lens release, or any id
    with --sae-id) or 'circuit-tracer' (any other id); None for a path on disk (the folder imports read it)."""
    if Path(source).exists() or source.startswith(PATH_PREFIXES) or fmt in ("sparsify", "dictionary-learning"):
        if sae_id:
            raise BadValueError(f"--sae-id names an SAE of a sae_lens release or Hub repo; {source} is not one")
        return None
    releases = _releases()
    if sae_id or fmt == "saelens" or source in releases:
        if not sae_id:
            ids = list(releases[source].saes_map) if source in releases else []
            some = f"; its ids include {', '.join(ids[:4])}" + (f" ({len(ids)} in all)" if len(ids) > 4 else "")
            raise BadValueError(
                f"{source!r} is not a folder on disk, so it is read as a sae_lens release or Hub repo: name the SAE "
                f"in it with --sae-id (sae_lens's `SAE.from_pretrained(release, sae_id)`){some if ids else ''}"
            )
        if fmt == "circuit-tracer":
            raise BadValueError("--sae-id is sae_lens's; a circuit-tracer Hub config names its transcoders itself")
        return "saelens"
    return "circuit-tracer"


def _releases() -> dict:
    from sae_lens.loading.pretrained_saes_directory import get_pretrained_saes_directory

    return get_pretrained_saes_directory()


@contextmanager
def _from_hub(what: str, fetch: str):
    """Run the owning library's loader; when the Hub cannot be reached it runs in huggingface_hub's offline mode
    (cache only, no retries) and a cache miss becomes one line naming the cache and `fetch`."""
    import huggingface_hub.constants as hub
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    from workbench.models.hf import not_cached, offline_reason

    why, was = offline_reason(), hub.HF_HUB_OFFLINE
    hub.HF_HUB_OFFLINE = was or why is not None
    try:
        yield
    except (OSError, ValueError, KeyError) as e:  # the libraries wrap huggingface_hub's errors in their own
        chain = [e]
        while chain[-1].__cause__ or chain[-1].__context__:
            chain.append(chain[-1].__cause__ or chain[-1].__context__)
        if why and any(isinstance(x, (LocalEntryNotFoundError, OfflineModeIsEnabled)) for x in chain):
            raise MissingInputError(not_cached(what, why, fetch)) from None
        raise BadValueError(f"cannot load {what} ({type(e).__name__}: {' '.join(str(e).split())[:300]})") from e
    finally:
        hub.HF_HUB_OFFLINE = was


def saelens_folder(release: str, sae_id: str, out: Path) -> Path:
    """sae_lens's own `SAE.from_pretrained(release, sae_id)` saved by sae_lens as a SAELens folder at `out`."""
    from sae_lens import SAE

    what = f"SAE {sae_id!r} of sae_lens release {release!r}"
    with _from_hub(what, f"`workbench sae import {release} --sae-id {sae_id}` (it downloads into that cache)"):
        sae = SAE.from_pretrained(release, sae_id, device="cpu")
    sae.save_model(str(out))
    return out


def tracer_importable() -> None:
    """circuit-tracer 0.5 imports huggingface_hub.constants.HF_HUB_ENABLE_HF_TRANSFER, which huggingface_hub 1.x
    removed; it reads it only to choose hf_transfer for downloads, which False declines (plain downloads)."""
    import huggingface_hub.constants as hub

    if not hasattr(hub, "HF_HUB_ENABLE_HF_TRANSFER"):
        hub.HF_HUB_ENABLE_HF_TRANSFER = False


def tracer_files(ref: str) -> tuple[dict, dict[int, Path] | Path]:
    """circuit-tracer's own `load_transcoder_from_hub(ref)` (lazily: weights stay on disk), and the cached files it
    read: (config, layer -> weights file) for a transcoder set, (config, folder) for a cross-layer transcoder."""
    import torch

    tracer_importable()
    from circuit_tracer.utils.hf_utils import load_transcoder_from_hub

    what = f"circuit-tracer transcoders {ref!r} (no folder of that name on disk)"
    with _from_hub(what, f"`workbench sae import {ref} --format circuit-tracer` (it downloads into that cache)"):
        loaded, cfg = load_transcoder_from_hub(
            ref, device=torch.device("cpu"), lazy_encoder=True, lazy_decoder=True, use_cache=False
        )
    if "gemma-scope" in str(cfg.get("repo_id")) and "transcoders" in cfg:
        raise BadValueError(f"{what}: GemmaScope's npz files are read by circuit-tracer's special loader only")
    if cfg["model_kind"] == "cross_layer_transcoder":
        return cfg, Path(loaded.clt_path)
    return cfg, {tc.layer_idx: Path(tc.transcoder_path) for tc in loaded.transcoders}
