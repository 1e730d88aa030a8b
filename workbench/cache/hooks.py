"""Which hooks a cache can hold, and how far the forward pass must run to fill them."""

from __future__ import annotations

import contextlib
import difflib
import re
from collections.abc import Iterable

from workbench.errors import BadValueError

_BLOCK = re.compile(r"blocks\.(\d+)\.(.+)")
# [batch, head, query, key] activations: not one row per token, so they cannot be cached as rows.
NOT_PER_TOKEN = ("hook_pattern", "hook_attn_scores")


def hook_summary(names: Iterable[str]) -> list[str]:
    """Group per-layer names for error messages: blocks.{0..3}.hook_resid_post, hook_embed, ..."""
    groups: dict[str, list[int]] = {}
    for name in names:
        m = _BLOCK.fullmatch(name)
        key = f"blocks.{{}}.{m.group(2)}" if m else name
        groups.setdefault(key, []).append(int(m.group(1)) if m else -1)
    out = []
    for key, layers in groups.items():
        if "{}" not in key:
            out.append(key)
        elif layers == list(range(min(layers), max(layers) + 1)):
            out.append(key.format(f"{{{min(layers)}..{max(layers)}}}"))
        else:
            out.append(key.format("{" + ",".join(map(str, layers)) + "}"))
    return out


def validate_hooks(model, hooks: str | Iterable[str]) -> tuple[str, ...]:
    hooks = (hooks,) if isinstance(hooks, str) else tuple(hooks)
    if not hooks:
        raise BadValueError("no hooks given; valid hooks: " + ", ".join(hook_summary(model.hook_dict)))
    valid = [h for h in model.hook_dict if not h.endswith(NOT_PER_TOKEN)]
    bad = [h for h in hooks if h not in valid]
    if bad:
        hints = []
        for h in bad:
            if h.endswith(NOT_PER_TOKEN) and h in model.hook_dict:
                hints.append(f"{h!r} is an attention pattern, not one row per token")
            else:
                close = difflib.get_close_matches(h, valid, n=3, cutoff=0.6)
                hints.append(f"{h!r}: did you mean {' or '.join(map(repr, close))}?" if close else f"{h!r} is unknown")
        raise BadValueError(f"unknown hook(s): {'; '.join(hints)}; valid hooks: {', '.join(hook_summary(valid))}")
    dupes = sorted({h for h in hooks if hooks.count(h) > 1})
    if dupes:
        raise BadValueError(f"hook(s) listed twice: {', '.join(dupes)}")
    return hooks


def stop_layer(hooks: Iterable[str]) -> int | None:
    """`stop_at_layer` for HookedTransformer.forward: run only up to the block of the deepest hook
    (skipping later blocks, ln_final and the unembedding); None if a hook sits after the blocks."""
    deepest = -1
    for h in hooks:
        m = _BLOCK.fullmatch(h)
        if m:
            deepest = max(deepest, int(m.group(1)))
        elif not h.startswith("hook_"):  # ln_final.*, unembed: needs the whole pass
            return None
    return deepest + 1


def transcoder_hooks(layer: int, hook_names: Iterable[str]) -> tuple[str, str]:
    """(input, target) of layer `layer`'s MLP transcoder (docs/methods.md §10): the normalised residual the MLP
    reads, or hook_mlp_in where the model has no LayerNorm before its MLP (no ln2 in hook_names); the MLP's output."""
    normed = f"blocks.{layer}.ln2.hook_normalized"
    return (normed if normed in set(hook_names) else f"blocks.{layer}.hook_mlp_in"), f"blocks.{layer}.hook_mlp_out"


def default_hooks(model) -> list[str]:
    """What a cache holds unless told otherwise: every layer's residual stream, and each MLP's input and output
    (what a full transcoder set trains on; none for an attention-only model)."""
    out = [f"blocks.{layer}.hook_resid_post" for layer in range(model.cfg.n_layers)]
    if not getattr(model.cfg, "attn_only", False):
        for layer in range(model.cfg.n_layers):
            out += transcoder_hooks(layer, model.hook_dict)
    return out


@contextlib.contextmanager
def mlp_in_hooks(model, names: Iterable[str]):
    """hook_mlp_in fires only with TransformerLens's use_hook_mlp_in: switch it on while a hook in `names`
    reads it (an MLP input of a model without LayerNorm, for transcoders), and restore it after."""
    old = model.cfg.use_hook_mlp_in
    model.cfg.use_hook_mlp_in = old or any(str(n).endswith("hook_mlp_in") for n in names)
    try:
        yield
    finally:
        model.cfg.use_hook_mlp_in = old
