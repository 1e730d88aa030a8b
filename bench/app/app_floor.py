"""Where the 300-edge circuit page's time goes (issue #23: drawn in <= 1 s warm), with the app benchmarks' clock
(app_browser.py: from navigation, or from an action on the open page, to the page drawn: harness.wait_drawn).

1. Reload floor: a fresh load of an empty Streamlit page (a one-line script), of a page holding one three-point
   Plotly chart (the circuit page's curve is a Plotly chart), both served with the app's flags, of the app's
   Workspace page, and of the 300-edge circuit page. Each load is split by marks that a script injected before the
   page's own records (TRACE): *boot*, navigation to the websocket open (the client's JS); *script*, the app's
   script state `running` to `notRunning` (the server's run as the browser sees it); *draw*, that to the page
   drawn (lazy chunks such as Plotly's and the data grid's, the graph view's mount, the wait_drawn checks).
2. The page script's parts, cold (once per server: what the caches then keep), timed in a subprocess outside
   Streamlit: imports, reading and parsing the circuit JSON, choosing the drawn edges, the layout and its JSON, the
   curve's figure and its JSON, and the model lookup (run_live loads each model of the workspace once per server).
3. Warm, in the open app: the sidebar link from the Workspace page to the circuit page, switching between two
   GPT-2-shaped circuits with the picker (after one untimed round, so the server has read both), and one budget
   step.
4. Full loads of the demo workspace's pages a researcher opens (issue #34: each drawn in under 1 s), measured in
   one run beside the reference pages of 1. (the floor): the circuit page of its IOI circuit, the feature graph
   page of its attribution graph and the feature page of its Top-k SAE's busiest latent (`full_loads`).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import app_browser as ab  # noqa: E402
import harness  # noqa: E402

TRACE = """(() => { const t = window.__wbt = []; const log = (k) => t.push([k, performance.now()]);
  const W = window.WebSocket;
  window.WebSocket = function (...a) { const s = new W(...a); s.addEventListener('open', () => log('open')); return s; };
  window.WebSocket.prototype = W.prototype; Object.assign(window.WebSocket, W);
  let last = null;
  new MutationObserver(() => { const a = document.querySelector("[data-testid='stApp']");
    const s = a && a.getAttribute('data-test-script-state'); if (s && s !== last) { last = s; log(s); } })
    .observe(document, {subtree: true, childList: true, attributes: true, attributeFilter: ['data-test-script-state']});
})();"""
REFERENCE = {  # reference pages: (file name, script, what the page is drawn on beyond harness.wait_drawn, URL path)
    "empty Streamlit page (one-line script)": ("empty.py", 'import streamlit as st; st.title("empty")', None, "/"),
    "one Plotly chart (3 points)": (
        "plotly.py",
        "import plotly.graph_objects as go\nimport streamlit as st\n\nst.title('plotly')\n"
        "st.plotly_chart(go.Figure(go.Scatter(x=[0, 1, 2], y=[1, 3, 2])), key='c')\n",
        "() => document.querySelector('.js-plotly-plot .scatterlayer .trace')",
        "/",
    ),
    # a multipage app's second page, opened at its own URL: what plain `streamlit run` costs there (the client's
    # page-relative health ping, its 404 and a 100 ms retry), which app/server.py's hosting hook avoids
    "empty page at a page's URL (plain streamlit run)": (
        "twopages.py",
        "import streamlit as st\n\n\ndef first():\n    st.title('first')\n\n\ndef second():\n    st.title('empty')\n\n\n"
        "st.navigation([st.Page(first, default=True), st.Page(second, url_path='second')]).run()\n",
        None,
        "/second",
    ),
}
CIRCUIT_300 = "/circuit?circuit=circuits/bench-gpt2-shaped&cap=300"


def split(page, total: float) -> dict:
    """One load's boot / script / draw seconds from TRACE's marks (first `running`, last `notRunning`)."""
    marks = page.evaluate("() => window.__wbt")
    at = {k: ms / 1000 for k, ms in reversed(marks) if k in ("open", "running")}
    done = max(ms / 1000 for k, ms in marks if k == "notRunning")
    return {"boot": at["open"], "script": done - at["running"], "draw": total - done}


def _loads(page, url: str, drawn: str | None, repeats: int) -> dict:
    cold = ab.load(page, url, drawn)  # cold: the server's caches, the browser's compiled JS
    out = {"load": os.getloadavg()[0], "cold": cold, "reload": [], "boot": [], "script": [], "draw": []}
    for _ in range(repeats):
        t = ab.load(page, url, drawn)
        out["reload"].append(t)
        for k, v in split(page, t).items():
            out[k].append(v)
    return out


def reload_floor(ws: Path, repeats: int) -> dict:
    """Reloads of the reference pages (each on its own server), the Workspace page and the 300-edge circuit page."""
    pages = {"app: Workspace page": ("/", None), "app: circuit page, 300 edges": (CIRCUIT_300, ab.DRAWN)}
    return app_loads(ws, pages, repeats)


def app_loads(ws: Path, pages: dict[str, tuple[str, str | None]], repeats: int) -> dict:
    """Reloads of the reference pages (each on its own server), then of each app page (name -> (path, what it is
    drawn on)) on one server, in one run."""
    out = {}
    folder = harness.WORK / "app-floor"
    folder.mkdir(parents=True, exist_ok=True)
    for name, (fname, script, drawn, path) in REFERENCE.items():
        (folder / fname).write_text(script + "\n")
        with harness.app_page(ws, folder / fname) as (url, page):
            page.add_init_script(TRACE)
            out[name] = _loads(page, url + path, drawn, repeats)
    with harness.app_page(ws) as (url, page):
        page.add_init_script(TRACE)
        for name, (path, drawn) in pages.items():
            out[name] = _loads(page, url + path, drawn, repeats)
    return out


def demo_pages(ws: Path) -> dict[str, tuple[str, str]]:
    """The pages `full_loads` opens on the demo workspace: name -> (path and query, what it is drawn on)."""
    from workbench import browse
    from workbench.features import FeatureStore

    cat = browse.catalog(ws)
    circuit = next(c for c in sorted(cat.circuits, key=lambda c: not c.endswith("/ioi-0")) if "bench-" not in c)
    graph = sorted(cat.feature_graphs, key=lambda g: "ioi" not in g)[0]
    topk = [s for s in cat.saes if s.split("/")[-1].startswith("topk") and s in cat.feature_stores]
    sae = min(topk, key=lambda s: "scaffold" in s)  # the plain Top-k SAE
    unit = int(FeatureStore(ws / sae).units["count"].idxmax())
    return pages(circuit, graph, sae, unit)


FEATURE_DRAWN = (  # the feature page's histogram drawn
    "() => { const c = document.querySelector(\"img[data-chart='histogram']\");"
    " return c && c.complete && c.naturalWidth > 0; }"
)


def pages(circuit: str, graph: str, sae: str, unit: int) -> dict[str, tuple[str, str]]:
    """A circuit page, a feature graph page and a feature page (workspace-relative names): name -> (path and
    query, what it is drawn on)."""
    return {
        f"circuit page ({circuit.split('/')[-1]})": (f"/circuit?circuit={circuit}", ab.DRAWN),
        f"feature graph page ({graph.split('/')[-1]})": (
            f"/feature_graph?graph={graph}",
            "() => { " + ab.VIEW + " return r; }",
        ),
        f"feature page ({sae.split('/')[-1]} latent {unit})": (f"/feature?sae={sae}&unit={unit}", FEATURE_DRAWN),
    }


def full_loads(ws: Path, repeats: int) -> dict:
    """Reloads of the reference pages (the floor) and of each demo page, split as reload_floor's, in one run."""
    return app_loads(ws, demo_pages(ws), repeats)


