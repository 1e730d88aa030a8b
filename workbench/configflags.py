"""argparse flags generated from the config dataclasses, so each default and help text is written
once, in the dataclass field (`metadata`: help, choices, the numeric bounds min / max / open / inf of
workbench.config, flag for a different flag name, negate for a store_false flag, cli=False to leave a field
to `--set`, path for a path the command reads or writes: a workbench.guard.Role form, checked by the output
guard). The flag refuses a value outside its choices or its bounds (NaN, inf) as it is parsed, with the
message the config (workbench.config.Config) gives for the same value from Python, JSON or `--set`.

Scalar fields (int, float, str, bool, optionally `| None`) get a flag; lists and dicts are set with
`--set FIELD=JSON`. Each config's values land under its own prefix in the namespace, so two configs
on one command may share field names (the SAE's seed and the data-order seed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import typing

from workbench.config import INT64, elements, out_of_range, parse_numbers
from workbench.errors import BadValueError
from workbench.guard import Role, declare

_SCALARS = {"int": int, "float": float, "str": str, "bool": bool}


def _scalar(annotation) -> tuple[type | None, bool]:
    """(the scalar type, whether None is allowed) of a field annotation such as 'int | None'."""
    parts = [p.strip() for p in str(annotation).split("|")]
    optional = "None" in parts
    parts = [p for p in parts if p != "None"]
    return (_SCALARS.get(parts[0]) if len(parts) == 1 else None), optional


def _parse(
    typ: type,
    optional: bool,
    f: dataclasses.Field | None = None,
    minimum: int | None = None,
    maximum: int = INT64 - 1,
):
    """The argparse type of a flag: `typ` from the text, within the bounds of config field `f` (a number)
    or in [minimum, maximum] (an int fits 64 bits)."""

    def parse(text: str):
        if optional and text.lower() == "none":
            return None
        try:
            value = typ(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a valid {typ.__name__}") from None
        if f is not None and typ in (int, float) and (message := out_of_range(f, typ, value)):
            raise argparse.ArgumentTypeError(message)
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below the minimum: it must be an integer >= {minimum}")
        if minimum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"{value} is above the maximum: it must be an integer <= {maximum}")
        return value

    parse.__name__ = typ.__name__
    parse.field = f  # the config field whose bounds it checks (tests walk the parser by it)
    return parse


def count(minimum: int = 1, maximum: int = INT64 - 1):
    """The argparse type of an integer flag outside the configs: a count, size, seed or port is an integer in
    [minimum, maximum] (at most 64 bits), refused by name as the flag is parsed, before any work."""
    return _parse(int, False, minimum=minimum, maximum=maximum)


def numbers(cls, name: str):
    """The argparse type of a flag outside the generated ones that gives list field `name` of config `cls`
    ('1,2.5'): each element within the field's declared bounds, no empty element, refused as it is parsed."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    kind = elements(typing.get_type_hints(cls)[name])

    def parse(text: str) -> list:
        try:
            return parse_numbers(text, kind, f)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = f"{kind.__name__} list"
    parse.field = f
    return parse


GIVEN = "_given_flags"  # namespace attribute: the dests of the config flags given on the command line


class _Store(argparse.Action):
    """argparse's store, also noting that the flag was given (a default and an equal value typed in differ)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.__dict__.setdefault(GIVEN, set()).add(self.dest)


def given(args: argparse.Namespace) -> set[str]:
    """The dests (prefix + field) of the valued (not boolean) config flags given on the command line."""
    return getattr(args, GIVEN, set())


def _default(f: dataclasses.Field):
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def flag_fields(cls) -> list[dataclasses.Field]:
    """The fields of `cls` that get a flag."""
    return [f for f in dataclasses.fields(cls) if f.metadata.get("cli", True) and _scalar(f.type)[0] is not None]


def flag_name(f: dataclasses.Field) -> str:
    return f.metadata.get("flag", "--" + f.name.replace("_", "-"))


def add_config_flags(parser, cls, prefix: str, sweep: tuple[str, ...] = (), skip: tuple[str, ...] = ()) -> None:
    """One flag per scalar field of dataclass `cls`; fields in `sweep` take several values (one run each)."""
    for f in flag_fields(cls):
        if f.name in skip:
            continue
        typ, optional = _scalar(f.type)
        meta, default, dest = f.metadata, _default(f), prefix + f.name
        text = meta.get("help", f.name.replace("_", " "))
        if typ is bool and meta.get("negate"):
            parser.add_argument(flag_name(f), dest=dest, action="store_false", default=default, help=text)
        elif typ is bool:
            parser.add_argument(
                flag_name(f),
                dest=dest,
                action=argparse.BooleanOptionalAction,
                default=default,
                help=f"{text} (default: %(default)s)",
            )
        else:
            kw = {"choices": meta["choices"]} if "choices" in meta else {}
            if f.name in sweep:
                kw.update(
                    nargs="+",
                    default=[default],
                    help=f"{text}; several values train one SAE each (default: %(default)s)",
                )
            else:
                kw.update(default=default, help=f"{text} (default: %(default)s)")
            metavar = "{" + ",".join(map(str, meta["choices"])) + "}" if "choices" in meta else f.name.upper()
            action = parser.add_argument(
                flag_name(f), dest=dest, action=_Store, type=_parse(typ, optional, f), metavar=metavar, **kw
            )
            if "path" in meta:  # a path the command reads or writes (a workbench.guard.Role form): guarded
                declare(action, Role(meta["path"]))


def config_values(args: argparse.Namespace, cls, prefix: str) -> dict:
    """The flag values of `cls`'s fields from a parsed namespace (only the fields that have a flag)."""
    return {f.name: getattr(args, prefix + f.name) for f in flag_fields(cls) if hasattr(args, prefix + f.name)}


def set_fields(cls, pairs: list[str], others: tuple = ()) -> dict:
    """--set FIELD=VALUE pairs -> keyword arguments for `cls` (VALUE as JSON; plain strings need no quotes).

    A field that has its own flag, on `cls` or on the command's other configs (`others`), must be set with it,
    so one value cannot come from two places; the refusal names the flag.
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}
    flagged = {f.name: flag_name(f) for c in (*others, cls) for f in flag_fields(c)}  # cls's own flags win
    out = {}
    for pair in pairs:
        key, eq, raw = pair.partition("=")
        if eq and key in flagged:
            raise BadValueError(f"--set {pair!r}: {key} has its own flag; use {flagged[key]} {raw}")
        if not eq or key not in fields:
            raise BadValueError(f"bad --set {pair!r}: expected FIELD=VALUE with FIELD one of {', '.join(fields)}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out
