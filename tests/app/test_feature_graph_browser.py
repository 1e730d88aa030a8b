"""The feature graph page in a real browser (headless Chromium, issue #34's done-when): an attribution graph of the
transcoder workspace's model, made and checked by interventions through workbench.steps, opens fitted to its
stage with its links capped; a hover lights a node's links, named by label and token; influence pruning redraws
in the browser with no request to the server; two nodes are pinned, grouped (the group collapses into a supernode
that keeps its links) and noted; the link cap, influence pruning and collapsed groups are kept in the URL; a
feature page and Back keep them; the download carries them (pruningThreshold and the workbench's qParams field) and
an upload brings them back. Screenshots at ~100 and ~1,000 links drawn land in $WORKBENCH_SCREENSHOTS (else the test's folder):
docs/graph_100.png and docs/graph_1000.png were made so."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from test_browser import WAIT_MS, assert_offline, browser_page, drawn, pytestmark, serving  # noqa: F401

from app.figures import feature_graph as fgf
from workbench import browse
from workbench.circuits import annotations as an

INSIDE_JS = """() => { const root = document.querySelector("[data-testid='stBidiComponentIsolated']").shadowRoot;
  const s = root.querySelector('.wbg-stage').getBoundingClientRect();
  return [...root.querySelectorAll('.wbg-node rect')].filter(r => { const b = r.getBoundingClientRect();
    return b.left < s.left - 1 || b.right > s.right + 1 || b.top < s.top - 1 || b.bottom > s.bottom + 1; }).length; }"""


@pytest.fixture(scope="module")
def graph_workspace(transcoder_workspace, tmp_path_factory):
    """The transcoder workspace (copied) with a transcoder set on every layer and an IOI prompt's attribution graph (heads on its links) whose nodes
    and edges were checked by interventions (workbench circuit check)."""
    from workbench.circuits.feature.graph_config import GraphConfig
    from workbench.corpus import tasks
    from workbench.features.config import FeatureConfig
    from workbench.interventions.config import CheckConfig
    from workbench.models import load
    from workbench.sae.config import SAEConfig, TrainConfig
    from workbench.steps.dictionaries import train_transcoder_set
    from workbench.steps.features import build_features
    from workbench.steps.graphs import attribution_graph, check_graph
    from workbench.workspace import Workspace

    root = tmp_path_factory.mktemp("fgraph_browser") / "ws"
    shutil.copytree(transcoder_workspace, root, symlinks=True)
    ws = Workspace(root)
    model_dir = str(root / "models" / "random")
    model, tok = load(model_dir, device="cpu")
    q = tasks.queries("ioi", 1, seed=0, tokenizer=tok)[0]
    train = TrainConfig(n_tokens=8192, batch_size=512, lr=1e-3, progress=False)
    tset, members = train_transcoder_set(
        ws, root / "caches" / "mlp", "all", [SAEConfig("topk", k=8, expansion=4)], train, name="all"
    )  # the replacement model replaces every MLP; each member's store makes its feature pages
    features = FeatureConfig(chunk_rows=1000, corr_tokens=1500)
    build_features(ws, members, root / "caches" / "mlp", model_dir, features, progress=False)
    cfg = GraphConfig(max_feature_nodes=200, batch_size=16, node_threshold=0.95, edge_threshold=0.995)  # ~2,000 links
    _, folder = attribution_graph(ws, model, tset, q.prompt, q.answer, cfg=cfg, model_spec=model_dir, name="g")
    check_graph(ws, model, folder / "graph.json", tset, CheckConfig(top_edges=10))
    return root


def node(page, nid: str):
    return page.locator(f"[data-node-id='{nid}'] rect")


def wait_param(page, name: str, want: str) -> None:
    page.wait_for_function(f"new URLSearchParams(location.search).get({name!r}) === {want!r}", timeout=WAIT_MS)


def two_features(fg) -> tuple[str, str]:
    """The two strongest drawn features (by summed |link weight|) of layers with a feature store."""
    members = fg.metadata["info"]["transcoder_members"]
    drawn_ids = {n.id for n in fgf.to_graph(fg).nodes}
    strength = {n["node_id"]: 0.0 for n in fg.nodes}
    for lk in fg.links:
        strength[lk["source"]] += abs(lk["weight"])
        strength[lk["target"]] += abs(lk["weight"])
    feats = sorted(
        (n for n in fg.nodes if n["feature_type"] == "cross layer transcoder" and n["layer"] in members),
        key=lambda n: -strength[n["node_id"]],
    )
    a, b = [n["node_id"] for n in feats if n["node_id"] in drawn_ids][:2]
    return a, b


def wait_marks(page, a: str, b: str) -> None:
    """Until the URL holds the pins, the group and the note the test made."""
    wait_param(page, "pinned", f"{a},{b}")
    wait_param(page, "groups", json.dumps([["movers", a, b]], separators=(",", ":")))
    wait_param(page, "notes", json.dumps({b: "copies the name"}, separators=(",", ":")))


def hover_pin_group_note(page, a: str, b: str, name_a: str) -> None:
    from playwright.sync_api import expect

    node(page, a).hover()  # details in the browser, links named by label and token
    tip = page.get_by_test_id("graph-tip")
    expect(tip).to_contain_text(" @ ")  # named by label and token, the id in small text under the name
    expect(tip.locator(".wbg-id")).to_have_text(f"id {a}")
    node(page, a).click()
    details = page.get_by_test_id("graph-details")
    expect(details.locator("h4")).to_have_text(re.compile(r' @ ".*" · feature$'))
    expect(details.locator(".wbg-id")).to_have_text(f"id {a}")
    wait_param(page, "node", a)
    drawn(page)
    expect(page.get_by_text(name_a).first).to_be_visible()  # the page's details, right under the graph
    details.get_by_role("button", name="pin").click()
    wait_param(page, "pinned", a)
    details.get_by_role("button", name="select for group").click()
    node(page, b).click(modifiers=["Control"])  # selects it for the group, pinning it
    wait_param(page, "pinned", f"{a},{b}")
    page.get_by_placeholder("group name").fill("movers")
    page.get_by_role("button", name="group selected pins (2)").click()
    wait_param(page, "groups", json.dumps([["movers", a, b]], separators=(",", ":")))
    node(page, b).click()
    wait_param(page, "node", b)  # the page's rerun for the click is over before the note is typed
    drawn(page)
    details.locator("textarea").fill("copies the name")
    details.get_by_role("button", name="save note").click()
    wait_marks(page, a, b)
    drawn(page)


def view_controls(page, sent: list, total: int) -> None:
    """Folding a group and influence pruning redraw in the browser and are kept in the URL (`collapsed=`,
    `node_threshold=`; back to the default: gone); the check filter sends nothing to the server."""
    from playwright.sync_api import expect

    stats, details = page.get_by_test_id("graph-stats"), page.get_by_test_id("graph-details")
    page.get_by_role("button", name="collapse movers").click()
    expect(page.locator("[data-node-id='group:movers']")).to_have_count(1)
    wait_param(page, "collapsed", '["movers"]')
    node(page, "group:movers").click()
    expect(details).to_contain_text(re.compile(r"strongest (incoming|outgoing) \([1-9]"))  # keeps its links
    page.get_by_role("button", name="expand movers").click()
    expect(page.locator("[data-node-id='group:movers']")).to_have_count(0)
    page.wait_for_function("!new URLSearchParams(location.search).has('collapsed')", timeout=WAIT_MS)
    page.get_by_test_id("graph-node-threshold").fill("0.3")
    expect(stats).to_contain_text("influence pruning (node 0.30")
    assert int(page.locator(".wbg").get_attribute("data-edges")) < total
    wait_param(page, "node_threshold", "0.3")
    page.get_by_test_id("graph-node-threshold").fill("1")
    page.wait_for_function("!new URLSearchParams(location.search).has('node_threshold')", timeout=WAIT_MS)
    drawn(page)
    before = len(sent)
    page.get_by_test_id("graph-show-failed").uncheck()
    expect(stats).to_contain_text("not confirmed (dashed, by verdict: see the legend), hidden")
    page.get_by_test_id("graph-show-failed").check()
    assert len(sent) == before, "the check filter sent a message to the server"


def screenshots(page, total: int, shots: Path, b: str) -> None:
    """The docs' screenshots at ~100 and ~1,000 links drawn at rest; at 1,000 a node is still found by a hover."""
    from playwright.sync_api import expect

    for cap in (100, 1000):
        page.get_by_test_id("graph-link-cap").fill(str(cap))
        page.get_by_test_id("graph-link-cap").press("Enter")
        expect(page.get_by_test_id("graph-stats")).to_contain_text(f"the {min(cap, total)} strongest")
        wait_param(page, "links", str(cap))  # the link cap is kept in the URL
        page.locator(".wbg").screenshot(path=str(shots / f"graph_{cap}.png"))
    node(page, b).hover()
    expect(page.get_by_test_id("graph-tip").locator(".wbg-id")).to_have_text(f"id {b}")


