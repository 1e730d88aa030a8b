"""The graph view alone in a real browser (tests/app/graph_page.py, headless Chromium): hover details without a
server round trip (a node, and an edge on the canvas), click selection, pins and a group in the URL and back
after a reload, the pinned subgraph with its supernode, a note, a diff with its counts, a 5,000-node upload
bounded; no request leaves 127.0.0.1."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from test_browser import (  # noqa: F401
    CHROMIUM,
    REPO,
    assert_offline,
    browser_page,
    free_port,
    pytestmark,
    serve,
    settle,
)

from app.figures import circuit as cg
from app.graph_view import layout
from workbench import browse

OLD = REPO / "tests" / "circuits" / "old_files" / "circuit.json"  # a 7-edge circuit of a 2-layer, 2-head model


@contextmanager
def page_server(tmp_path: Path, **env):
    port = free_port()
    cmd = [sys.executable, "-m", "streamlit", "run", str(REPO / "tests" / "app" / "graph_page.py")]
    cmd += ["--server.port", str(port), "--server.address", "127.0.0.1", "--server.headless", "true"]
    cmd += ["--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"]
    with serve(cmd, port, tmp_path / "page.log", **env) as url:
        yield url


def node(page, nid: str):
    return page.locator(f"[data-node-id='{nid}'] rect")


def query(page) -> dict:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


def wait_param(page, name: str, want: str) -> None:
    page.wait_for_function(f"new URLSearchParams(location.search).get({name!r}) === {want!r}", timeout=60_000)


def edge_point(data: dict) -> tuple[dict, tuple[float, float]]:
    """An edge and the middle of its curve (graph px; the view's cubic: layout.py's p and lift) off every node."""
    for e in data["edges"]:
        x0, y0, x1, y1 = e["p"]
        dx = max(30.0, abs(x1 - x0) / 2)
        c = [(x0, y0), (x0 + dx, y0 - e["lift"]), (x1 - dx, y1 - e["lift"]), (x1, y1)]
        x = (c[0][0] + 3 * c[1][0] + 3 * c[2][0] + c[3][0]) / 8
        y = (c[0][1] + 3 * c[1][1] + 3 * c[2][1] + c[3][1]) / 8
        if not any(abs(x - n["x"]) < n["w"] / 2 + 8 and abs(y - n["y"]) < n["h"] / 2 + 8 for n in data["nodes"]):
            return e, (x, y)
    raise AssertionError("every edge's middle lies on a node")


def hover_edge(page, data: dict) -> dict:
    """Move the pointer onto an edge drawn on the view's canvas (through the view's pan/zoom transform)."""
    e, (x, y) = edge_point(data)
    box = page.locator(".wbg-svg").bounding_box()
    t = page.locator(".wbg-svg > g").first.get_attribute("transform")  # translate(x,y) scale(k)
    tx, ty, k = (float(v) for v in t.replace("translate(", "").replace(") scale(", ",").rstrip(")").split(","))
    page.mouse.move(box["x"] + tx + x * k, box["y"] + ty + y * k)
    return e


def test_hover_pin_group_note_reload(tmp_path):
    from playwright.sync_api import expect

    env = {"PYTHONPATH": str(REPO), "GRAPH_CIRCUIT": str(OLD)}
    requests: list[str] = []
    with page_server(tmp_path, **env) as url, browser_page(requests) as page:
        page.goto(url)
        settle(page)
        node(page, "a1.h0").hover()  # hover: details and strongest edges, drawn in the browser
        tip = page.get_by_test_id("graph-tip")
        expect(tip).to_contain_text("a1.h0 · head")
        expect(tip).to_contain_text("strongest in: from")
        cd = cg.from_record(browse.open_circuit(OLD))
        data = layout.to_data(layout.from_view(cd, cg.choose(cd)))
        e = hover_edge(page, data)  # an edge on the canvas: found under the pointer, its weight in the tip
        names = [data["nodes"][e["s"]]["id"], data["nodes"][e["t"]]["id"]]
        expect(tip).to_contain_text(f"{names[0]} → {names[1]}")
        expect(tip).to_contain_text("weight")
        node(page, "a1.h0").click(position={"x": 9, "y": 7})  # near a corner of the node: not only its centre selects
        details = page.get_by_test_id("graph-details")
        expect(details.locator("h4")).to_have_text("a1.h0 · head")
        expect(page.get_by_text("clicked: a1.h0")).to_be_visible()
        details.get_by_role("button", name="pin").click()
        wait_param(page, "pinned", "a1.h0")
        node(page, "a0.h0").click(modifiers=["Shift"])  # shift-click pins without opening
        wait_param(page, "pinned", "a1.h0,a0.h0")
        settle(page)
        page.reload()
        settle(page)
        expect(page.locator(".wbg-pinned")).to_have_count(2)
        page.get_by_placeholder("group name").fill("prev-token pair")
        node(page, "a1.h0").click(modifiers=["Control"])  # a group takes the pins selected for it (ctrl-click)
        node(page, "a0.h0").click(modifiers=["Control"])
        page.get_by_role("button", name="group selected pins (2)").click()
        wait_param(page, "groups", '[["prev-token pair","a1.h0","a0.h0"]]')
        page.get_by_role("button", name="pinned subgraph (2)").click()
        expect(page.locator("[data-node-id='group:prev-token pair']")).to_have_count(1)
        expect(page.get_by_test_id("graph-hidden")).to_contain_text("pinned subgraph:")
        page.get_by_role("button", name="full graph").click()
        node(page, "a0.h0").click()
        details.locator("textarea").fill("attends to the previous token")
        details.get_by_role("button", name="save note").click()
        wait_param(page, "notes", '{"a0.h0":"attends to the previous token"}')
        assert query(page)["pinned"] == "a1.h0,a0.h0"
    assert_offline(requests)


def test_diff_counts(tmp_path):
    from playwright.sync_api import expect

    env = {"PYTHONPATH": str(REPO), "GRAPH_CIRCUIT": str(OLD), "GRAPH_DIFF": str(OLD), "GRAPH_DIFF_FRACTION": "1.0"}
    requests: list[str] = []
    with page_server(tmp_path, **env) as url, browser_page(requests) as page:
        page.goto(url)
        settle(page)
        expect(page.locator(".wbg-diff")).to_contain_text("only in base")
    assert_offline(requests)


def test_a_5000_node_upload_draws_a_bounded_subgraph_and_says_what_it_hides(tmp_path):
    """A 5,000-node circuit-tracer / Neuronpedia graph JSON (random weights: its size is the point) uploaded on
    the page: the view draws layout.MAX_NODES of its nodes, states what it hides, and still answers a hover."""
    import json

    from playwright.sync_api import expect

    from bench.app.app_bench import feature_graph

    d = feature_graph(5000)
    path = tmp_path / "random-5000.json"
    path.write_text(json.dumps(d))
    bounded = layout.bound(layout.from_neuronpedia(d))
    requests: list[str] = []
    with page_server(tmp_path, PYTHONPATH=str(REPO), GRAPH_CIRCUIT=str(OLD)) as url, browser_page(requests) as page:
        page.goto(url)
        settle(page)
        page.locator("input[type=file]").set_input_files(str(path))
        shown = page.get_by_test_id("graph-shown")
        expect(shown).to_have_text(bounded.shown)
        assert bounded.shown.startswith(
            f"showing {layout.MAX_NODES} of 5,000 nodes; {5000 - layout.MAX_NODES:,} hidden"
        )
        expect(page.locator("[data-node-id]")).to_have_count(layout.MAX_NODES)
        assert page.locator(".wbg").get_attribute("data-edges") == str(len(bounded.edges))
        in_view = set(
            page.evaluate(  # the view opens a wide upward graph at a readable zoom: part of it is off the stage
                """() => { const root = document.querySelector("[data-testid='stBidiComponentIsolated']").shadowRoot;
                     const s = root.querySelector('.wbg-stage').getBoundingClientRect();
                     return [...root.querySelectorAll('.wbg-node')].filter(g => { const r = g.getBoundingClientRect();
                       return r.left >= s.left && r.right <= s.right && r.top >= s.top && r.bottom <= s.bottom; })
                     .map(g => g.getAttribute('data-node-id')); }"""
            )
        )
        strongest = max(
            (n for n in bounded.nodes if n.id in in_view),
            key=lambda n: sum(abs(e.weight) for e in bounded.edges if n.id in (e.src, e.dst)),
        )
        node(page, strongest.id).hover()
        tip = page.get_by_test_id("graph-tip")  # named by its label (and token), the id on its own line
        name = strongest.label if strongest.label and strongest.label != strongest.id else strongest.id
        expect(tip).to_contain_text(name)
        expect(tip).to_contain_text(f"· {strongest.kind}")
        if name != strongest.id:
            expect(tip).to_contain_text(f"id {strongest.id}")
    assert_offline(requests)


def test_a_64_token_feature_graph_reads_across_positions_and_up_the_layers(tmp_path):
    """A feature graph of a 64-token prompt in Chromium, as circuit-tracer lays one out: token positions left to
    right, layers bottom to top (every node of a higher layer wholly above, of a later position wholly right, on
    the screen), in a stage no taller than the view's height, at a zoom where every node is readable, the logits
    (the answer's position) in view; the layer rows labelled."""
    import json

    from test_browser import drawn

    from bench.app.app_bench import feature_graph

    d = feature_graph(400, n_layers=4, n_pos=64)
    path = tmp_path / "prompt-64.graph.json"
    path.write_text(json.dumps(d))
    rank = {n["node_id"]: (n["ctx_idx"], -1 if n["layer"] == "E" else int(n["layer"])) for n in d["nodes"]}
    requests: list[str] = []
    with page_server(tmp_path, PYTHONPATH=str(REPO), GRAPH_CIRCUIT=str(path)) as url, browser_page(requests) as page:
        page.goto(url)
        drawn(page)
        boxes = page.evaluate(
            """() => [...document.querySelector("[data-testid='stBidiComponentIsolated']").shadowRoot
                 .querySelectorAll('.wbg-node')].map(g => {
                   const r = g.querySelector('rect').getBoundingClientRect();
                   return [g.getAttribute('data-node-id'), r.left, r.top, r.right, r.bottom]; })"""
        )
        stage = page.locator(".wbg-stage").bounding_box()
        rows = page.locator(".wbg-row-label").all_text_contents()
    assert len(boxes) == len(d["nodes"])
    for a in boxes:
        for b in boxes:
            (pa, la), (pb, lb) = rank[a[0]], rank[b[0]]
            assert pa >= pb or a[3] < b[1], (a, b)  # a later position lies wholly to the right
            assert la >= lb or a[2] > b[4], (a, b)  # a higher layer lies wholly above
    assert stage["height"] <= 560 and min(b[4] - b[2] for b in boxes) >= 14  # not tall; nodes readable
    logit = next(b for b in boxes if rank[b[0]][1] == 5)  # circuit-tracer's logits sit at layer n_layers + 1
    assert stage["x"] <= logit[1] and logit[3] <= stage["x"] + stage["width"]
    assert rows == ["logits", "L3", "L2", "L1", "L0", "embeddings"]
    assert_offline(requests)


@pytest.mark.parametrize("width", [700, 1400])
def test_a_30_layer_component_circuit_opens_readable_with_the_logits_in_view(tmp_path, width):
    """The layer columns of a 30-layer, 9-head model (SmolLM2-135M's shape: 62 columns) in a narrow stage and in one
    the width of a 1,400 px page: fitted to either width its nodes would be 2-4 px tall, so the view opens at a
    readable zoom (every drawn head at least 14 px tall), no taller than the view's height, panned to the logits."""
    import torch
    from test_browser import drawn

    from workbench.circuits.component.graph import Graph
    from workbench.circuits.component.select import topk
    from workbench.circuits.component.types import Circuit

    g = Graph(30, 9, 3, 64)
    scores = torch.randn(g.n_edges, generator=torch.Generator().manual_seed(0))
    k, mask = 300, topk(g, scores.abs(), 300)
    while int(mask.sum()) < 300:  # pruning drops dangling edges: grow k until the circuit has 300
        k += 300 - int(mask.sum())
        mask = topk(g, scores.abs(), k)
    c = Circuit(g, mask, scores, query={"prompt": "p", "tokens": [0, 1], "answer": "x"})
    c.save(tmp_path / "circuit.json")
    requests: list[str] = []
    with (
        page_server(tmp_path, PYTHONPATH=str(REPO), GRAPH_CIRCUIT=str(tmp_path / "circuit.json")) as url,
        browser_page(requests) as page,
    ):
        page.set_viewport_size({"width": width, "height": 1000})
        page.goto(url)
        drawn(page)
        stage = page.locator(".wbg-stage").bounding_box()
        heads = page.locator(".wbg-node[data-node-id^='a'] rect").evaluate_all(
            "rs => rs.map(r => r.getBoundingClientRect().height)"
        )
        logits = page.locator("[data-node-id='logits'] rect").bounding_box()
    assert heads and min(heads) >= 14, min(heads)
    assert stage["height"] <= 562  # the view's height (560) and its 1 px border
    assert stage["x"] <= logits["x"] and logits["x"] + logits["width"] <= stage["x"] + stage["width"]
    assert_offline(requests)
