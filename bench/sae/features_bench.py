"""Feature-store benchmark: store build time and memory for a 4k- and a 16k-latent SAE against SAEDashboard
on the same SAEs and tokens, and the warm app's time to a rendered feature page and to search results.

    .venv/bin/python bench/sae/features_bench.py            # full: 1M held-out tokens of the embedded model
    .venv/bin/python bench/sae/features_bench.py --quick    # smoke run: 5k tokens, 256/512 latents, a few minutes

The cache is harvested once into bench/work/features/ws (a workspace, git-ignored) by `workbench cache`
in a measured subprocess, with 91% of its rows in the held-out split, so the store reads >= --tokens
held-out rows (documents the SAEs never trained on). Top-k SAEs (k=32) are trained briefly on the
train split: the build's cost depends on the width and the number of firings, not on the SAE's
quality. Each build runs `workbench features build` in its own subprocess (peak RSS polled with
psutil), once per SAE and once for both SAEs sharing one pass. The workbench reads cached
activations; it never runs the model for the store, so it is timed from the cache and with the
harvest added. SAEDashboard (bench/.venv-dash, peers/saedashboard_features.py) runs the model itself,
once per batch of features, or reads its own activation cache after the first batch: both are timed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

ROOT = harness.ROOT
HOOK = "blocks.2.hook_resid_post"
DASH_BATCH = 256  # SAEDashboard's default minibatch_size_features: features per pass over the tokens


def cpu_seconds() -> float:
    """CPU seconds used so far by this process's children (the app server, Playwright's driver, Chromium).
    Robust on a shared machine where other jobs stretch the wall clock."""
    total = 0.0
    for p in psutil.Process().children(recursive=True):
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


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


def prepare(ws: Path, tokens: int, widths: list[int], train_tokens: int, env: dict) -> tuple[dict[int, Path], dict]:
    """The cache and one Top-k SAE per width, made once (reused when present). The cache is harvested by
    `workbench cache` in a measured subprocess (the model's forward passes: the harvest side of the
    comparison); its timing is kept beside the cache for later runs."""
    from workbench.cache import ActivationCache
    from workbench.corpus.base import SPLITS
    from workbench.sae.config import SAEConfig, TrainConfig
    from workbench.steps.dictionaries import train_saes
    from workbench.workspace import Workspace

    w = Workspace(ws)
    cache_dir = w.path("caches", "tiny-bench")
    timing = ws / "harvest_timing.json"
    need = int(tokens / 0.91) + 2000
    try:
        ok = ActivationCache.open(cache_dir).n_tokens("heldout") >= tokens and timing.is_file()
    except Exception:
        ok = False
    if not ok:
        shutil.rmtree(cache_dir, ignore_errors=True)
        cmd = [sys.executable, "-m", "workbench.cli", "cache", "--quiet", "--workspace", str(ws), "--hooks", HOOK]
        cmd += ["--tokens", str(need), "--heldout-fraction", "0.91", "--name", "tiny-bench"]
        wall, cpu, peak, _ = run_measured(cmd, env)
        rows = {s: ActivationCache.open(cache_dir).n_tokens(s) for s in SPLITS}
        rec = {"seconds": wall, "cpu_seconds": cpu, "peak_rss_mb": peak, "rows": rows, "commit": harness.commit()}
        timing.write_text(json.dumps(rec, indent=1))
    saes = {}
    for n in widths:
        run = ws / "saes" / f"w{n}"
        found = sorted(run.glob("*/cfg.json"))
        if not found:
            shutil.rmtree(run, ignore_errors=True)
            train_saes(
                w,
                cache_dir,
                HOOK,
                [SAEConfig("topk", k=32, n_latents=n)],
                TrainConfig(n_tokens=train_tokens, batch_size=min(2048, train_tokens // 40), lr=1e-3, progress=True),
                name=f"w{n}",
            )
            found = sorted(run.glob("*/cfg.json"))
        saes[n] = found[0].parent
    return saes, json.loads(timing.read_text())


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


def dashboard(ws: Path, sae: Path, n_latents: int, tokens: int, a) -> dict:
    """SAEDashboard's feature data for the same SAE and tokens: the first a.dash_batches batches of
    DASH_BATCH features, once running the model every batch and once with its activation cache."""
    import numpy as np

    from workbench.cache import ActivationCache
    from workbench.features import FeatureStore

    cache = ActivationCache.open(ws / "caches" / "tiny-bench")
    seq, pos = cache.seq_index("heldout")[:tokens], cache.positions("heldout")[:tokens]
    d = Path(a.work) / "dash"
    d.mkdir(parents=True, exist_ok=True)
    np.save(d / "tokens.npy", np.asarray(cache.sequences("heldout")[: int(seq[-1]) + 1]))  # the store's sequences
    check = np.arange(min(tokens, 2048))
    np.save(d / "check_rows.npy", cache.rows(HOOK, check, split="heldout").numpy())
    np.save(d / "check_seqpos.npy", np.stack([seq[check], pos[check]], 1).astype(np.int64))
    cfg = {
        "model_dir": str(ROOT / "data" / "models" / "tiny"),
        "sae_dir": str(sae),
        "tokens": str(d / "tokens.npy"),
        "check_rows": str(d / "check_rows.npy"),
        "check_seqpos": str(d / "check_seqpos.npy"),
        "hook": HOOK,
        "n_latents": n_latents,
        "batch_features": DASH_BATCH,
        "n_batches": min(a.dash_batches, math.ceil(n_latents / DASH_BATCH)),
        "minibatch_size_tokens": 64,
        "ignore_tokens": cache.manifest["config"]["special_ids"],
    }
    out = {}
    for mode, acts in (("model", None), ("cached", str(d / "acts"))):
        try:
            r = harness.run_side(
                "dash", "saedashboard_features.py", {**cfg, "cache_dir": acts}, f"dash_{n_latents}_{mode}", 6 * 3600
            )
        except harness.PeerError as e:
            out[mode] = {"error": e.summary}
            continue
        n_all, bs = math.ceil(n_latents / DASH_BATCH), r["batch_seconds"]
        first, rest = (bs[0], bs[1:]) if mode == "cached" and len(bs) > 1 else (None, bs)
        r["estimate_s"] = (first or 0.0) + (n_all - (first is not None)) * statistics.median(rest)
        r["n_batches_all"] = n_all
        store_max = FeatureStore(sae).units["max"].to_numpy()[: len(r["feature_max"])]
        rel = np.abs(np.asarray(r["feature_max"]) - store_max) / np.maximum(store_max, 1e-6)
        r["max_within_2pct"] = float((rel < 0.02).mean())
        r["max_below_store"] = float((np.asarray(r.pop("feature_max")) < store_max * 0.98).mean())
        out[mode] = r
        shutil.rmtree(d / "acts", ignore_errors=True)
    return out


def app_timings(ws: Path, sae: Path, env: dict) -> dict:
    """Warm app: wall and CPU seconds to a rendered feature page (full page load, and navigating inside the
    app) and to search results, and the app's RSS."""
    with harness.app_server(ws, env=env) as (base, server):
        with harness.chromium_page() as page:
            out = page_timings(page, base, sae.relative_to(ws).as_posix(), sae)
        ps = psutil.Process(server.pid)
        out["app_rss_mb"] = sum(p.memory_info().rss for p in [ps, *ps.children(recursive=True)]) / 2**20
        out["app_imports_torch"] = "torch" in open(f"/proc/{server.pid}/maps").read()
    return out


