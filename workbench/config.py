"""The one base of every config dataclass, and its one rule for when a config checks itself.

The rule: constructing a config checks every value it holds (types, metadata choices, the numeric bounds
below, then the config's own `check()`: relations between fields), skipping only fields left None for the
data to decide. `resolve(...)` fills those fields from the data (a cache's width, the number of
processes, another field's preset), checks the config against that data and returns a completed copy,
which passes every construction check again. So a config that exists is valid as far as it is known,
and a resolved one is valid as a whole. Values from `--set` or a JSON file arrive untyped and fail on
construction, by field name. Every config saves with `to_dict()` and loads with `from_dict()`, which
migrates field names of older saved configs (`renamed`) and names unknown fields and the valid ones.

Numeric bounds are declared once, in the field's metadata, and checked here for every way a config is made
(a generated flag, `--set`, JSON, Python): "min" / "max" are inclusive bounds and "open" ("min", "max" or
"both") makes them exclusive. An int field's "min" is 0 unless declared (no count, size or seed is
negative) and every int fits 64 bits; a float field is always finite (NaN and infinity are refused). A list or tuple of numbers has its
bounds checked on every element (`elements`), and a list typed as text (a flag, a URL) is read by
`parse_numbers`, which refuses an empty element ('0,,3') rather than dropping it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from typing import ClassVar

from workbench.errors import ConfigError


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


@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _type_name(hint) -> str:
    return str(hint).replace("typing.", "").replace("<class '", "").replace("'>", "")


def _tuple_field(hint) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_tuple_field(a) for a in typing.get_args(hint))
    return origin is tuple or hint is tuple


def numeric(hint) -> type | None:
    """int or float when a field's annotation is that number type (optionally `| None`), else None."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    args = [a for a in typing.get_args(hint) if a is not type(None)] if union else [hint]  # list[int] is no int
    return args[0] if len(args) == 1 and args[0] in (int, float) else None