def feature_page_back_download_upload(page, base: str, a: str, b: str, tmp_path: Path, left: an.View) -> None:
    """From the marked graph (a, b pinned and grouped as "movers", a note on b, the view left as `left`): a feature
    page and Back keep the marks and the view; "movers" collapsed; the download carries them all and an upload
    from a plain link brings them back."""
    from playwright.sync_api import expect

    cap = page.get_by_test_id("graph-link-cap")
    page.get_by_role("link", name=re.compile(r"^feature page of L")).click()
    expect(page.get_by_role("heading", name=re.compile(r"· (latent|block) \d+$"))).to_be_visible()
    drawn(page)
    page.go_back()
    drawn(page)
    wait_marks(page, a, b)  # Back from the feature page: pins, groups, notes kept
    expect(page.locator(".wbg-pinned")).to_have_count(2)
    wait_param(page, "links", str(left.link_cap))  # and the link cap
    expect(cap).to_have_value(str(left.link_cap))
    page.get_by_role("button", name="collapse movers").click()
    wait_param(page, "collapsed", '["movers"]')

    with page.expect_download() as dl:
        page.get_by_role("button", name=re.compile(r"^download graph JSON")).click()
    exported = tmp_path / "marked.json"
    dl.value.save_as(exported)
    marks, clicked = an.read_feature_graph(json.loads(exported.read_text()))
    assert marks == an.Annotations([a, b], [["movers", a, b]], {b: "copies the name"}), marks
    assert clicked == b, (clicked, page.url)
    view = an.read_feature_view(json.loads(exported.read_text()))
    assert view == an.View(**{**left.as_dict(), "collapsed": ["movers"]}), view

    page.goto(base)  # a plain link: no marks; the upload brings them back
    drawn(page)
    expect(page).not_to_have_url(re.compile("pinned="))
    page.get_by_text("upload a circuit-tracer / Neuronpedia graph JSON").click()
    page.locator("input[type=file]").set_input_files(str(exported))
    wait_param(page, "graph", "uploaded-graph")
    wait_marks(page, a, b)
    wait_param(page, "links", str(left.link_cap))
    drawn(page)
    expect(cap).to_have_value(str(left.link_cap))
    expect(page.locator("[data-node-id='group:movers']")).to_have_count(1)  # collapsed, as it was left
    page.get_by_role("button", name="expand movers").click()
    expect(page.locator(".wbg-pinned")).to_have_count(2)
    node(page, b).click()
    expect(page.get_by_test_id("graph-details").locator("textarea")).to_have_value("copies the name")


