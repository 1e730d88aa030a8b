"""The one base of every config dataclass, and its one rule for when a config checks itself.

The rule: constructing a config checks every value it holds (types, metadata choices and minimums, then
the config's own `check()`: ranges and relations between fields), skipping only fields left None for the
data to decide. `resolve(...)` fills those fields from the data (a cache's width, the number of
processes, another field's preset), checks the config against that data and returns a completed copy,
which passes every construction check again. So a config that exists is valid as far as it is known,
and a resolved one is valid as a whole. Values from `--set` or a JSON file arrive untyped and fail on
construction, by field name. Every config saves with `to_dict()` and loads with `from_dict()`, which
migrates field names of older saved configs (`renamed`) and names unknown fields and the valid ones.
"""

from __future__ import annotations

import dataclasses
import functools
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
            if not _is(v, hint):
                raise self.error(f"{f.name}={v!r} is not of type {_type_name(hint)}")
            choices = f.metadata.get("choices")
            if choices is not None and v not in choices:
                raise self.error(f"{f.name}={v!r} is not valid; choose one of {list(choices)}")
            low = f.metadata.get("min", 0)  # the bound its generated flag enforces (configflags)
            if isinstance(v, int) and not isinstance(v, bool) and v < low:
                raise self.error(f"{f.name}={v} must be >= {low}" + (" (or None)" if _is(None, hint) else ""))
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