PAGES_HEAD = "## Full page loads against the floor (issue #34: each page drawn in under 1 s)"


def full_lines(info: dict, threads: str, repeats: int, loads: dict, ws: Path) -> list[str]:
    """The full-loads section: the floor and each page, with what a page adds to the empty page's reload."""
    med = statistics.median
    floor = med(loads[next(iter(REFERENCE))]["reload"])
    rows = [
        [name, ab.verdict(med(t["reload"]), None if name in REFERENCE else 1.0), ab.spread(t["reload"])]
        + [f"{med(t['reload']) - floor:+.2f}"]
        + [f"{med(t[k]):.2f}" for k in ("boot", "script", "draw")]
        + [f"{t['load']:.1f}"]
        for name, t in loads.items()
    ]
    return [
        PAGES_HEAD,
        "",
        *harness.machine_lines(info, {}, threads, "no peers: the goals are absolute times"),
        "",
        f"Fresh loads (navigation to the page drawn: harness.wait_drawn, no skeleton or stale element, every chart "
        f"drawn; the graph view's own drawn mark), median of {repeats} after one cold load, headless Chromium, on the "
        f"demo workspace `{ws.name}`, served as `workbench app` serves it (app/server.py: `st.App` with the hosting "
        "hook); the reference pages (the floor) in the same run, each on its own plain `streamlit run` server with "
        "the app's flags. *over floor*: the median reload minus the empty page's. *boot / script / draw* as in the "
        "section above; *load*: the 1-minute load average as the row started. The app's charts on these pages are "
        "inline SVG (app/figures/svg.py): no page here loads Plotly's chunk.",
        "",
        *harness.table(
            ["page", "reload s (median)", "range", "over floor s", "boot s", "script s", "draw s", "load"], rows
        ),
        "",
        full_reading(loads),
        "",
        "Raw: " + json.dumps({"full_loads": loads}),
    ]


