"""`workbench demo`: the whole workbench on the embedded model into a workspace (resumes), then the app."""

from __future__ import annotations

import argparse
from pathlib import Path

from workbench.cli.app import add_serve_flags, serve
from workbench.cli.options import quiet_flag, workspace_flag
from workbench.configflags import add_config_flags, config_values
from workbench.demo.config import DemoConfig

PREFIX = "demo."  # namespace prefix of the DemoConfig flags


def add_parser(sub) -> None:
    d = sub.add_parser(
        "demo",
        parents=[quiet_flag(), workspace_flag("to fill")],
        help="run the whole workbench on the embedded model into a workspace (resumes), then serve the app",
    )
    d.add_argument(
        "--overwrite",
        action="store_true",
        help="first remove what the workbench made in the workspace (refuses folders holding anything else)",
    )
    d.add_argument("--no-serve", action="store_true", help="build the workspace only; do not start the app")
    add_serve_flags(d)
    add_config_flags(d, DemoConfig, PREFIX)
    d.set_defaults(func=_demo)


def _demo(a: argparse.Namespace) -> None:
    from workbench.demo.run import run_demo  # the steps import torch: `workbench --help` stays light

    run_demo(Path(a.workspace), DemoConfig(**config_values(a, DemoConfig, PREFIX)), a.overwrite, not a.quiet)
    if not a.no_serve:
        serve(Path(a.workspace), a.host, a.port)