def page_timings(page, base: str, rel: str, sae: Path) -> dict:
    """The best of a few runs of each: the first feature page, a reload of another, typing a latent's index,
    a neighbour's link, and a token search (wall and CPU seconds of the browser and the app server)."""
    from workbench.features import FeatureStore

    store = FeatureStore(sae)
    word = store.token(int(store.array("token_counts").argmax()))
    units = [int(u) for u in store.units.sort_values("count", ascending=False)["unit"][:8]]
    out = {}

    def timed(act, done) -> tuple[float, float]:
        """(wall seconds, CPU seconds of the browser and the app server) from act() until done() returns."""
        c0, t0 = cpu_seconds(), time.perf_counter()
        act()
        done()
        harness.wait_drawn(page)
        return time.perf_counter() - t0, cpu_seconds() - c0

    def best(name: str, runs: list[tuple[float, float]]) -> None:
        out[name + "_s"], out[name + "_cpu_s"] = min(runs)

    def heading(u: int):
        return lambda: page.get_by_role("heading", name=f"latent {u}", exact=False).wait_for()

    def reload(u: int) -> tuple[float, float]:
        return timed(lambda: page.goto(f"{base}/feature?sae={rel}&unit={u}"), heading(u))

    best("feature_cold", [reload(units[0])])  # the app's first page: store opened, frontend loaded
    best("feature_reload", [reload(u) for u in units[1:4]])  # a full page load of another latent

    def type_unit(u: int) -> tuple[float, float]:
        box = page.get_by_label(re.compile(r"^latent index"))
        return timed(lambda: (box.fill(str(u)), box.press("Enter")), heading(u))

    best("feature_nav", [type_unit(u) for u in units[4:7]])  # in the app: type another latent's index

    def neighbour() -> tuple[float, float]:
        link = page.get_by_role("link", name="cosine").first
        target = link.inner_text().split("·")[0].strip()
        return timed(link.click, lambda: page.get_by_role("heading", name=target).wait_for())

    best("neighbour_click", [neighbour() for _ in range(3)])
    page.goto(f"{base}/search?sae={rel}&by=token&q=")
    page.wait_for_selector(harness.STREAMLIT_IDLE)
    box = page.get_by_label("query")

    def search(q: str) -> tuple[float, float]:
        box.fill("")
        box.press("Enter")
        page.wait_for_selector(harness.STREAMLIT_IDLE)
        return timed(
            lambda: (box.fill(q), box.press("Enter")),
            lambda: page.get_by_role("link", name=re.compile(r"^open latent")).first.wait_for(),
        )

    best("search_token", [search(word) for _ in range(3)])
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
    ap.add_argument("--work", default=str(harness.WORK / "features"), help="scratch folder (default: %(default)s)")
    harness.add_common_args(ap, ROOT / "bench" / "results" / "features.md")
    ap.add_argument("--no-app", action="store_true", help="skip the browser timings")
    ap.add_argument("--no-dash", action="store_true", help="skip SAEDashboard (bench/.venv-dash)")
    ap.add_argument(
        "--dash-batches",
        type=int,
        default=2,
        help=f"SAEDashboard batches of {DASH_BATCH} features measured per SAE and way; the rest is "
        "extrapolated (default: %(default)s)",
    )
    a = ap.parse_args(argv)
    commit = harness.commit()  # the code measured: at the start, not when the report is written
    if a.quick:
        a.tokens, a.widths, a.train_tokens = 5_000, [256, 512], 10_000
    ws = Path(a.work) / ("quick" if a.quick else "ws")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}
    if a.threads:
        env.update(OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads))
    harness.set_threads(a.threads)  # the SAEDashboard side's threads
    saes, harvest = prepare(ws, a.tokens, a.widths, a.train_tokens, env)
    load_before = os.getloadavg()[0]
    rows = []
    for n, s in saes.items():
        wall, cpu, peak = build([s], ws, a.tokens, env)
        rows.append({"saes": f"{n:,} latents", "width": n, "seconds": wall, "cpu_seconds": cpu, "peak_rss_mb": peak})
    if len(saes) > 1:
        wall, cpu, peak = build(list(saes.values()), ws, a.tokens, env)
        rows.append(
            {
                "saes": " + ".join(f"{n:,}" for n in saes) + " (one shared pass)",
                "seconds": wall,
                "cpu_seconds": cpu,
                "peak_rss_mb": peak,
            }
        )
    dash = {} if a.no_dash else {n: dashboard(ws, sae, n, a.tokens, a) for n, sae in saes.items()}
    app = {} if a.no_app or not Path("/usr/bin/chromium").exists() else app_timings(ws, saes[max(saes)], env)
    result = {
        "tokens": a.tokens,
        "harvest": harvest,
        "builds": rows,
        "dash": dash,
        "dash_versions": harness.venv_versions("dash", ("sae-dashboard", "sae-lens", "transformer-lens", "torch")),
        "app": app,
        "widths": a.widths,
        "train_tokens": a.train_tokens,
        "commit": commit,
        "load": [load_before, os.getloadavg()[0]],
    }
    (Path(a.work) / ("quick.json" if a.quick else "raw.json")).write_text(json.dumps(result, indent=1))
    text = report(result, a)
    harness.write_text(a.out, text)
    print(text)
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
    h = r["harvest"]
    lines += [
        "",
        f"The cache was harvested once by `workbench cache` ({h['rows']['heldout']:,} held-out + {h['rows']['train']:,} "
        f"train rows of {HOOK}, the model run to block 2): {h['seconds']:.1f} s wall, {h['cpu_seconds']:.1f} CPU s "
        f"(at {h['commit']}).",
        "",
    ]
    lines += dash_section(r) if r["dash"] else ["SAEDashboard: not run (--no-dash).", ""]
    if r["app"]:
        p = r["app"]
        lines += [
            f"## Warm app, {max(r['widths']):,}-latent SAE, headless Chromium",
            "",
            "Wall seconds from the action to the rendered page (the page's heading there, Streamlit's script "
            "finished, no skeleton or stale element left, every chart's SVG drawn, checked twice 100 ms apart), best of 3, and the CPU seconds the browser and the app server spent on it (robust to other "
            "jobs on the machine). A full page load reloads Streamlit's whole frontend; navigating inside the app "
            "(typing an index, clicking a neighbour or search result) is the warm path a user takes.",
            "",
            "| measure | wall seconds | CPU seconds (browser + server) | goal < 1 s |",
            "|---|---:|---:|---|",
        ]
        for k, name in (
            ("feature_cold", "first feature page (cold: store opened, frontend loaded)"),
            ("feature_reload", "feature page, full page load of another latent"),
            ("feature_nav", "feature page, another latent's index typed in the app"),
            ("neighbour_click", "neighbour link click to its rendered feature page"),
            ("search_token", "search by token to results"),
        ):
            goal = "" if k == "feature_cold" else ("met" if p[k + "_s"] < 1 else "missed")
            lines.append(f"| {name} | {p[k + '_s']:.2f} | {p[k + '_cpu_s']:.2f} | {goal} |")
        lines += [
            "",
            f"App process RSS after these pages: {p['app_rss_mb']:.0f} MB; torch loaded in the app process: "
            f"{'yes' if p['app_imports_torch'] else 'no'} (only the prompt view loads it).",
            "",
        ]
    return "\n".join(lines)