def full_reading(loads: dict) -> str:
    """Each page against the floor in one sentence (what the page adds, and what a Plotly chart alone would)."""
    med = statistics.median
    (empty, one, sub), pages = [loads[k] for k in REFERENCE], {k: v for k, v in loads.items() if k not in REFERENCE}
    e, p, q = med(empty["reload"]), med(one["reload"]), med(sub["reload"])
    said = "; ".join(f"{k} {med(t['reload']):.2f} s ({med(t['reload']) - e:+.2f} s)" for k, t in pages.items())
    return (
        f"Reading: at a load average of {empty['load']:.0f} on 2 cores the floor, an empty Streamlit page, reloads in "
        f"{e:.2f} s and a page with one Plotly chart in {p:.2f} s ({p - e:+.2f} s: what any Plotly chart would add "
        f"to a page's floor); the same empty page at a page's own URL, plain `streamlit run`, in {q:.2f} s (boot "
        f"{med(sub['boot']):.2f} s against {med(empty['boot']):.2f} s); the pages, over the empty page: {said}."
    )


def _to_workspace(page) -> None:
    page.get_by_role("link", name="Workspace", exact=True).click()
    page.wait_for_function("() => !document.querySelector(\"[data-testid='stBidiComponentIsolated']\")")
    harness.wait_drawn(page)


def in_session(ws: Path, repeats: int) -> dict:
    """The warm actions on one open app (one session): sidebar navigation to the circuit page (the view it left
    restored: the 300-edge circuit), circuit switches with the picker, budget steps."""
    out = {}
    with harness.app_page(ws) as (url, page):
        ab.load(page, url + CIRCUIT_300)
        nav = []
        for _ in range(repeats):
            _to_workspace(page)
            t0 = time.perf_counter()
            page.get_by_role("link", name="Circuit", exact=True).click()
            page.wait_for_url(re.compile(r"/circuit"))
            page.wait_for_function(ab.DRAWN)
            harness.wait_drawn(page)
            nav.append(time.perf_counter() - t0)
        out["nav"] = {"load": os.getloadavg()[0], "s": nav}
        box = page.locator("[data-testid='stSelectbox']").filter(has=page.get_by_text("circuit", exact=True))

        def pick(label: str):
            return lambda: (box.click(), page.get_by_role("option", name=label, exact=True).click())

        for label in (ab.SECOND, "bench-gpt2-shaped"):  # untimed: the server reads the second circuit once
            ab.rerun(page, pick(label), ab.GRAPH)
        labels = [ab.SECOND if i % 2 == 0 else "bench-gpt2-shaped" for i in range(repeats)]
        out["switch"] = {"load": os.getloadavg()[0], "s": [ab.rerun(page, pick(x), ab.GRAPH) for x in labels]}
        out["budget"] = {"load": os.getloadavg()[0], "s": ab.budget_moves(page, repeats)}
    return out


