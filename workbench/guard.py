"""The output guard: one rule, in one place, for what a command may write, checked before any work.

Each command declares which arguments it reads (inputs) and which it writes (a file, an artifact's folder, a
scratch folder, the workspace): the CLI marks them where the flags are defined (`declare`) and checks them
all before a command's handler runs (`check_args`); the steps check the folder an artifact lands in for
Python callers too (`check_artifact`). Refused, in one line naming both paths:
- an output that is an input, or lies inside an input folder: the write would replace or change what is read;
- an artifact folder that holds an input: its manifest would list the input's files as its own (and a
  workspace clean-up would delete them);
- an output inside the folder of another artifact, or a folder output holding another artifact's manifest
  (an artifact.json of another kind): the write would replace or mix into that artifact;
- two outputs that are one path;
- an in-place writer (`circuit check`, `sae eval`, `features build`: it reads a path and adds to it) on a file or
  folder of an artifact of a kind it does not declare: it would rewrite that artifact's files or manifest.
An input compares by the file it names (symlinks, `..` and hard links resolved); one not on disk cannot be
overwritten and is left to the command, which names it missing. This module imports no torch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from workbench.atomic import check_output_dir, check_output_file
from workbench.errors import BadValueError
from workbench.workspace import MANIFEST

ROLE = "workbench_role"  # the argparse action attribute that holds an argument's Role


@dataclass(frozen=True)
class Role:
    """What a command does with a path argument. form: 'input', 'file', 'artifact' (the folder of an artifact of
    one of `kinds`, whose own manifest may be there: a resume), 'scratch' (a working folder, no artifact),
    'workspace', or 'in_place' (read, then added to: an artifact of one of `kinds`, or a file of no artifact).
    split: the separator of a value listing several paths (a corpus spec). when: a test of the parsed arguments,
    for a path used only by some forms of a command (`cache verify DIR` records nothing)."""

    form: str
    kinds: tuple[str, ...] = ()
    split: str | None = None
    when: Callable | None = None

    @property
    def writes(self) -> bool:
        """Whether it is checked as an output (an in-place path is checked as an input, and by `check_in_place`)."""
        return self.form not in ("input", "in_place")


INPUT = Role("input")
FILE = Role("file")
SCRATCH = Role("scratch")
WORKSPACE = Role("workspace")


def artifact(*kinds: str) -> Role:
    return Role("artifact", kinds)


def in_place(*kinds: str) -> Role:
    return Role("in_place", kinds)


def declare(action, role: Role):
    """Mark an argparse action (what add_argument returns) with the role of its paths; returns the action."""
    setattr(action, ROLE, role)
    return action


def check_args(parser, args) -> None:
    """The guard over every declared path argument of the command `args` was parsed for (its leaf parser)."""
    outputs, inputs, places = [], [], []
    for action in _leaf(parser, args)._actions:
        role, value = getattr(action, ROLE, None), getattr(args, action.dest, None)
        if role is None or value in (None, "", []) or (role.when is not None and not role.when(args)):
            continue
        label = action.option_strings[0] if action.option_strings else (action.metavar or action.dest.upper())
        for v in value if isinstance(value, list) else [value]:
            for p in str(v).split(role.split) if role.split else [str(v)]:
                (outputs if role.writes else inputs).append((label, p, role))
                if role.form == "in_place":
                    places.append((label, p, role.kinds))
    check(outputs, [(label, p) for label, p, _ in inputs])
    for label, p, kinds in places:
        check_in_place(label, p, kinds)


def check_in_place(label: str, path: str | Path, kinds: tuple[str, ...]) -> None:
    """Refuse an in-place write (a step adding to what it read) on a path that an artifact of a kind other than
    `kinds` holds (its own folder, or any folder above it with a manifest, the nearest deciding)."""
    path = Path(path)
    real = path.resolve()
    held = next((f / MANIFEST for f in (real, *real.parents) if (f / MANIFEST).is_file()), None)
    if held is not None and _kind(held) not in kinds:
        raise BadValueError(
            f"{label} {path} belongs to another artifact ({held}, {_described(held)}): this command adds only to "
            f"{' or '.join(kinds)} artifacts and would rewrite it; copy the file out of {held.parent}, or give a "
            f"{kinds[0]} artifact"
        )


def _leaf(parser, args):
    """The sub-command parser `args` came from, followed through each level's chosen sub-command."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return _leaf(action.choices[getattr(args, action.dest)], args)
    return parser


