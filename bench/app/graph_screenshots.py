"""The screenshots in docs/graph/, retaken in headless Chromium at a 1400 x 900 window on a demo workspace
(`workbench demo --no-serve`), through the real app (`workbench app`), each named as docs/graph/README.md lists it.

    .venv/bin/python bench/app/graph_screenshots.py --workspace WS [--out docs/graph] [--only NAME ...]

On the demo's own artifacts: the feature graph page's default graph (circuits/features-ioi: pinned, pruned and a
drag-to-group made with the mouse), the attribution graph circuits/graph-ioi at 100 and 1,000 links drawn, the IOI
circuit circuits/ioi-0 as saved and at its full budget capped at 300 edges, and the Compare page's diff of it with the
sparse-attention model's circuit. Synthetic, for their size: a random
5,000-node feature graph and a 64-token one (app_bench.feature_graph) uploaded on the feature graph page, and the
GPT-2-shaped circuit app_bench.gpt2_shaped_circuit writes into the workspace at 2,000 edges. Prints one line per
file: its name, the URL and what the view said it drew (data-edges, labels shown).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # app_bench, harness
import app_bench  # noqa: E402
import harness  # noqa: E402

WINDOW = {"width": 1400, "height": 900}
DRAWN_JS = """() => { const r = document.querySelector("[data-testid='stBidiComponentIsolated']")?.shadowRoot;
  const w = r && r.querySelector('.wbg');
  return w ? {edges: w.getAttribute('data-edges'), links: w.getAttribute('data-links-drawn'),
    labels: r.querySelectorAll('.wbg-labels text').length, nodes: r.querySelectorAll('[data-node-id]').length} : null; }"""


def least_influential(ws: Path, rel: str, k: int = 3) -> list[str]:
    """The k features and error nodes the file ranks last by cumulative influence (node pruning hides them first)."""
    d = json.loads((ws / rel / "graph.json").read_text())
    inner = [n for n in d["nodes"] if n["feature_type"] in ("cross layer transcoder", "mlp reconstruction error")]
    ranked = sorted((n for n in inner if n.get("influence") is not None), key=lambda n: n["influence"])
    return [n["node_id"] for n in ranked[-k:]]


def same_position(pins: list[str]) -> tuple[str, str]:
    """Two pins at one token position where there are (a group's usual shape: one concept at one token)."""
    pos = [p.rsplit("_", 1)[-1] for p in pins]
    pair = next(((a, b) for i, a in enumerate(pins) for b in pins[i + 1 :] if pos[pins.index(b)] == pos[i]), None)
    return pair or (pins[0], pins[1])


def drag(page, a: str, b: str) -> None:
    """page.mouse: press on node a, move onto node b, release (drag-to-group)."""
    boxes = [page.locator(f"[data-node-id='{n}'] rect").bounding_box() for n in (a, b)]
    (x0, y0), (x1, y1) = [(r["x"] + r["width"] / 2, r["y"] + r["height"] / 2) for r in boxes]
    page.mouse.move(x0, y0)
    page.mouse.down()
    page.mouse.move(x1, y1, steps=8)
    page.mouse.up()


def open_page(page, url: str) -> None:
    page.goto(url)
    harness.wait_drawn(page)


def upload(page, url: str, graph: dict, name: str) -> None:
    """A graph JSON uploaded on the feature graph page (its expander), drawn."""
    path = Path(tempfile.mkdtemp()) / name
    path.write_text(json.dumps(graph))
    open_page(page, f"{url}/feature_graph")
    page.get_by_text("upload a circuit-tracer / Neuronpedia graph JSON").click()
    page.locator("input[type=file]").set_input_files(str(path))
    page.wait_for_function("new URLSearchParams(location.search).get('graph') === 'uploaded-graph'")
    harness.wait_drawn(page)


def canvas(page, url: str, ws: Path) -> str:
    """The whole window: the demo's default graph, its three least influential nodes pinned, pruned at node 0.5 /
    edge 0.8, two pins dragged into one group."""
    pins = least_influential(ws, "circuits/graph-ioi")
    query = f"graph=circuits%2Fgraph-ioi&pinned={','.join(pins)}&node_threshold=0.5&edge_threshold=0.8"
    open_page(page, f"{url}/feature_graph?{query}")
    drag(page, *same_position(pins))
    page.wait_for_function("(new URLSearchParams(location.search).get('groups') || '').includes('group 1')")
    harness.wait_drawn(page)
    page.mouse.move(2, 2)  # the pointer off the stage: no tip over the graph
    page.get_by_role("heading", name="Feature graph").scroll_into_view_if_needed()
    return "window"


def links(cap: int):
    def shot(page, url: str, ws: Path) -> str:
        open_page(page, f"{url}/feature_graph?graph=circuits%2Fgraph-ioi&links={cap}")
        return ".wbg"

    return shot


def ioi_saved(page, url: str, ws: Path) -> str:
    open_page(page, f"{url}/circuit?circuit=circuits%2Fioi-0")
    select(page, page.locator(".wbg-k-head").first.get_attribute("data-node-id"))
    return ".wbg"


def select(page, nid: str) -> None:
    """A node clicked (its details in the view's panel), the pointer then moved off: no tip over the graph."""
    page.locator(f"[data-node-id='{nid}'] rect").click()
    page.wait_for_function(f"new URLSearchParams(location.search).get('node') === {json.dumps(nid)}")
    harness.wait_drawn(page)
    page.mouse.move(2, 2)


def ioi_300(page, url: str, ws: Path) -> str:
    open_page(page, f"{url}/circuit?circuit=circuits%2Fioi-0&view=budget&budget=1.0&cap=300")
    return ".wbg"


def diff(page, url: str, ws: Path) -> str:
    open_page(page, f"{url}/compare?circuit=circuits%2Fioi-0")
    return ".wbg"


def random_5000(page, url: str, ws: Path) -> str:
    upload(page, url, app_bench.feature_graph(5000), "random-5000.json")
    return ".wbg"


def tokens_64(page, url: str, ws: Path) -> str:
    upload(page, url, app_bench.feature_graph(400, n_layers=4, n_pos=64), "random-64-tokens.json")
    return ".wbg"


def gpt2_shape(page, url: str, ws: Path) -> str:
    open_page(page, f"{url}/circuit?circuit=circuits%2Fbench-gpt2-shaped&cap=2000")
    select(page, "a5.h3")
    return ".wbg"


SHOTS = {
    "feature-graph-canvas.png": canvas,
    "feature-graph-100-links.png": links(100),
    "feature-graph-1000-links.png": links(1000),
    "ioi-9-edges.png": ioi_saved,
    "ioi-300-edges.png": ioi_300,
    "diff-base-vs-sparse.png": diff,
    "random-5000-nodes-bounded.png": random_5000,
    "feature-graph-64-tokens.png": tokens_64,
    "gpt2-shape-2000-edges.png": gpt2_shape,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workspace", type=Path, required=True, help="a demo workspace (workbench demo --no-serve)")
    ap.add_argument("--out", type=Path, default=harness.ROOT / "docs" / "graph", help="folder of the PNGs")
    ap.add_argument("--only", nargs="*", choices=sorted(SHOTS), help="these files only (default: all)")
    a = ap.parse_args()
    names = a.only or list(SHOTS)
    if "gpt2-shape-2000-edges.png" in names and not (a.workspace / "circuits" / "bench-gpt2-shaped").is_dir():
        app_bench.gpt2_shaped_circuit(a.workspace)
    a.out.mkdir(parents=True, exist_ok=True)
    with harness.app_page(a.workspace) as (url, page):
        page.set_viewport_size(WINDOW)
        for name in names:
            what = SHOTS[name](page, url, a.workspace)
            drawn = page.evaluate(DRAWN_JS)
            if what == "window":
                page.screenshot(path=str(a.out / name))
            else:
                page.locator(what).screenshot(path=str(a.out / name))
            print(json.dumps({"file": name, "url": page.url.replace(url, ""), "drawn": drawn}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