def script_parts(circuit: Path) -> dict:
    """The circuit page's script parts, cold, in a fresh interpreter (parts_main below): seconds by part."""
    proc = subprocess.run(
        [sys.executable, __file__, str(circuit)],
        cwd=harness.ROOT,
        env={**os.environ, "PYTHONPATH": str(harness.ROOT), "WORKBENCH_WORKSPACE": str(circuit.parents[2])},
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        raise SystemExit(f"timing the page script's parts failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def parts_main(circuit: str) -> None:
    """What the circuit page runs, part by part, on the circuit file (the cached functions' bodies, uncached)."""
    out, t = {}, time.perf_counter()

    def lap(name: str) -> None:
        nonlocal t
        out[name] = time.perf_counter() - t
        t = time.perf_counter()

    import app.figures.attention  # noqa: F401
    import app.graph_view as gv
    import app.live as live
    import app.state  # noqa: F401
    from app.figures import circuit as cg
    from app.graph_view import layout as gl
    from workbench import browse

    lap("imports (streamlit, pandas, plotly, the app's modules)")
    out["torch imported by then"] = "torch" in sys.modules
    cd = cg.from_record(browse.open_circuit(circuit))
    lap("circuit JSON read, parsed and checked")
    v = cg.choose(cd, None, 300)
    lap("the 300 drawn edges chosen")
    gv.encode(gl.from_view(cd, v), None, None, frozenset())
    lap("layout and the view's JSON")
    cg.curve_figure(cd, v.point)
    lap("curve drawn (an SVG image)")
    try:
        live.spec_of(cd.model_id, "this circuit")
    except live.ModelNotFound:
        pass
    lap("model lookup (loads the workspace's models: torch, the embedded model)")
    print(json.dumps(out))


def lines(floor: dict, parts: dict, session: dict, ws: Path) -> list[str]:
    """The floor, the script's parts and the warm actions as Markdown lines (part of app_bench's graph section)."""
    med = statistics.median
    rows = [
        [name, ab.verdict(med(t["reload"]), 1.0 if "300" in name else None), ab.spread(t["reload"])]
        + [f"{med(t[k]):.2f}" for k in ("boot", "script", "draw")]
        + [f"{t['load']:.1f}"]
        for name, t in floor.items()
    ]
    out = [
        "",
        f"### Where a reload's time goes (workspace `{ws.name}`)",
        "",
        "Fresh loads with the same harness and clock (median of the reloads after one cold load, each page's "
        "server warm), split by marks a script injected before the page's own records: *boot*, navigation to the "
        "websocket open; *script*, the script state running to notRunning (the server's run as the browser sees "
        "it); *draw*, that to the page drawn (Plotly's and the data grid's lazy chunks, the graph view's mount, "
        "harness.wait_drawn's two checks 100 ms apart). *load*: the 1-minute load average as the row started.",
        "",
        *harness.table(
            ["page", "reload s (median)", "range", "boot s", "script s", "draw s", "load"],
            rows,
        ),
        "",
        "The circuit page's script, cold (once per server; later runs find these in Streamlit's caches), timed "
        "part by part in a fresh interpreter (bench/app/app_floor.py): "
        + "; ".join(f"{k} {v:.2f} s" if isinstance(v, float) else f"{k}: {v}" for k, v in parts.items())
        + ".",
        "",
        "### Warm: in the open app (one session)",
        "",
    ]
    acts = {
        "nav": "sidebar link Workspace -> Circuit (the 300-edge view restored), to the page drawn",
        "switch": f"circuit picker, bench-gpt2-shaped <-> {ab.SECOND} (300 edges each), to the new graph drawn",
        "budget": "one edge-budget step (the 300-edge cap), to the graph and the curve's mark redrawn",
    }
    rows = [
        [acts[k], ab.verdict(med(t["s"]), 1.0), ab.spread(t["s"]), len(t["s"]), f"{t['load']:.1f}", "<= 1 s"]
        for k, t in session.items()
    ]
    return out + harness.table(["action", "s (median)", "range", "n", "load", "goal"], rows) + ["", reading(floor)]


def reading(floor: dict) -> str:
    """The floor in one sentence: what a reload of an empty page and of one with a Plotly chart cost here before the
    app does anything, and what the circuit page adds to the empty page (its charts are SVG images, no Plotly)."""
    med = statistics.median
    (empty, one, _), page = [floor[k] for k in REFERENCE], floor["app: circuit page, 300 edges"]
    e, p, c = (med(t["reload"]) for t in (empty, one, page))
    return (
        f"Reading: on this machine an empty Streamlit page reloads in {e:.2f} s and a page with one Plotly chart in "
        f"{p:.2f} s; the 300-edge circuit page (its curve an SVG image) in {c:.2f} s, {c - e:+.2f} s over the empty "
        f"page (boot {med(page['boot']):.2f} s against {med(empty['boot']):.2f} s, script "
        f"{med(page['script']):.2f} s against {med(empty['script']):.2f} s, draw {med(page['draw']):.2f} s against "
        f"{med(empty['draw']):.2f} s)."
    )


if __name__ == "__main__":
    parts_main(sys.argv[1])
