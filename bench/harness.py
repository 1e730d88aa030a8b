"""Driver-side helpers shared by the *_bench.py drivers: peer venvs, subprocess runs, machine info, tables.

Every side runs in its own subprocess (so peak RSS is per side and comparable); a side prints one
JSON line as the last line of its stdout.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
# git-ignored scratch: shared inputs, per-run configs (BENCH_WORK moves it, e.g. for the tests' smoke runs)
WORK = Path(os.environ.get("BENCH_WORK", BENCH / "work"))
PEERS = BENCH / "peers"
PYTHON = {
    "main": Path(sys.executable),  # the drivers run in the workbench's own environment
    "sae": BENCH / ".venv-sae" / "bin" / "python",
    "circuits": BENCH / ".venv-circuits" / "bin" / "python",
    "dash": BENCH / ".venv-dash" / "bin" / "python",
}


class PeerError(RuntimeError):
    """A side's subprocess failed; `summary` is its exception line, the message the end of its stderr."""

    def __init__(self, summary: str, detail: str):
        super().__init__(f"{summary}\n{detail}")
        self.summary = summary


# GPT-2 small's shape as HookedTransformerConfig fields (random weights: the benches' large case)
GPT2_SHAPE = dict(
    n_layers=12,
    d_model=768,
    n_heads=12,
    d_head=64,
    d_mlp=3072,
    n_ctx=1024,
    d_vocab=50257,
    act_fn="gelu_new",
    normalization_type="LN",
)


def _exception_line(stderr: str) -> str:
    """The last 'SomeError: message' line of a traceback (the first 200 characters)."""
    hits = [ln for ln in stderr.splitlines() if re.match(r"^[\w.]*(Error|Exception|Interrupt)\b", ln)]
    return (hits[-1] if hits else (stderr.strip().splitlines() or ["(no stderr)"])[-1])[:200]


def python(venv: str) -> Path:
    """The interpreter of a side's venv; a missing peer venv is that side's failure, not the driver's."""
    p = PYTHON[venv]
    if not p.exists():
        raise PeerError(f"{p} is missing: build the peer environments with bench/setup_peers.sh", "")
    return p


class MemoryCapError(PeerError):
    """A side's RSS went over the cap it was given, so it was stopped (the machine is shared)."""


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run_side(
    venv: str, script: str, cfg: dict, tag: str, timeout: float = 1800, mem_cap_mb: float | None = None
) -> dict:
    """Run bench/peers/<script> in a venv with cfg (as a JSON file); returns its JSON result line.

    mem_cap_mb: stop the side (MemoryCapError) when its RSS passes this, instead of letting it take
    the machine's memory from everything else running there.
    """
    WORK.mkdir(parents=True, exist_ok=True)
    cfg_path = WORK / f"{tag}.json"
    cfg_path.write_text(json.dumps(cfg, indent=1))
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TOKENIZERS_PARALLELISM": "false",
        "WANDB_MODE": "disabled",
        "TQDM_DISABLE": "1",
    }
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [str(python(venv)), str(PEERS / script), str(cfg_path)],
            stdout=out,
            stderr=err,
            text=True,
            cwd=ROOT,
            env=env,
        )
        t0, peak = time.time(), 0.0
        while proc.poll() is None:
            peak = max(peak, _rss_mb(proc.pid))
            if mem_cap_mb is not None and peak > mem_cap_mb:
                proc.kill()
                proc.wait()
                raise MemoryCapError(f"stopped at {peak:,.0f} MB RSS (cap {mem_cap_mb:,.0f} MB)", "")
            if time.time() - t0 > timeout:
                proc.kill()
                proc.wait()
                raise PeerError(f"timed out after {timeout:.0f}s", "")
            time.sleep(0.1)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise PeerError(f"{script} ({venv}) exited {proc.returncode}: {_exception_line(stderr)}", stderr[-3000:])
    return json.loads(lines[-1])


def set_threads(n: int | None) -> str:
    """Thread count for every side (OMP/MKL env of the subprocesses); None keeps torch's default.

    On a CPU shared with other jobs, two OpenMP threads per process can be ~10x slower than one
    (threads spin at barriers while their partner is descheduled), so a busy machine needs 1.
    """
    if n is None:
        return f"torch default ({os.cpu_count()} on this machine)"
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(n)
    return f"{n} (OMP_NUM_THREADS, the same for every side)"


# a Streamlit page whose script has finished (the browser benchmarks wait for it after every action)
STREAMLIT_IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
# ...and drawn: the script state turns notRunning while lazily drawn elements (dataframes, Plotly charts,
# selects) are still grey skeletons; a page is drawn when no skeleton or stale element remains and every
# Plotly chart holds its SVG
STREAMLIT_DRAWN = """() => !document.querySelector("[data-testid='stSkeleton'], [data-stale='true']") &&
  [...document.querySelectorAll("[data-testid='stPlotlyChart']")].every(c => c.querySelector('svg')) &&
  [...document.querySelectorAll("[data-testid='stBidiComponentIsolated']")].every(
    c => c.shadowRoot && c.shadowRoot.querySelector('[data-drawn]'))"""  # the graph view marks itself drawn