def test_feature_graph_hover_pin_group_note_feature_page_back_download_upload(graph_workspace, tmp_path):
    from playwright.sync_api import expect

    fg = browse.open_feature_graph(graph_workspace / "circuits" / "g")
    a, b = two_features(fg)
    shots = Path(os.environ.get("WORKBENCH_SCREENSHOTS", tmp_path))
    requests: list[str] = []
    with serving(graph_workspace, tmp_path) as url, browser_page(requests) as page:
        page.set_viewport_size({"width": 1400, "height": 900})  # the docs' screenshots at a laptop's size
        sent: list = []
        page.on("websocket", lambda ws: ws.on("framesent", lambda f: sent.append(f)))
        base = f"{url}/feature_graph?graph=circuits%2Fg"
        try:
            page.goto(base)
            drawn(page)
            assert page.evaluate(INSIDE_JS) == 0  # the stage fits the graph on open: no node off it
            total = int(page.locator(".wbg").get_attribute("data-edges"))
            assert int(page.locator(".wbg").get_attribute("data-links-drawn")) <= 150 < total or total <= 150
            expect(page.get_by_test_id("graph-stats")).to_contain_text("links drawn:")
            expect(page.get_by_test_id("graph-stats")).to_contain_text("intervention check:")  # verdicts, counted
            hover_pin_group_note(page, a, b, fgf.names(fg)[a])
            view_controls(page, sent, total)
            screenshots(page, total, shots, b)

            feature_page_back_download_upload(page, base, a, b, tmp_path, an.View(link_cap=1000))
        finally:
            page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
            print("the page's URL at the end:", page.url)
    assert_offline(requests)


