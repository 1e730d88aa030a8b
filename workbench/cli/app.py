"""`workbench app`: serve the Streamlit app (app/server.py, whose pages run from app/main.py) on a workspace, on
localhost by default."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from workbench.configflags import count
from workbench.errors import UserError
from workbench.guard import INPUT, declare

APP = Path(__file__).resolve().parents[2] / "app" / "server.py"


def add_parser(sub) -> None:
    p = sub.add_parser("app", help="browse a workspace's SAEs, features, circuits and attention in the Streamlit app")
    declare(p.add_argument("--workspace", default="workspace", help="workspace folder (default: %(default)s)"), INPUT)
    add_serve_flags(p)
    p.set_defaults(func=_app)


def add_serve_flags(p) -> None:
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind; anything but localhost exposes the app (default: %(default)s)",
    )
    p.add_argument("--port", type=count(1, 65535), default=8501, help="port (default: %(default)s)")


def _app(a: argparse.Namespace) -> None:
    serve(Path(a.workspace), a.host, a.port)


def streamlit_command(workspace: Path, host: str, port: int) -> list[str]:
    """streamlit run with the flags of a local, offline tool: no usage stats, no file watcher, no deploy button;
    no full garbage collection after each script run (with torch loaded it takes 0.2-0.8 s, on every rerun: a
    pin's fragment rerun waited for it) and no magic (no page writes bare expressions; it re-parsed each page
    in every new session)."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP),
        "--server.address",
        host,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
        "--client.toolbarMode",
        "minimal",
        "--global.developmentMode",
        "false",
        "--runner.postScriptGC",
        "false",
        "--runner.magicEnabled",
        "false",
    ]


def serve(workspace: Path, host: str, port: int) -> None:
    """Print the URL and become the Streamlit server (`workbench app`, and `workbench demo` at its end)."""
    ws = Path(workspace).resolve()
    if not ws.is_dir():
        raise UserError(f"no workspace folder at {ws}: run `workbench demo` first or pass --workspace DIR")
    if not APP.is_file():
        raise UserError(f"the app's entry script {APP} is missing from this installation")
    env = {**os.environ, "WORKBENCH_WORKSPACE": str(ws)}
    print(f"serving {ws} at http://{host}:{port}", flush=True)
    cmd = streamlit_command(ws, host, port)
    os.execve(cmd[0], cmd, env)  # the server becomes this process: Ctrl-C and kill reach it directly
