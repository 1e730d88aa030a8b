"""`workbench ls`: the artifacts recorded in a workspace, one line each, from their manifests."""

from __future__ import annotations

import argparse
import sys

from workbench.cli.options import workspace_flag
from workbench.workspace import KINDS


def add_parser(sub) -> None:
    ls = sub.add_parser(
        "ls", parents=[workspace_flag("to list", writes=False)], help="list the artifacts recorded in a workspace"
    )
    ls.add_argument("--kind", choices=KINDS, help="only artifacts of this kind")
    ls.set_defaults(func=_ls)


def _ls(a: argparse.Namespace) -> None:
    from workbench.browse import scan

    found, skipped = scan(a.workspace, a.kind)
    for s in skipped:
        print(f"skipped {s}", file=sys.stderr)
    if not found:
        print(f"no artifacts recorded in {a.workspace}" + (f" of kind {a.kind}" if a.kind else ""))
    for art in found:
        m = art.manifest
        summary = ", ".join(
            f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
            for k, v in m.get("summary", {}).items()
            if isinstance(v, (int, float, str))
        )
        print(f"{art.kind:<9} {art.name:<34} {m.get('made_by', '?'):<22} {m.get('created', '?'):<25} {summary}")
