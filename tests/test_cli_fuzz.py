"""A fuzz test of the whole CLI, walked from its parser (tests/cli_commands.py), so a command or flag added later is
covered without editing this file: every option and positional of every leaf command gets the hostile values of its
type (empty, NaN, infinities, huge, negative, malformed lists, unknown choices, non-UTF-8 text, and for a path:
missing, a folder where a file goes, a non-UTF-8 or empty file, a path escaping the working folder). Each case must
end in a one-line error (status 2; argparse's usage block may precede the line) or get past every check to the
command's work, never in a traceback or a hang.

Bounded in time: the rest of each command line is what stops a command before its work (inputs and models that do
not exist, a workspace not yet made), and `workbench.steps`' jobs and `os.execve` (the app's server) are replaced by
a stop that counts as "got to its work": what is checked is everything the CLI checks before it calls them. A case
still running after CASE_SECONDS is a hang.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import pkgutil
import signal
from collections import Counter

import pytest
from cli_commands import leaf_commands

from workbench import steps
from workbench.cli import main
from workbench.guard import ROLE

# every module of the steps: each step is stopped where it is defined, where the CLI imports it from
# the modules whose public functions start work: every step, and the demo's run (it imports its steps by name)
STEP_MODULES = [importlib.import_module(m.name) for m in pkgutil.iter_modules(steps.__path__, f"{steps.__name__}.")]
STEP_MODULES += [importlib.import_module(m) for m in ("workbench.demo.run", "workbench.demo.smollm2")]
CASE_SECONDS = 60  # far above any case here (the slowest loads a model's config): only a hang reaches it
NON_UTF8 = "caf\udce9"  # what Python makes of the argv bytes b"caf\xe9" (Latin-1, not UTF-8)
MODEL_FLAGS = ("--model", "--base", "--sparse")  # given a model that does not exist unless the flag is fuzzed
TEXT = ["", NON_UTF8, "x" * 100_000]
HOSTILE = {
    "flag": [],  # a flag takes no value: `--flag=x` is the hostile form
    "choice": ["", "nope", NON_UTF8],
    "int": ["", "nan", "inf", "-1", "1e308", "9" * 30, "1.5"],
    "float": ["", "nan", "inf", "-inf", "1e308", "-1e308", "9" * 400],  # float("9" * 400) is inf
    "list": ["", ",", "1,,2", "nan", "1e308", "-1", "x"],
    "path": ["", "no/such/path", "{dir}", "{binary}", "{empty}", "../../escape"],
    "text": TEXT,
    "texts": [*TEXT, "=", "x=NaN"],  # nargs '+'/'*' and append options: --set FIELD=VALUE, --feature
}
# values no argument of these kinds may accept (not a number, not finite, past 64 bits, an empty list element, not a
# choice, a value for a flag that takes none): refused, never run
REFUSED = {
    "flag": {None},
    "choice": set(HOSTILE["choice"]),
    "int": {"", "nan", "inf", "-1", "9" * 30, "1.5"},
    "float": {"", "nan", "inf", "-inf", "9" * 400},
    "list": {"", ",", "1,,2", "nan", "x"},
}


class Started(Exception):
    """A command got past every check to its work (a workbench.steps job, or the app's server)."""


def kind(a: argparse.Action) -> str:
    """The hostile-value family of an option or positional, from how it is declared."""
    name = getattr(a.type, "__name__", "")
    if a.nargs == 0:
        return "flag"
    if a.choices:
        return "choice"
    if getattr(a, ROLE, None) is not None:
        return "path"
    if name in ("int", "float"):
        return name
    if name.endswith(" list"):
        return "list"
    return "texts" if a.nargs in ("+", "*") or isinstance(a, argparse._AppendAction) else "text"


def actions(parser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.dest != "help" and not isinstance(a, argparse._SubParsersAction)]


def command_line(path: tuple, parser, fuzzed: argparse.Action, value: str | None) -> list[str]:
    """The command line with `fuzzed` given `value` (a flag: `--flag=x`) and the rest set to what stops the command
    before its work: each required argument a placeholder that does not exist (or its first choice), each model flag
    a model that does not exist, the workspace a folder not yet made."""
    line, options = [*path], []
    for a in actions(parser):
        placeholder = str(list(a.choices)[0]) if a.choices else "no-such-input"
        if a is fuzzed and not a.option_strings:
            line.append(value)
        elif a is fuzzed:
            options.append(f"{a.option_strings[0]}=x" if kind(a) == "flag" else f"{a.option_strings[0]}={value}")
        elif not a.option_strings and a.nargs not in ("?", "*"):
            line.append(placeholder)
        elif a.option_strings and a.required:
            options += [a.option_strings[0], placeholder]
        elif a.option_strings and a.option_strings[0] in MODEL_FLAGS:
            options += [a.option_strings[0], "no-such-model"]
        elif a.option_strings and a.option_strings[0] == "--workspace":
            options += ["--workspace", "ws"]
    return [*line, *options]


def cases(path: tuple, parser) -> list[tuple[str, bool, list[str]]]:
    """(label, whether it must be refused, command line) for every argument of a command and hostile value of its
    type."""
    out = []
    for a in actions(parser):
        name = a.option_strings[0] if a.option_strings else a.dest
        values = [None] if kind(a) == "flag" else HOSTILE[kind(a)]
        out += [
            (f"{name} {str(v)[:20]!r}", v in REFUSED.get(kind(a), ()), command_line(path, parser, a, v)) for v in values
        ]
    return out


COMMANDS = list(leaf_commands())


def _sandbox(tmp_path) -> dict:
    """The working folder (two levels down, so ../../escape stays in tmp_path) and the files a path value names."""
    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    (cwd / "dir").mkdir()
    (cwd / "binary").write_bytes(b"caf\xe9 \xff\xfe\x00\x01 not UTF-8\n")
    (cwd / "empty").write_bytes(b"")
    return {"dir": "dir", "binary": "binary", "empty": "empty"}


def _run(argv: list[str], capsys) -> tuple[str, str]:
    """('error' | 'ok' | 'started', stderr) of one command line, in process, under the hang alarm."""

    def hang(*_):
        raise TimeoutError(f"still running after {CASE_SECONDS} s")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(CASE_SECONDS)
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    except Started:
        rc = "started"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    err = capsys.readouterr().err
    return {0: "ok", 2: "error", "started": "started"}.get(rc, f"status {rc}"), err


def _one_line_error(err: str) -> bool:
    """One error line, `workbench ...: error: ...`, after at most argparse's usage block."""
    lines = err.rstrip("\n").split("\n")
    usage = lines[:-1]
    return (
        lines[-1].startswith("workbench")
        and ": error: " in lines[-1]
        and "Traceback" not in err
        and (not usage or (usage[0].startswith("usage: ") and all(x.startswith(" ") for x in usage[1:])))
    )


@pytest.fixture
def stopped(monkeypatch):
    """workbench.steps' jobs, the demo's run and os.execve raise Started: a case that gets to its work ends there."""

    def stop(*_, **__):
        raise Started

    for module in STEP_MODULES:
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if fn.__module__ == module.__name__ and not name.startswith("_"):
                monkeypatch.setattr(module, name, stop)
    monkeypatch.setattr(os, "execve", stop)


@pytest.mark.parametrize("path, parser", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_flag_of_every_command_refuses_hostile_values_in_one_line(
    path, parser, stopped, tmp_path, capsys, monkeypatch
):
    files = _sandbox(tmp_path)
    monkeypatch.chdir(tmp_path / "a" / "b")
    outcomes, bad = Counter(), []
    for label, refused, argv in cases(path, parser):
        argv = [_file(x, files) for x in argv]
        try:
            outcome, err = _run(argv, capsys)
        except Exception as e:  # a traceback: the bug this test exists to find
            outcome, err = f"{type(e).__name__}: {e}", ""
        outcomes[outcome] += 1
        allowed = ("error",) if refused else ("error", "ok", "started")
        if outcome not in allowed or (outcome == "error" and not _one_line_error(err)):
            bad.append(f"{' '.join(path)} {label}: {outcome} {err.strip()[-300:]!r}")
    assert not bad, "\n".join(bad)
    print(f"{' '.join(path)}: {dict(outcomes)}")


def _file(arg: str, files: dict) -> str:
    """A path placeholder ('{dir}', or '--flag={dir}') made the sandbox's file."""
    for k, v in files.items():
        arg = arg.replace("{" + k + "}", v) if len(arg) < 100 else arg
    return arg


def test_the_walk_covers_every_command_and_argument_with_each_hostile_value_of_its_type():
    """The counts the fuzz test covers (commands, arguments, cases); every argument gets at least one case."""
    n_args = sum(len(actions(p)) for _, p in COMMANDS)
    n_cases = sum(len(cases(path, p)) for path, p in COMMANDS)
    kinds = Counter(kind(a) for _, p in COMMANDS for a in actions(p))
    assert len(COMMANDS) >= 24 and n_args >= 340 and n_cases >= 5 * n_args // 2, (len(COMMANDS), n_args, n_cases)
    assert {"flag", "choice", "int", "float", "list", "path", "text", "texts"} <= set(kinds), kinds
    n_refused = sum(r for path, p in COMMANDS for _, r, _ in cases(path, p))
    print(f"{len(COMMANDS)} commands, {n_args} arguments {dict(kinds)}, {n_cases} cases ({n_refused} must be refused)")
