"""What every config dataclass shares: field values of their annotated type, no unknown fields, one JSON form.

Values from `--set` or a JSON file arrive untyped, so each config checks itself on construction;
the configs raise their own error types, with their own wording for a type mismatch. Every config saves
with `to_dict()` (= `to_json`) and loads with `from_dict()` (through `from_json`).
"""

from __future__ import annotations

import dataclasses
import types
import typing


def _is(value, hint) -> bool:
    """isinstance against a field's annotation (int, float, str, bool, X | None, list[int], tuple[float, float]
    (of exactly that length), tuple[int, ...])."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_is(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return False
        if origin is list or (len(args) == 2 and args[1] is Ellipsis):  # list[X], tuple[X, ...]: any length
            return all(_is(v, args[0]) for v in value)
        return len(value) == len(args) and all(_is(v, a) for v, a in zip(value, args))  # tuple[X, Y]: exactly
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, origin or hint)


def type_mismatch(obj) -> tuple[str, object, str] | None:
    """(field, value, expected type) of the first field of a config dataclass whose value does not have
    its annotated type, or None."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if not _is(v, hints[f.name]):
            return f.name, v, str(hints[f.name]).replace("typing.", "").replace("<class '", "").replace("'>", "")
    return None


def check_minimums(obj, error: type[Exception]) -> None:
    """Every int field of a config is at least its metadata "min" (default 0) or None where None is allowed;
    the same bound its generated flag enforces (configflags), for configs built in Python or from JSON."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        v, low = getattr(obj, f.name), f.metadata.get("min", 0)
        if isinstance(v, int) and not isinstance(v, bool) and v < low:
            raise error(f"{f.name}={v} must be >= {low}" + (" (or None)" if _is(None, hints[f.name]) else ""))


def check_device(device: str | None, error: type[Exception]) -> None:
    """A config's `device` must name a torch device this machine has (None: chosen when the job runs); raise
    `error` before any work otherwise. Imports torch only for a device that is set."""
    if device is None:
        return
    import torch

    way_out = "use cpu, or leave the device unset to use CUDA when it is available"
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError):
        raise error(f"device={device!r} is not a torch device; {way_out}") from None
    available = {"cpu": 1, "meta": 1, "cuda": torch.cuda.device_count()}
    if d.type == "mps":
        available["mps"] = int(torch.backends.mps.is_available())
    n = available.get(d.type, 0)
    if n == 0 or (d.index or 0) >= n:
        have = "none" if d.type == "cuda" and n == 0 else f"{n}"
        raise error(f"device={device!r} is not available on this machine ({d.type} devices: {have}); {way_out}")


def known_fields(cls, d: dict, error: type[Exception]) -> dict:
    """A copy of d, or `error` naming the keys that are not fields of cls and the valid ones."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise error(f"unknown {cls.__name__} fields {unknown}; valid fields: {sorted(names)}")
    return dict(d)


def to_json(obj) -> dict:
    """dataclasses.asdict with tuples as lists (what JSON gives back), so a saved config compares equal to a
    fresh one."""

    def plain(v):
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return v

    return plain(dataclasses.asdict(obj))


def _tuple_field(hint) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_tuple_field(a) for a in typing.get_args(hint))
    return origin is tuple or hint is tuple


def from_json(cls, d: dict, error: type[Exception] | None) -> dict:
    """Keyword arguments for cls from a saved dict: JSON lists back to tuples in tuple fields; keys that are
    not fields raise `error` naming them (None: dropped, for manifests written by another version)."""
    if error is not None:
        d = known_fields(cls, d, error)
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: tuple(v) if isinstance(v, list) and _tuple_field(hints[k]) else v for k, v in d.items() if k in names}
