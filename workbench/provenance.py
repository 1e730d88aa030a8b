"""Identifiers that manifests record, computed without importing TransformerLens."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from workbench.atomic import sha256_file
from workbench.errors import BadValueError


def model_id(model) -> str:
    """A stable identifier for manifests: the model name plus a short hash of its weights.

    `model` is anything with `cfg.model_name` and a torch `state_dict()` (a HookedTransformer);
    only the first 1024 values of each tensor are hashed, so big models stay cheap.
    """
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().reshape(-1)[:1024].float().cpu().numpy().tobytes())
    return f"{model.cfg.model_name}@{h.hexdigest()[:12]}"


ID = re.compile(r".+@[0-9a-f]{12}")  # a model_id or dictionary_id (another tool's model name is none)


def workbench_id(text) -> str | None:
    """`text` when it is a workbench content id, else None: a circuit-tracer graph's scan names its model otherwise."""
    return text if isinstance(text, str) and ID.fullmatch(text) else None


WEIGHTS = (".safetensors", ".pt", ".pth", ".bin")  # the files a dictionary's content id covers


def dictionary_id(folder) -> str:
    """A dictionary folder's content id (an SAE, a transcoder set, a CLT): its name plus a short hash of every weight
    file in it, by relative path; a feature store or manifest beside the weights leaves it unchanged."""
    folder = Path(folder)
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.suffix in WEIGHTS and p.is_file() and "features" not in p.relative_to(folder).parts:
            h.update(p.relative_to(folder).as_posix().encode() + b"\0" + sha256_file(p).encode())
    return f"{folder.resolve().name}@{h.hexdigest()[:12]}"


def check_same(what: str, recorded: str | None, given: str, made: str) -> None:
    """Refuse a `what` (model, dictionary) whose content id is not the one `made` (the artifact read) was made with;
    an artifact made before ids were recorded has none and passes. Ids compare by their hash (after the last '@'):
    the name before it is for people, so a copied or renamed dictionary is the same one."""
    if recorded and recorded.rpartition("@")[2] != given.rpartition("@")[2]:
        raise BadValueError(f"{made} was made with {what} {recorded}, not the given {given}; give the {what} it names")
