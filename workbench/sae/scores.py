"""Scores of what a dictionary recovers against zero ablation (CE loss recovered, KL score), with no torch.

Each is a ratio over what zero ablation loses. When zero ablation loses nothing, or lowers the loss (as it can on
a random or a compiled model), the ratio means nothing: it is recorded as null beside `<key>_undefined`, the
reason, and shown as undefined with that reason wherever it is printed or drawn, never as the huge or negative
number a clamped denominator would give.
"""

from __future__ import annotations

UNDEFINED = "_undefined"  # suffix of the key that holds why a score is undefined


def ratio(key: str, gained: float, lost: float, why: str) -> dict:
    """{key: gained / lost}, or {key: None, key_undefined: why} when `lost` is not positive."""
    return {key: gained / lost} if lost > 0 else {key: None, key + UNDEFINED: why}


def shown(metrics: dict, key: str, spec: str | None = None):
    """A score for display: 'undefined (reason)' when it is undefined, else its value (formatted with `spec`)."""
    if metrics.get(key) is None and key + UNDEFINED in metrics:
        return f"undefined ({metrics[key + UNDEFINED]})"
    value = metrics.get(key)
    return value if spec is None or value is None else format(value, spec)