def wait_drawn(page) -> None:
    """Wait (Playwright page) until the script has finished and the page is drawn, checked twice 100 ms apart
    (a rerun can start between two checks). The browser benchmarks and the app's browser tests stop here."""
    page.wait_for_selector(STREAMLIT_IDLE)
    while True:
        page.wait_for_function(STREAMLIT_DRAWN)
        page.wait_for_timeout(100)
        if page.evaluate(STREAMLIT_DRAWN):
            return


CHROMIUM = "/usr/bin/chromium"  # Debian's; Playwright drives it by executable_path


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def app_server(ws: Path, script: Path | None = None, env: dict | None = None):
    """`workbench app` on the workspace (or `script` served with the same flags), up and answering its health
    check; yields (url, server process) and stops the server on exit."""
    import urllib.request

    from workbench.cli.app import APP, streamlit_command

    port = free_port()
    env = env or {**os.environ, "PYTHONPATH": str(ROOT), "WORKBENCH_WORKSPACE": str(ws)}
    cmd = [sys.executable, "-m", "workbench.cli", "app", "--workspace", str(ws), "--port", str(port)]
    if script is not None:
        cmd = [str(script) if c == str(APP) else c for c in streamlit_command(ws, "127.0.0.1", port)]
    server = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=1).read() == b"ok":
                    break
            except OSError:
                time.sleep(0.2)
        yield url, server
    finally:
        server.terminate()
        server.wait(timeout=30)


@contextmanager
def chromium_page():
    """A headless Chromium page, 1400 x 1000, waiting up to 300 s for anything (2 shared cores, cold imports)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(300_000)
        yield page
        browser.close()


@contextmanager
def app_page(ws: Path, script: Path | None = None):
    """app_server and a chromium_page; yields (url, page)."""
    with app_server(ws, script) as (url, _), chromium_page() as page:
        yield url, page


def add_common_args(ap, out: Path, threads: int | None = None) -> None:
    """--threads and --out, the same in every benchmark (parse --threads, then call set_threads)."""
    ap.add_argument(
        "--threads",
        type=int,
        default=threads,
        help="OMP threads of every side (default: %(default)s, None = torch's); use 1 when other jobs load the CPU",
    )
    ap.add_argument("--out", type=Path, default=out, help="markdown report (default: %(default)s)")


def venv_versions(venv: str, packages: tuple[str, ...]) -> dict:
    code = (
        "import json, importlib.metadata as m\nout = {}\n"
        f"for p in {list(packages)!r}:\n"
        "    try: out[p] = m.version(p)\n"
        "    except m.PackageNotFoundError: out[p] = None\n"
        "print(json.dumps(out))"
    )
    try:
        exe = python(venv)
    except PeerError:
        return {"(venv missing)": str(PYTHON[venv])}
    proc = subprocess.run([str(exe), "-c", code], capture_output=True, text=True, timeout=120)
    return json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {}


def commit() -> str:
    """The commit the results were measured at, marked '+ uncommitted changes' when the tree differs from it."""

    def git(*args: str) -> str:
        proc = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT, timeout=60)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    sha = git("rev-parse", "--short=12", "HEAD")
    if not sha:
        return "unknown (not a git checkout)"
    # results tables do not count: a benchmark that just wrote its own would mark the next one dirty
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "workbench", "bench", ":!bench/results")
    return f"{sha}" + (" + uncommitted changes to workbench/ or bench/" if dirty else "")


def machine_info() -> dict:
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        kb = int(
            next(ln for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal")).split()[1]
        )
        mem = f"{kb / 2**20:.1f} GiB"
    except (OSError, StopIteration):
        pass
    return {
        "commit": commit(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram": mem,
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "load_avg_at_start": " ".join(f"{x:.1f}" for x in os.getloadavg()),
    }


def machine_lines(
    info: dict, versions: dict[str, dict], threads: str, ratios: str = "ratios come from interleaved runs"
) -> list[str]:
    """The header every results table starts with; `ratios` says how this benchmark's comparisons were made."""
    lines = [
        f"- Commit: {info['commit']}",
        f"- Date: {info['date']}; threads per side: {threads}",
        f"- Machine: {info['cpu']}, {info['cores']} cores, {info['ram']} RAM, {info['os']}; load average at "
        f"start {info['load_avg_at_start']} (the CPU was shared with other jobs, so absolute times are noisy; "
        f"{ratios})",
    ]
    for venv, v in versions.items():
        lines.append(f"- {venv} venv: " + ", ".join(f"{k} {val}" for k, val in v.items()))
    return lines


def table(header: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def write_text(path: Path, text: str) -> None:
    """Atomic: a temp file in the same folder, then os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