def dash_section(r: dict) -> list[str]:
    """SAEDashboard against the workbench, per SAE: both ways on each side, the ratios, the checks."""
    v = r["dash_versions"]
    builds = {b["width"]: b for b in r["builds"] if "width" in b}
    harvest = r["harvest"]["seconds"]
    lines = [
        f"## SAEDashboard on the same SAEs and tokens (sae-dashboard {v.get('sae-dashboard')}, sae-lens "
        f"{v.get('sae-lens')}, transformer-lens {v.get('transformer-lens')}, bench/.venv-dash)",
        "",
        "SAEDashboard's `SaeVisRunner.run` runs the model (up to the hook's block) over every token sequence once "
        f"per batch of {DASH_BATCH} features (its default `minibatch_size_features`), encodes with the SAE and "
        "computes each feature's statistics, histograms, logit tables, top and interval examples. The workbench "
        "reads cached activations: its build is timed from the cache, and with the cache's harvest added (both "
        "sides then run the model). SAEDashboard is timed both ways too: running the model every batch (its "
        "default), and with its own activation cache (`cache_dir`: the first batch runs the model and saves, the "
        "later batches read). Tokens: the held-out sequences holding the store's rows, special tokens masked "
        "(`ignore_tokens`) as the cache leaves them out. Features: the first batches only; the rest is "
        "extrapolated per batch (every batch does the same work: one pass over all tokens), stated per row.",
        "",
        "| SAE | workbench from cache (s) | workbench harvest + build (s) | SAEDashboard, model every batch (s) "
        "| SAEDashboard, its activation cache (s) | measured | ratio: SAEDashboard (model) / workbench (cache) "
        "| ratio: SAEDashboard (best way) / workbench (harvest + build) | goal >= 10x |",
        "|---|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    notes = []
    for n, d in r["dash"].items():
        n, b = int(n), builds[int(n)]["seconds"]
        failed = [f"- {n:,} latents, {m}: failed: {x['error']}" for m, x in d.items() if "error" in x]
        if failed:
            notes += failed
            continue
        dm, dc = d["model"], d["cached"]
        best = min(dm["estimate_s"], dc["estimate_s"])
        r1, r2 = dm["estimate_s"] / b, best / (b + harvest)
        measured = f"{len(dm['batch_seconds'])} + {len(dc['batch_seconds'])} of {dm['n_batches_all']} batches"
        lines.append(
            f"| {n:,} latents | {b:.1f} | {b + harvest:.1f} | {dm['estimate_s']:,.0f} | {dc['estimate_s']:,.0f} | "
            f"{measured} | {r1:.1f}x | {r2:.1f}x | {'met' if min(r1, r2) >= 10 else 'missed'} |"
        )
        for m, x in (("model every batch", dm), ("activation cache", dc)):
            notes.append(
                f"- {n:,} latents, {m}: batches of {x['batch_features']} features took "
                + ", ".join(f"{t:.1f}" for t in x["batch_seconds"])
                + f" s over {x['n_tokens']:,} tokens ({x['n_seq']:,} sequences); peak RSS {x['rss_peak_mb']:,.0f} MB; "
                f"max activation within 2% of the store's for {100 * x['max_within_2pct']:.0f}% of the measured "
                f"features and more than 2% below it for {100 * x['max_below_store']:.0f}% (SAEDashboard's maximum "
                "also covers the special-token positions and the rest of the last sequence); its model reproduces "
                f"the cached activations to {x['model_check_rel_err']:.1e} (relative; the cache is float16)."
                + (
                    " CPU seconds per batch: " + ", ".join(f"{t:.1f}" for t in x["batch_cpu_seconds"])
                    if "batch_cpu_seconds" in x
                    else ""
                )
            )
    return lines + ["", *notes, ""]


if __name__ == "__main__":
    main()
