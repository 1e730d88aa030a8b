"""Identifiers that manifests record, computed without importing TransformerLens."""

from __future__ import annotations

import hashlib


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