def elements(hint) -> type | None:
    """int or float when a field's annotation is a list or tuple of that number type (optionally `| None`)."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    args = [a for a in typing.get_args(hint) if a is not type(None)] if union else [hint]
    if len(args) != 1 or typing.get_origin(args[0]) not in (list, tuple):
        return None
    kinds = {a for a in typing.get_args(args[0]) if a is not Ellipsis}
    return kinds.pop() if len(kinds) == 1 and kinds <= {int, float} else None


def _bounds(f: dataclasses.Field, kind: type) -> tuple:
    """(low, high, low open, high open) of a numeric field's metadata; an int's low is 0 unless declared."""
    meta, opened = f.metadata, f.metadata.get("open", "")
    low = meta.get("min", 0 if kind is int else None)
    return low, meta.get("max"), opened in ("min", "both"), opened in ("max", "both")


def valid_range(f: dataclasses.Field, kind: type) -> str:
    """What a numeric field takes, in words: 'an integer >= 1', 'a finite number in (0, 1]'."""
    low, high, low_open, high_open = _bounds(f, kind)
    what = "an integer" if kind is int else "a finite number"
    if low is not None and high is not None:
        return f"{what} in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if low is not None:
        return f"{what} {'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f"{what} {'<' if high_open else '<='} {high:g}"
    return what


def out_of_range(f: dataclasses.Field, kind: type, v, name: str | None = None) -> str | None:
    """The one-line refusal of value `v` for numeric field `f` (None when it is within the declared bounds);
    `name`: what the message calls it (default the field's name; an element: 'value[2]')."""
    low, high, low_open, high_open = _bounds(f, kind)
    ok = isinstance(v, int) or math.isfinite(v)
    if low is not None:
        ok = ok and (v > low if low_open else v >= low)
    if high is not None:
        ok = ok and (v < high if high_open else v <= high)
    if ok and isinstance(v, int) and not -INT64 <= v < INT64:
        return f"{name or f.name}={v!r} must be {valid_range(f, kind)} that fits 64 bits (below 2**63)"
    return None if ok else f"{name or f.name}={v!r} must be {valid_range(f, kind)}"


def element_error(f: dataclasses.Field, kind: type, values) -> str | None:
    """The refusal of the first element of a list of numbers outside field `f`'s bounds (None: all within)."""
    return next((m for i, v in enumerate(values) if (m := out_of_range(f, kind, v, f"{f.name}[{i}]"))), None)


def parse_numbers(text: str, kind: type, f: dataclasses.Field | None = None) -> list:
    """Comma-separated numbers of `kind` ('1,2.5') from a flag or a URL, each within field `f`'s bounds; an
    empty element ('0,,3'), a non-number or an out-of-range element raises ValueError naming it."""
    parts = str(text).split(",")
    if any(not p.strip() for p in parts):
        raise ValueError(f"{text!r} has an empty element: give comma-separated numbers, e.g. 0,3")
    try:
        values = [kind(p) for p in parts]
    except ValueError:
        what = "integers" if kind is int else "numbers"
        raise ValueError(f"{text!r} is not a comma-separated list of {what}") from None
    message = element_error(f, kind, values) if f is not None else None
    if message:
        raise ValueError(message)
    return values


INT64 = 2**63  # every integer a config holds fits a signed 64-bit integer (torch's and numpy's), whatever its bounds


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


class Config:
    """Base of the config dataclasses (subclass it and decorate the subclass with @dataclass).

    A subclass writes its own value checks in `check()` and, if the data decides some fields, `fill()`;
    it never overrides `__post_init__`, `resolve`, `to_dict` or `from_dict`.
    """

    error: ClassVar[type[Exception]] = ConfigError  # the error class of this config's bad values
    renamed: ClassVar[dict[str, str]] = {}  # field names in configs saved before a rename -> today's name
    drop_unknown: ClassVar[bool] = False  # from_dict drops unknown keys (a manifest from another version)

    def __post_init__(self):
        hints = _hints(type(self))
        for f in dataclasses.fields(self):
            v, hint = getattr(self, f.name), hints[f.name]
            kind, optional = numeric(hint), " (or None)" if _is(None, hint) else ""
            if not _is(v, hint):
                need = f": it must be {valid_range(f, kind)}{optional}" if kind else ""
                raise self.error(f"{f.name}={v!r} is not of type {_type_name(hint)}{need}")
            choices = f.metadata.get("choices")
            if choices is not None and v not in choices:
                raise self.error(f"{f.name}={v!r} is not valid; choose one of {list(choices)}")
            message = out_of_range(f, kind, v) if kind and v is not None else None
            each = elements(hint)
            if each and v is not None and not message:
                message = element_error(f, each, v)
            if message:
                raise self.error(message + optional)
        self.check()

    def check(self) -> None:
        """This config's own value checks (ranges, relations between fields) of every field that is set."""

    def fill(self, *data, **named) -> dict:
        """The fields the data decides (field name -> value), after checking the config against the data."""
        return {}

    def resolve(self, *data, **named):
        """A completed copy: the fields the data decides filled in (`fill`), every value checked again."""
        return dataclasses.replace(self, **self.fill(*data, **named))

    def to_dict(self) -> dict:
        """The JSON form: nested configs as dicts, tuples as lists (what JSON gives back), so a saved config
        compares equal to a fresh one."""

        def plain(v):
            if isinstance(v, dict):
                return {k: plain(x) for k, x in v.items()}
            if isinstance(v, (list, tuple)):
                return [plain(x) for x in v]
            return v

        return plain(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, d: dict):
        """A config from its saved form: renamed fields migrated, lists back to tuples in tuple fields, nested
        configs from their dicts; keys that are not fields raise `error` naming them and the valid ones
        (dropped instead where `drop_unknown`)."""
        for old, new in cls.renamed.items():
            if old in d and new not in d:
                d = {**{k: v for k, v in d.items() if k != old}, new: d[old]}
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(d) - set(names))
        if unknown and not cls.drop_unknown:
            raise cls.error(f"unknown {cls.__name__} fields {unknown}; valid fields: {sorted(names)}")
        hints, kw = _hints(cls), {}
        for k in names:
            if k not in d:
                continue
            v, hint = d[k], hints[k]
            if isinstance(v, dict) and isinstance(hint, type) and issubclass(hint, Config):
                v = hint.from_dict(v)
            elif isinstance(v, list) and _tuple_field(hint):
                v = tuple(v)
            kw[k] = v
        return cls(**kw)
