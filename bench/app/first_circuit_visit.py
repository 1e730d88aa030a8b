"""The first Circuit page visit on a fresh `workbench app` server, two checkouts side by side (issue #47's prompt-box
ask, item 3): seconds from navigation to the graph's nodes drawn, to the page's script finished (the node details,
which run the model, included), and the spinner text shown meanwhile; headless Chromium, rounds alternating.

python bench/app/first_circuit_visit.py --workspace WS --checkout base=DIR --checkout branch=DIR [--rounds 3]
  direct: /circuit opened right after the server answers; via-workspace: the landing page (Workspace) first, then
  /circuit, as a user arrives. Prints one JSON line per visit and a table of medians.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
NODES_JS = """() => { const c = document.querySelector("[data-testid='stBidiComponentIsolated']");
  return c && c.shadowRoot ? c.shadowRoot.querySelectorAll('[data-node-id]').length : 0; }"""
STATE_JS = "() => document.querySelector(\"[data-testid='stApp']\")?.getAttribute('data-test-script-state')"
SPIN_JS = "() => [...document.querySelectorAll(\"[data-testid='stSpinner']\")].map(e => e.innerText.trim()).join(' | ')"


def _server(checkout: str, workspace: str, log) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "workbench.cli", "app", "--workspace", workspace, "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=checkout, env={**os.environ, "PYTHONPATH": checkout}, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=1).read() == b"ok":
                return proc, url
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{checkout}: the server did not answer")


def visit(checkout: str, workspace: str, mode: str, log) -> dict:
    """One fresh server, one first visit of /circuit: the seconds to nodes drawn and to the script's end."""
    from playwright.sync_api import sync_playwright

    proc, url = _server(checkout, workspace, log)
    out = {"nodes_drawn_s": None, "script_done_s": None, "spinners": []}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(300_000)
            if mode == "via-workspace":
                page.goto(url)
                page.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']")
            t0 = time.perf_counter()
            page.goto(f"{url}/circuit")
            while time.perf_counter() - t0 < 300:
                t, n, state, spin = (
                    time.perf_counter() - t0,
                    page.evaluate(NODES_JS),
                    page.evaluate(STATE_JS),
                    page.evaluate(SPIN_JS),
                )
                if spin and spin not in out["spinners"]:
                    out["spinners"].append(spin)
                if n and out["nodes_drawn_s"] is None:
                    out["nodes_drawn_s"] = round(t, 2)
                if n and state == "notRunning" and t > 1:
                    out["script_done_s"] = round(t, 2)
                    break
                time.sleep(0.1)
            browser.close()
    finally:
        proc.terminate()
        proc.wait()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workspace", required=True)
    ap.add_argument("--checkout", action="append", required=True, help="NAME=DIR, a checkout of the workbench")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--log", default=os.devnull)
    a = ap.parse_args()
    checkouts = dict(c.split("=", 1) for c in a.checkout)
    rows = []
    with open(a.log, "a") as log:
        for r in range(a.rounds):
            for mode in ("direct", "via-workspace"):
                for name, path in checkouts.items():
                    res = {"round": r, "mode": mode, "checkout": name, "load": os.getloadavg()[0]}
                    res |= visit(str(Path(path).resolve()), a.workspace, mode, log)
                    print(json.dumps(res), flush=True)
                    rows.append(res)
    print("| checkout | visit | nodes drawn (s, median) | script done (s, median) |\n|---|---|---|---|")
    for mode in ("direct", "via-workspace"):
        for name in checkouts:
            mine = [x for x in rows if x["mode"] == mode and x["checkout"] == name]
            med = [
                statistics.median(x[k] for x in mine if x[k] is not None) for k in ("nodes_drawn_s", "script_done_s")
            ]
            print(f"| {name} | {mode} | {med[0]:.1f} | {med[1]:.1f} |")


if __name__ == "__main__":
    main()