@pytest.fixture(scope="module")
def tiny_graph_workspace(tiny, tmp_path_factory):
    """A workspace on the embedded model (data/models/tiny), as the demo makes one: a cache of its MLPs, a
    transcoder set on every layer trained briefly (tests/conftest.py's _brief_training), the members' feature
    stores, and an IOI prompt's attribution graph, checked by interventions."""
    from tests.conftest import _brief_training
    from workbench.cache.config import HarvestConfig
    from workbench.circuits.feature.graph_config import GraphConfig
    from workbench.corpus import tasks
    from workbench.features.config import FeatureConfig
    from workbench.interventions.config import CheckConfig
    from workbench.sae.config import SAEConfig
    from workbench.steps.cache import make_cache
    from workbench.steps.dictionaries import train_transcoder_set
    from workbench.steps.features import build_features
    from workbench.steps.graphs import attribution_graph, check_graph
    from workbench.workspace import Workspace

    model, tok = tiny
    ws = Workspace(tmp_path_factory.mktemp("tiny_graph") / "ws")
    cfg = HarvestConfig(n_tokens=6000, heldout_fraction=0.2)
    cache = make_cache(ws, "tiny", "synthetic", None, cfg, name="mlp", progress=False, model=model)
    tset, members = train_transcoder_set(
        ws, cache.path, "all", [SAEConfig("topk", k=8, expansion=4)], _brief_training(), name="all"
    )
    build_features(ws, members, cache.path, "tiny", FeatureConfig(chunk_rows=1000, corr_tokens=1500), progress=False)
    q = tasks.queries("ioi", 1, seed=0, tokenizer=tok)[0]
    _, folder = attribution_graph(ws, model, tset, q.prompt, q.answer, cfg=GraphConfig(max_feature_nodes=100), name="g")
    check_graph(ws, model, folder / "graph.json", tset, CheckConfig(top_edges=10))  # verdicts to draw
    return ws.root


def test_the_embedded_models_graph_keeps_its_work_through_back_forward_and_a_download(tiny_graph_workspace, tmp_path):
    """The done-when walk on the embedded model's graph: hover, pin, group, note; the node threshold is undone by
    Back and redone by Forward; a feature page and Back, the download and an upload keep it all."""
    from playwright.sync_api import expect

    fg = browse.open_feature_graph(tiny_graph_workspace / "circuits" / "g")
    a, b = two_features(fg)
    requests: list[str] = []
    with serving(tiny_graph_workspace, tmp_path) as url, browser_page(requests) as page:
        page.set_viewport_size({"width": 1600, "height": 1100})
        base = f"{url}/feature_graph?graph=circuits%2Fg"
        try:
            page.goto(base)
            drawn(page)
            hover_pin_group_note(page, a, b, fgf.names(fg)[a])
            threshold = page.get_by_test_id("graph-node-threshold")
            threshold.fill("0.5")
            wait_param(page, "node_threshold", "0.5")
            page.go_back()  # Back undoes the pruning, Forward redoes it
            page.wait_for_function("!new URLSearchParams(location.search).has('node_threshold')", timeout=WAIT_MS)
            expect(threshold).to_have_value("1")
            page.go_forward()
            wait_param(page, "node_threshold", "0.5")
            expect(threshold).to_have_value("0.5")
            threshold.fill("1")
            page.get_by_test_id("graph-link-cap").fill("300")
            page.get_by_test_id("graph-link-cap").press("Enter")
            wait_param(page, "links", "300")
            page.wait_for_function("!new URLSearchParams(location.search).has('node_threshold')", timeout=WAIT_MS)
            feature_page_back_download_upload(page, base, a, b, tmp_path, an.View(link_cap=300))
        finally:
            page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
            print("the page's URL at the end:", page.url)
    assert_offline(requests)


def least_influential(fg, k: int = 3) -> list[str]:
    """The k features and error nodes ranked last by the file's cumulative influence: the first the pruning hides."""
    inner = [
        n for n in fg.nodes if n["feature_type"] in fgf.KINDS and fgf.KINDS[n["feature_type"]] in ("feature", "error")
    ]
    ranked = sorted((n for n in inner if n["influence"] is not None), key=lambda n: n["influence"])
    assert ranked[-k - 1]["influence"] >= 0.5  # so node pruning at 0.5 hides all k (graph.js prune)
    return [n["node_id"] for n in ranked[-k:]]


