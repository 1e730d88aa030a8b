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
    """isinstance against a field's annotation (int, float, str, bool, X | None, list[int], tuple[float, float])."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_is(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin in (list, tuple):
        return isinstance(value, (list, tuple)) and all(
            _is(v, args[0] if origin is list else a) for v, a in zip(value, args if origin is tuple else value)
        )
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
