"""`workbench ...`: one sub-command per job, each a thin layer over the steps in workbench.steps.

One module per command group (model, cache, sae, circuit, intervene, features, attention, ls, app, demo), each with
`add_parser(subparsers)` and handlers that call workbench.steps; heavy libraries are imported inside the
handlers, so building the parser (and `workbench --help`) stays cheap.

Every command that makes an artifact records it in a workspace (--workspace, default ./workspace):
outputs land inside it unless --out says otherwise, and each gets an artifact.json manifest either
way. Flags for config fields are generated from the config dataclasses (workbench.configflags), so
each default is written once. Every path argument is declared as read or written where it is defined, and the
output guard (workbench.guard) checks them all before any command runs. Errors a user can cause (UserError) print one clear line and exit with
status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys

from workbench.cli import app, attention, cache, circuit, demo, features, intervene, ls, model, sae
from workbench.cli.options import check_device_flag
from workbench.errors import UserError, os_error_message
from workbench.guard import check_args

GROUPS = (model, cache, sae, circuit, intervene, features, app, attention, ls, demo)  # in the order --help lists them


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="workbench", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one command; a UserError, or an OS error a user can fix (errors.os_error_message), is one line on
    stderr and status 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_device_flag(args)  # every command's --device, before any work
        check_args(parser, args)  # no output onto or into an input or another artifact, for every command
        args.func(args)
    except UserError as e:
        return _fail(args.command, str(e))
    except OSError as e:
        message = os_error_message(e)
        if message is None:
            raise
        return _fail(args.command, message)
    return 0


def _fail(command: str, message: str) -> int:
    print(f"workbench {command}: error: {message}", file=sys.stderr)
    return 2