def canvas_and_marks(page, pins: list[str]) -> None:
    """At 1400 x 900: the stage is the page's width and starts above the fold; the pinned nodes stay drawn under
    node 0.5 / edge 0.8 pruning, with their links; grouping takes the pins selected for it, not every pin, and an
    expanded group is outlined."""
    from playwright.sync_api import expect

    box = page.locator(".wbg-stage").bounding_box()
    assert box["width"] >= 1000 and box["y"] <= 450, box
    expect(page.get_by_test_id("graph-stats")).to_contain_text("influence pruning (node 0.50, edge 0.80) hides")
    for nid in pins:
        expect(page.locator(f"[data-node-id='{nid}']")).to_have_count(1)
    node(page, pins[0]).click()
    wait_param(page, "node", pins[0])
    drawn(page)
    expect(page.get_by_test_id("graph-details")).to_contain_text(re.compile(r"strongest (incoming|outgoing) \([1-9]"))
    page.get_by_test_id("graph-details").get_by_role("button", name="select for group").click()
    node(page, pins[1]).click(modifiers=["Control"])
    page.get_by_placeholder("group name").fill("pair")
    page.get_by_role("button", name="group selected pins (2)").click()
    wait_param(page, "groups", json.dumps([["pair", pins[0], pins[1]]], separators=(",", ":")))
    expect(page.locator(".wbg-hull[data-group='pair']")).to_have_count(1)  # expanded, outlined


def link_styles(page) -> dict[str, str]:
    """The legend's link styles (colour|dash), by what they mark: the styles the canvas draws."""
    items = page.locator(".wbg-legend-item[data-style]")
    return {
        items.nth(i).get_attribute("data-verdict"): items.nth(i).get_attribute("data-style")
        for i in range(items.count())
    }


def test_the_canvas_at_1400x900_keeps_marks_and_verdicts(tiny_graph_workspace, tmp_path):
    """Issue #47's done-when: the stage's room, pins that pruning cannot hide, verdict styles unlike a negative
    link's, and a download whose check (and transcoder set) an upload brings back."""
    from playwright.sync_api import expect

    fg = browse.open_feature_graph(tiny_graph_workspace / "circuits" / "g")
    pins = least_influential(fg)
    requests: list[str] = []
    with serving(tiny_graph_workspace, tmp_path) as url, browser_page(requests) as page:
        page.set_viewport_size({"width": 1400, "height": 900})
        base = f"{url}/feature_graph?graph=circuits%2Fg"
        try:
            page.goto(f"{base}&pinned={','.join(pins)}&node_threshold=0.5&edge_threshold=0.8")
            drawn(page)
            canvas_and_marks(page, pins)
            shots = Path(os.environ.get("WORKBENCH_SCREENSHOTS", tmp_path))
            page.get_by_role("heading", name="Feature graph").scroll_into_view_if_needed()
            page.screenshot(path=str(shots / "graph_canvas.png"))  # the window (docs/graph: graph_screenshots.py)
            styles = link_styles(page)
            unconfirmed = {k: v for k, v in styles.items() if k not in ("positive", "negative")}
            assert unconfirmed and len(set(styles.values())) == len(styles), styles  # each verdict its own style
            with page.expect_download() as dl:
                page.get_by_role("button", name=re.compile(r"^download graph JSON")).click()
            exported = tmp_path / "checked.json"
            dl.value.save_as(exported)
            d = json.loads(exported.read_text())
            assert (
                d["workbench_check"] == fg.check and d["metadata"]["info"]["workbench_transcoders"] == "transcoders/all"
            )
            page.goto(base)  # a plain link; the upload brings the check back
            drawn(page)
            page.get_by_text("upload a circuit-tracer / Neuronpedia graph JSON").click()
            page.locator("input[type=file]").set_input_files(str(exported))
            wait_param(page, "graph", "uploaded-graph")
            drawn(page)
            expect(page.get_by_test_id("graph-stats")).to_contain_text("intervention check:")
            assert link_styles(page) == styles
            expect(page.get_by_text(f"the file's {len(pins)} pins open pinned")).to_be_visible()
        finally:
            page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
            print("the page's URL at the end:", page.url)
    assert_offline(requests)