def check_artifact(folder, kind: str | None, inputs: dict, scratch: dict | None = None) -> None:
    """A step's check of the folder it writes an artifact of `kind` into (None: a run folder whose members are the
    artifacts) against its inputs (name -> a path, a list of paths, or None; specs that name no path on disk, such
    as 'tiny', are skipped) and its scratch folders (name -> path or None)."""
    outputs = [("output folder", folder, artifact(*([kind] if kind else [])))]
    outputs += [(name, p, SCRATCH) for name, p in (scratch or {}).items() if p is not None]
    given = [(name, p) for name, v in inputs.items() for p in (v if isinstance(v, (list, tuple)) else [v])]
    check(outputs, [(name, p) for name, p in given if isinstance(p, (str, Path))])


def check(outputs: list[tuple[str, str | Path, Role]], inputs: list[tuple[str, str | Path]]) -> None:
    """Refuse (BadValueError, one line) an output (label, path, role) that breaks the rule above, then one that
    cannot be written (a folder where a file goes, no permission)."""
    seen: list[tuple[str, Path]] = []
    on_disk = [(label, Path(p)) for label, p in inputs if Path(p).exists()]
    for label, path, role in outputs:
        path = Path(path)
        for other, earlier in seen:
            if _same(path, earlier):
                raise BadValueError(
                    f"{label} {path} is also the output {other} {earlier}: the later write would replace the "
                    "earlier; choose another path"
                )
        for name, given in on_disk:
            _check_against_input(label, path, role, name, given)
        _check_manifests(label, path, role)
        if role.form == "file":
            check_output_file(path, label)
        elif role.form in ("artifact", "scratch"):
            check_output_dir(path, label)
        seen.append((label, path))


def _check_against_input(label: str, path: Path, role: Role, name: str, given: Path) -> None:
    if _same(path, given):
        raise BadValueError(
            f"{label} {path} is the input {name} {given}: writing it would replace what the command reads; "
            "choose another output path"
        )
    if given.is_dir() and _inside(path, given):
        raise BadValueError(
            f"{label} {path} lies inside the input {name} {given}: writing there would change what the command "
            "reads; choose an output outside it"
        )
    if role.form == "artifact" and _inside(given, path):
        raise BadValueError(
            f"{label} {path} holds the input {name} {given}: the artifact's manifest would list the input's files "
            "as its own; choose a folder that does not contain it"
        )


def _check_manifests(label: str, path: Path, role: Role) -> None:
    """No output inside another artifact's folder; no folder output on one whose manifest is of another kind."""
    real = path.resolve()
    own = real / MANIFEST
    if role.form != "file" and own.is_file() and (role.form != "artifact" or _kind(own) not in role.kinds):
        raise BadValueError(
            f"{label} {path} holds the manifest of another artifact ({own}, {_described(own)}): writing there "
            "would replace or mix into it; choose another folder"
        )
    for folder in real.parents:
        if (folder / MANIFEST).is_file():
            raise BadValueError(
                f"{label} {path} lies inside the folder of another artifact ({folder / MANIFEST}, "
                f"{_described(folder / MANIFEST)}): writing there would change that artifact; choose a path outside "
                f"{folder}"
            )


def _kind(manifest: Path) -> str | None:
    try:
        data = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return None
    return data.get("kind") if isinstance(data, dict) else None


def _described(manifest: Path) -> str:
    kind = _kind(manifest)
    return f"kind {kind}" if kind else "unreadable"


def _same(a: Path, b: Path) -> bool:
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return a.resolve() == b.resolve()


def _inside(path: Path, folder: Path) -> bool:
    """Whether `path` lies strictly inside `folder` (both resolved)."""
    p, f = path.resolve(), folder.resolve()
    return p != f and p.is_relative_to(f)
