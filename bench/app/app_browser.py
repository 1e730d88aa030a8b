"""The app benchmarks' browser clock, shared by app_bench.py and app_floor.py (each imports it; neither imports the
other at module level): JS conditions for the page drawn, a load and a rerun timed to the drawn page, budget-slider
steps, and how a time and its spread are written. Its importer has put bench/ on sys.path (harness)."""

from __future__ import annotations

import time

import harness

# JS conditions on the page: the graph view (a custom component in a shadow root, app/graph_view) and the
# curve (inline SVG, app/figures/svg.py) drawn; the curve's starred point (its data-mark), and the whole graph
# (each compared with its value before an action, CMP; the view stamps data-drawn each time it draws new data)
VIEW = (
    "const h = document.querySelector(\"[data-testid='stBidiComponentIsolated']\");"
    " const r = h && h.shadowRoot && h.shadowRoot.querySelector('.wbg[data-drawn]');"
)
CURVE = "const c = document.querySelector(\"img[data-chart='curve']\");"
DRAWN = "() => { " + CURVE + VIEW + " return r && c && c.complete && c.naturalWidth > 0; }"
MARK = "b => { " + CURVE + " const v = c ? c.dataset.mark : null; return CMP === null ? v : v != null && v !== CMP; }"
GRAPH = (
    "b => { "
    + VIEW
    + " const v = r ? r.getAttribute('data-drawn') : null; return CMP === null ? v : v !== null && v !== CMP; }"
)
SECOND = "bench-gpt2-shaped-b"  # a second GPT-2-shaped circuit (seed 1): the circuit picker's switch (app_floor)


def load(page, url: str, drawn: str | None = DRAWN) -> float:
    """Seconds from navigation to the page drawn (the graph view and the curve included; `drawn`: a JS condition
    a page other than a circuit page is drawn on, None: harness.wait_drawn alone)."""
    t0 = time.perf_counter()
    page.goto(url)
    page.wait_for_selector(harness.STREAMLIT_IDLE)
    if drawn:
        page.wait_for_function(drawn)
    harness.wait_drawn(page)
    return time.perf_counter() - t0


def rerun(page, act, changed: str) -> float:
    """Seconds from a control's change on the open page to the redrawn page (no reload)."""
    before = page.evaluate(changed.replace("CMP", "null"))
    t0 = time.perf_counter()
    act()
    page.wait_for_function(changed.replace("CMP", "b"), arg=before)
    page.wait_for_function(DRAWN)
    harness.wait_drawn(page)
    return time.perf_counter() - t0


def budget_moves(page, n: int) -> list[float]:
    page.get_by_text("edge budget", exact=True).click()
    page.wait_for_selector(harness.STREAMLIT_IDLE)
    page.wait_for_function(DRAWN)
    slider = page.get_by_role("slider").first
    keys = ["ArrowRight", "ArrowLeft"]
    return [rerun(page, lambda i=i: (slider.focus(), slider.press(keys[i % 2])), MARK) for i in range(n)]


def verdict(t: float, goal: float | None) -> str:
    return f"{t:.2f}" if goal is None else f"{t:.2f} ({'met' if t <= goal else 'MISSED'})"


def spread(ts: list[float]) -> str:
    return f"{min(ts):.2f}-{max(ts):.2f}"
