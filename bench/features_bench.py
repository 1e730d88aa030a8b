"""Feature-store benchmark: store build time and memory for a 4k- and a 16k-latent SAE, and the
warm app's time to a rendered feature page and to search results (headless Chromium).

    .venv/bin/python bench/features_bench.py            # full: 1M held-out tokens of the embedded model
    .venv/bin/python bench/features_bench.py --quick    # smoke run: 5k tokens, 256/512 latents, a few minutes

The cache is harvested once into bench/work/features/ws (a workspace, git-ignored) with 91% of its
rows in the held-out split, so the store reads >= --tokens held-out rows (documents the SAEs never
trained on). Top-k SAEs (k=32) are trained briefly on the train split: the build's cost depends on
the width and the number of firings, not on the SAE's quality. Each build runs `workbench features
build` in its own subprocess (peak RSS polled with psutil), once per SAE and once for both SAEs
sharing one pass. The workbench reads cached activations; it never runs the model for the store.
SAEDashboard is not compared here (not done).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

ROOT = harness.ROOT
HOOK = "blocks.2.hook_resid_post"


def run_measured(cmd: list[str], env: dict) -> tuple[float, float, float, str]:
    """(wall seconds, CPU seconds, peak RSS MB of the process tree, output) of a subprocess. CPU time is
    the load-robust figure on a shared machine: other jobs stretch the wall clock, not the CPU time."""
    import resource

    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=ROOT, text=True)
    ps, peak = psutil.Process(proc.pid), 0.0
    while proc.poll() is None:
        try:
            peak = max(peak, sum(p.memory_info().rss for p in [ps, *ps.children(recursive=True)]) / 2**20)
        except psutil.Error:
            pass
        time.sleep(0.1)
    out = proc.stdout.read()
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out[-3000:]}")
    return wall, cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime, peak, out


def prepare(ws: Path, tokens: int, widths: list[int], train_tokens: int) -> dict[int, Path]:
    """The cache and one Top-k SAE per width, made once through workbench.steps (reused when present)."""
    from workbench import steps
    from workbench.cache import ActivationCache
    from workbench.cache.config import HarvestConfig
    from workbench.sae.config import SAEConfig, TrainConfig
    from workbench.workspace import Workspace

    w = Workspace(ws)
    cache_dir = w.path("caches", "tiny-bench")
    need = int(tokens / 0.91) + 2000
    try:
        ok = ActivationCache.open(cache_dir).n_tokens("heldout") >= tokens
    except Exception:
        ok = False
    if not ok:
        shutil.rmtree(cache_dir, ignore_errors=True)
        steps.make_cache(
            w,
            "tiny",
            "synthetic",
            [HOOK],
            HarvestConfig(n_tokens=need, heldout_fraction=0.91),
            name="tiny-bench",
            progress=True,
        )
    saes = {}
    for n in widths:
        run = ws / "saes" / f"w{n}"
        found = sorted(run.glob("*/cfg.json"))
        if not found:
            shutil.rmtree(run, ignore_errors=True)
            steps.train_saes(
                w,
                cache_dir,
                HOOK,
                [SAEConfig("topk", k=32, n_latents=n)],
                TrainConfig(n_tokens=train_tokens, batch_size=min(2048, train_tokens // 40), lr=1e-3, progress=True),
                name=f"w{n}",
            )
            found = sorted(run.glob("*/cfg.json"))
        saes[n] = found[0].parent
    return saes


def build(saes: list[Path], ws: Path, tokens: int, env: dict) -> tuple[float, float, float]:
    for s in saes:
        shutil.rmtree(s / "features", ignore_errors=True)
    cmd = [
        sys.executable,
        "-m",
        "workbench.cli",
        "features",
        "build",
        *map(str, saes),
        "--cache",
        str(ws / "caches" / "tiny-bench"),
        "--workspace",
        str(ws),
        "--tokens",
        str(tokens),
        "--quiet",
    ]
    wall, cpu, peak, _ = run_measured(cmd, env)
    return wall, cpu, peak


def app_timings(ws: Path, sae: Path, env: dict) -> dict:
    """Warm app: seconds from a URL change to a rendered feature page and to search results, and the app's RSS."""
    from playwright.sync_api import sync_playwright

    from workbench.features import FeatureStore

    store = FeatureStore(sae)
    rel = sae.relative_to(ws).as_posix()
    word = store.token(int(store.array("token_counts").argmax()))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench.cli", "app", "--workspace", str(ws), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=ROOT,
    )
    base = f"http://127.0.0.1:{port}"
    out = {}
    try:
        for _ in range(600):
            try:
                if urllib.request.urlopen(f"{base}/_stcore/health", timeout=1).read() == b"ok":
                    break
            except OSError:
                time.sleep(0.2)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"])
            page = browser.new_page()
            page.set_default_timeout(300_000)
            units = [int(u) for u in store.units.sort_values("count", ascending=False)["unit"][:6]]

            def feature(u: int) -> float:
                t = time.perf_counter()
                page.goto(f"{base}/feature?sae={rel}&unit={u}")
                page.get_by_role("heading", name=f"latent {u}").wait_for()
                page.get_by_text("top activating contexts").wait_for()
                page.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']")
                return time.perf_counter() - t

            out["feature_cold_s"] = feature(units[0])
            out["feature_warm_s"] = min(feature(u) for u in units[1:])  # warm: store opened, other units

            def neighbour() -> float:
                link = page.get_by_role("link", name="cosine").first
                target = link.inner_text().split("·")[0].strip()
                t = time.perf_counter()
                link.click()
                page.get_by_role("heading", name=target).wait_for()
                page.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']")
                return time.perf_counter() - t

            out["neighbour_click_s"] = min(neighbour() for _ in range(3))
            page.goto(f"{base}/search?sae={rel}&by=token&q=")
            page.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']")
            times = []
            for q in [word, word, word]:
                box = page.get_by_label("query")
                box.fill("")
                box.press("Enter")
                page.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']")
                t = time.perf_counter()
                box.fill(q)
                box.press("Enter")
                page.get_by_role("link", name=re.compile(r"^open latent")).first.wait_for()
                page.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']")
                times.append(time.perf_counter() - t)
            out["search_token_warm_s"] = min(times)
            browser.close()
        ps = psutil.Process(proc.pid)
        out["app_rss_mb"] = sum(p.memory_info().rss for p in [ps, *ps.children(recursive=True)]) / 2**20
        out["app_imports_torch"] = "torch" in open(f"/proc/{proc.pid}/maps").read()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 5k tokens, widths 256 and 512")
    ap.add_argument(
        "--tokens", type=int, default=1_000_000, help="held-out rows the store reads (default: %(default)s)"
    )
    ap.add_argument("--widths", type=int, nargs="+", default=[4096, 16384], help="SAE widths (default: %(default)s)")
    ap.add_argument(
        "--train-tokens", type=int, default=400_000, help="tokens each SAE trains on (default: %(default)s)"
    )
    ap.add_argument("--threads", type=int, default=None, help="torch/BLAS threads of each side (default: all cores)")
    ap.add_argument("--work", default=str(harness.WORK / "features"), help="scratch folder (default: %(default)s)")
    ap.add_argument(
        "--out", default=str(ROOT / "bench" / "results" / "features.md"), help="report (default: %(default)s)"
    )
    ap.add_argument("--no-app", action="store_true", help="skip the browser timings")
    a = ap.parse_args(argv)
    if a.quick:
        a.tokens, a.widths, a.train_tokens = 5_000, [256, 512], 10_000
    ws = Path(a.work) / ("quick" if a.quick else "ws")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}
    if a.threads:
        env.update(OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads))
    saes = prepare(ws, a.tokens, a.widths, a.train_tokens)
    load_before = os.getloadavg()[0]
    rows = []
    for n, s in saes.items():
        wall, cpu, peak = build([s], ws, a.tokens, env)
        rows.append({"saes": f"{n:,} latents", "seconds": wall, "cpu_seconds": cpu, "peak_rss_mb": peak})
    wall, cpu, peak = build(list(saes.values()), ws, a.tokens, env)
    rows.append(
        {
            "saes": " + ".join(f"{n:,}" for n in saes) + " (one shared pass)",
            "seconds": wall,
            "cpu_seconds": cpu,
            "peak_rss_mb": peak,
        }
    )
    app = {} if a.no_app or not Path("/usr/bin/chromium").exists() else app_timings(ws, saes[max(saes)], env)
    result = {
        "tokens": a.tokens,
        "builds": rows,
        "app": app,
        "widths": a.widths,
        "train_tokens": a.train_tokens,
        "commit": harness.commit(),
        "load": [load_before, os.getloadavg()[0]],
    }
    (Path(a.work) / ("quick.json" if a.quick else "raw.json")).write_text(json.dumps(result, indent=1))
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(report(result, a))
    print(Path(a.out).read_text())
    return result


