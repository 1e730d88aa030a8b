"""Dictionaries named by a Hugging Face Hub id, fetched by the library that owns the name, then imported as the
folder they become: a sae_lens release (or a Hub repo in SAELens's layout) and SAE id through sae_lens's own
`SAE.from_pretrained`; a circuit-tracer transcoder config (`gemma`, `llama`, `owner/name[/subfolder][@revision]`,
`hf://...`) through circuit-tracer's own `load_transcoder_from_hub`. Both download into the Hugging Face cache;
offline, what is cached there loads, and what is not fails at once with one line naming the cache and the command
that fetches it (workbench.models.hf)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from workbench.errors import BadValueError, MissingInputError, UserError
from workbench.readback import finite, json_file, safetensors_file, tensors

PATH_PREFIXES = ("/", "./", "../", "~")  # spellings of a path on disk, never of a Hub id
CFG, WEIGHTS = "cfg.json", "sae_weights.safetensors"  # workbench.sae.io's (that module imports sae_lens)
TRACER_ALIASES = {"gemma": "mwhanna/gemma-scope-transcoders", "llama": "mntss/transcoder-Llama-3.2-1B"}  # its own
WAY_OUT = "delete it from the cache and fetch it again"


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
def _from_hub(what: str, fetch: str, check):
    """Run the owning library's loader; when the Hub cannot be reached it runs in huggingface_hub's offline mode
    (cache only, no retries) and a cache miss becomes one line naming the cache and `fetch`. Any other failure
    runs `check` (the cached files read through workbench.readback, which names a damaged one) and else becomes
    one line naming `what` and the folder `check` returns."""
    import huggingface_hub.constants as hub
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    from workbench.models.hf import not_cached, offline_reason

    why, was = offline_reason(), hub.HF_HUB_OFFLINE
    hub.HF_HUB_OFFLINE = was or why is not None
    try:
        yield
    except UserError:
        raise
    except Exception as e:  # the libraries raise many types for missing, damaged or foreign files
        chain = [e]
        while chain[-1].__cause__ or chain[-1].__context__:
            chain.append(chain[-1].__cause__ or chain[-1].__context__)
        if why and any(isinstance(x, (LocalEntryNotFoundError, OfflineModeIsEnabled)) for x in chain):
            raise MissingInputError(not_cached(what, why, fetch)) from None
        where = _named(check)
        detail = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
        raise BadValueError(f"cannot load {what}{f' from {where}' if where else ''} ({detail})") from None
    finally:
        hub.HF_HUB_OFFLINE = was


def _named(check) -> Path | None:
    """`check()`: its DamagedFileError (naming the file) raised, else the folder it returns; None where it cannot
    tell (a reference or layout it does not know)."""
    try:
        return check()
    except UserError:
        raise
    except Exception:  # the check only adds a name to the library's own error, which is reported either way
        return None


def _cached(repo: str, filename: str, revision: str | None = None) -> Path | None:
    """The file of Hub repo `repo` in the local Hugging Face cache, or None."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo, filename, revision=revision)
    except ValueError:  # not a valid repo id: nothing of it is cached
        return None
    return Path(found) if isinstance(found, str) else None


def _check_saelens(release: str, sae_id: str) -> Path | None:
    """The cached cfg.json and weights of a Hub repo in SAELens's layout (or a release's), read and checked: the
    encoder [d_in, d_sae less any scaffold], the decoder [d_sae, d_out], all finite; returns their folder."""
    info = _releases().get(release)
    repo, folder = (info.repo_id, info.saes_map.get(sae_id, sae_id)) if info else (release, sae_id)
    cfg_path, weights = _cached(repo, f"{folder}/{CFG}"), _cached(repo, f"{folder}/{WEIGHTS}")
    fields = {"d_in": int, "d_sae": int}
    cfg = json_file(cfg_path, "SAELens config (in the Hugging Face cache)", WAY_OUT, fields=fields) if cfg_path else {}
    if weights is not None:
        what = "SAELens weights (in the Hugging Face cache)"
        state = safetensors_file(weights, what, WAY_OUT)
        if cfg:
            dims = {"d_in": cfg["d_in"], "d_sae": cfg["d_sae"], "n": cfg["d_sae"] - cfg.get("scaffold_rank", 0)}
            shapes = {"W_enc": ("d_in", "n"), "W_dec": ("d_sae", "d_out")}
            tensors(weights, what, state, shapes, dims=dims, given=CFG)
        finite(weights, what, state)
    return (cfg_path or weights).parent if cfg_path or weights else None


def saelens_folder(release: str, sae_id: str, out: Path) -> Path:
    """sae_lens's own `SAE.from_pretrained(release, sae_id)` saved by sae_lens as a SAELens folder at `out`."""
    from sae_lens import SAE

    what = f"SAE {sae_id!r} of sae_lens release {release!r}"
    fetch = f"`workbench sae import {release} --sae-id {sae_id}` (it downloads into that cache)"
    with _from_hub(what, fetch, lambda: _check_saelens(release, sae_id)):
        sae = SAE.from_pretrained(release, sae_id, device="cpu")
    _check_saelens(release, sae_id)  # sae_lens loads NaN weights as they are; the set and CLT imports check theirs
    sae.save_model(str(out))
    return out


def _check_tracer(ref: str) -> Path | None:
    """The cached files of a circuit-tracer Hub config (its config.yaml's folder), read and checked as a folder's;
    returns the folder."""
    from circuit_tracer.utils.hf_utils import HfUri

    from workbench.sae import imports

    uri = HfUri.from_str(TRACER_ALIASES.get(ref, ref))
    config = _cached(uri.repo_id, f"{uri.file_path}/config.yaml" if uri.file_path else "config.yaml", uri.revision)
    if config is not None:
        imports.check_tracer_folder(config.parent)
    return config.parent if config else None


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
    fetch = f"`workbench sae import {ref} --format circuit-tracer` (it downloads into that cache)"
    with _from_hub(what, fetch, lambda: _check_tracer(ref)):
        loaded, cfg = load_transcoder_from_hub(
            ref, device=torch.device("cpu"), lazy_encoder=True, lazy_decoder=True, use_cache=False
        )
    if "gemma-scope" in str(cfg.get("repo_id")) and "transcoders" in cfg:
        raise BadValueError(f"{what}: GemmaScope's npz files are read by circuit-tracer's special loader only")
    if cfg["model_kind"] == "cross_layer_transcoder":
        return cfg, Path(loaded.clt_path)
    return cfg, {tc.layer_idx: Path(tc.transcoder_path) for tc in loaded.transcoders}
