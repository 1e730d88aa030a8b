"""JSON field checks for the readers of circuit and graph files: each error names the field, what it holds and what
was expected, so a damaged file is refused with one line a researcher can act on. The limits bound what a reader
accepts before it allocates (schema.py reads circuit files through these, neuronpedia.py graph JSON)."""

from __future__ import annotations

import math

from workbench.errors import DamagedFileError

MAX_EDGES = 5_000_000  # edges a file may hold (GPT-2 small's graph: 32k)
MAX_POSITIONS = 8192  # prompt tokens a file may hold


def finite_or_null(v):
    """A JSON value with every non-finite float read as null: not measured (the finder writes NaN for those)."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: finite_or_null(x) for k, x in v.items()}
    if isinstance(v, list):
        return [finite_or_null(x) for x in v]
    return v


def type_name(v) -> str:
    """What a field holds, as an error names it (`a list`, `null`)."""
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an int"}.get(
        type(v), "null" if v is None else f"a {type(v).__name__}"
    )


def is_a(v, t) -> bool:
    """isinstance where bool is not an int and an int counts as a float (JSON writes 1.0 as 1 in some tools)."""
    if t in (int, float) and isinstance(v, bool):
        return False
    return isinstance(v, (int, float)) if t is float else isinstance(v, t)


def get_typed(d: dict, key: str, t, where: str, default=...):
    name = f"{where}.{key}" if where else key
    if key not in d or d[key] is None:
        if default is ...:
            raise DamagedFileError(f"{name} is missing")
        return default
    if not is_a(d[key], t):
        raise DamagedFileError(f"{name} is {type_name(d[key])}, expected {t.__name__}")
    return d[key]


def get_int(d: dict, key: str, where: str, lo: int, default=...) -> int:
    v = get_typed(d, key, int, where, default)
    if v < lo:
        raise DamagedFileError(f"{where}.{key}={v} must be at least {lo}")
    return v


def get_bool(d: dict, key: str, where: str, default: bool) -> bool:
    return get_typed(d, key, bool, where, default)


def get_number(d: dict, key: str, where: str) -> float:
    v = get_typed(d, key, float, where)
    if not math.isfinite(v):
        raise DamagedFileError(f"{where}.{key} is {v!r}; scores must be finite numbers")
    return float(v)


def get_list(d: dict, key: str, limit: int) -> list:
    v = d.get(key)
    if not isinstance(v, list):
        raise DamagedFileError(f"{key} is {type_name(v)}, expected a list")
    if len(v) > limit:
        raise DamagedFileError(f"{key} holds {len(v)} entries; the limit is {limit}")
    return v


def check_numbers(v, where: str, limit: int) -> list:
    if not isinstance(v, list) or len(v) > limit:
        raise DamagedFileError(f"{where} must be a list of at most {limit} numbers, got {type_name(v)}")
    for i, x in enumerate(v):
        if not is_a(x, float) or not math.isfinite(x):
            raise DamagedFileError(f"{where}[{i}] is {x!r}; expected a finite number")
    return v