def report(r: dict, a) -> str:
    import numpy
    import streamlit
    import torch

    lines = [
        "# Feature store and app benchmark",
        "",
        f"- Commit: {r['commit']}",
        f"Load average before/after the timings: {r['load'][0]:.1f} / {r['load'][1]:.1f} on this shared machine. "
        f"{time.strftime('%Y-%m-%d')}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores "
        f"(shared with other jobs), torch {torch.__version__}, numpy {numpy.__version__}, streamlit {streamlit.__version__}"
        f"{', --threads ' + str(a.threads) if a.threads else ''}{' (--quick: smoke run, not the goal setting)' if a.quick else ''}.",
        "",
        f"## Store build: {r['tokens']:,} held-out tokens of the embedded model's cache ({HOOK}), Top-k k=32",
        "",
        "The build reads cached activations (it never runs the model), encodes them with each SAE, and computes "
        "every statistic of the store: counts, histograms, top and true-quantile examples with token windows, "
        "logit effects, decoder-cosine and activation-correlation neighbours, ground-truth labels, the token index.",
        "",
        "| SAEs | wall seconds (whole command, incl. imports) | CPU seconds | tokens per wall second | peak RSS (MB) "
        "| goal: minutes, not hours |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for b in r["builds"]:
        cpu = f"{b['cpu_seconds']:.1f}" if "cpu_seconds" in b else "not measured"
        lines.append(
            f"| {b['saes']} | {b['seconds']:.1f} | {cpu} | {r['tokens'] / b['seconds']:,.0f} | "
            f"{b['peak_rss_mb']:.0f} | {'met' if b['seconds'] < 3600 else 'missed'} |"
        )
    lines += ["", "SAEDashboard (sae-dashboard) on the same SAE and tokens: not run (not done).", ""]
    if r["app"]:
        p = r["app"]
        lines += [
            f"## Warm app, {max(r['widths']):,}-latent SAE, headless Chromium",
            "",
            "| measure | seconds | goal < 1 s |",
            "|---|---:|---|",
        ]
        for k, name in (
            ("feature_cold_s", "first feature page (cold: store opened)"),
            ("feature_warm_s", "feature page, page load of another latent (warm, best of 5)"),
            ("neighbour_click_s", "neighbour link click to rendered page (best of 3)"),
            ("search_token_warm_s", "search by token to results (warm, best of 3)"),
        ):
            goal = "" if k == "feature_cold_s" else ("met" if p[k] < 1 else "missed")
            lines.append(f"| {name} | {p[k]:.2f} | {goal} |")
        lines += [
            "",
            f"App process RSS after these pages: {p['app_rss_mb']:.0f} MB; torch loaded in the app process: "
            f"{'yes' if p['app_imports_torch'] else 'no'} (only the prompt view loads it).",
            "",
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