def test_proposed_groups_show_their_verdicts_and_one_is_accepted_as_a_group(tiny_graph_workspace, tmp_path):
    """`propose groups` on the page (issue #47, supernodes proposed and checked): the proposals come with the check's
    verdict of their joint ablation; accepting one makes it one of the page's groups (the URL's `groups`, the view's
    outline), as 'group selected pins' would, and its button says so."""
    from urllib.parse import parse_qs, urlparse

    from playwright.sync_api import expect

    requests: list[str] = []
    with serving(tiny_graph_workspace, tmp_path) as url, browser_page(requests) as page:
        try:
            page.goto(f"{url}/feature_graph?graph=circuits%2Fg")
            drawn(page)
            threshold = page.get_by_label("group similarity threshold")
            threshold.fill("0.05")  # a briefly trained set: low similarities, still groups to propose
            threshold.press("Enter")
            page.get_by_role("button", name="propose groups").click()
            first = page.get_by_role("button", name=re.compile(r"^accept S1 "))
            expect(first).to_be_visible()
            words = "|".join(re.escape(w) for w in ("confirmed", "under-predicted", "over-predicted", "sign-flipped"))
            verdict = re.compile(rf"joint ablation [-+][0-9.e+-]+: ({words}|absent) \(live")
            expect(page.get_by_text(verdict).first).to_be_visible()
            name = first.inner_text().removeprefix("accept ")
            first.click()
            page.wait_for_function(
                f"(new URLSearchParams(location.search).get('groups') || '').includes({json.dumps(name)})",
                timeout=WAIT_MS,
            )
            (group,) = json.loads(parse_qs(urlparse(page.url).query)["groups"][0])
            assert group[0] == name and len(group) >= 3, group
            drawn(page)
            expect(page.locator(f".wbg-hull[data-group={json.dumps(name)}]")).to_have_count(1)
            expect(page.get_by_role("button", name="accepted", exact=True)).to_be_disabled()
        finally:
            page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
            print("the page's URL at the end:", page.url)
    assert_offline(requests)


def drag(page, frm: dict, to: dict) -> None:
    """A press at the centre of box `frm`, moved in steps to the centre of box `to`, released (page.mouse)."""
    page.mouse.move(frm["x"] + frm["width"] / 2, frm["y"] + frm["height"] / 2)
    page.mouse.down()
    page.mouse.move(to["x"] + to["width"] / 2, to["y"] + to["height"] / 2, steps=8)
    page.mouse.up()


def test_dragging_a_node_onto_another_groups_them_and_the_background_still_pans(tiny_graph_workspace, tmp_path):
    """Drag-to-group (issue #47, marks): a feature dropped on another makes a group of the two (the URL's `groups`,
    outlined, as 'group selected pins' makes them); a third dropped on a member joins it; dragging the background
    pans the view and groups nothing."""
    from urllib.parse import parse_qs, urlparse

    from playwright.sync_api import expect

    requests: list[str] = []
    with serving(tiny_graph_workspace, tmp_path) as url, browser_page(requests) as page:
        page.set_viewport_size({"width": 1400, "height": 900})
        try:
            page.goto(f"{url}/feature_graph?graph=circuits%2Fg")
            drawn(page)
            feats = page.locator(".wbg-node.wbg-k-feature")
            a, b, c = (feats.nth(i).get_attribute("data-node-id") for i in range(3))
            view = page.locator(".wbg-svg > g:not(.wbg-labels)")  # the viewport: its transform is the pan
            before = view.get_attribute("transform")
            stage = page.locator(".wbg-svg").bounding_box()
            corner = {"x": stage["x"] + 3, "y": stage["y"] + 8, "width": 0, "height": 0}  # left of the fitted graph
            drag(page, corner, {**corner, "x": corner["x"] + 60})
            assert view.get_attribute("transform") != before  # the background pans
            assert "groups" not in parse_qs(urlparse(page.url).query)
            drag(page, node(page, a).bounding_box(), node(page, b).bounding_box())
            wait_param(page, "groups", json.dumps([["group 1", b, a]], separators=(",", ":")))
            drawn(page)
            expect(page.locator(".wbg-hull[data-group='group 1']")).to_have_count(1)
            drag(page, node(page, c).bounding_box(), node(page, b).bounding_box())
            wait_param(page, "groups", json.dumps([["group 1", b, a, c]], separators=(",", ":")))
        finally:
            page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
            print("the page's URL at the end:", page.url)
    assert_offline(requests)
