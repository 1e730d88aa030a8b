"""Why a head looked there, in a real browser (headless Chromium): the embedded model's attribution graph built with
QK attribution (`circuit graph --qk`) and checked (`circuit check`, its QK parts too); selecting a link through a head
shows the head, its (query, key) positions with their tokens, and the query- and key-side sources with their parts
and check verdicts; a node selected again brings its own panel back."""

from __future__ import annotations

import pytest
from test_browser import assert_offline, browser_page, drawn, pytestmark, serving  # noqa: F401

from app.figures import feature_graph as fgf
from tests.interventions.conftest import _tc_set
from workbench import browse

PROMPT = "When Mary and John went to the store , John gave"


@pytest.fixture(scope="module")
def qk_workspace(tiny, tmp_path_factory):
    """A workspace with circuits/q: a graph of the embedded model through random transcoders, with QK attribution,
    its nodes, top edges and top 20 QK parts checked."""
    from workbench import steps
    from workbench.circuits.feature.graph_config import GraphConfig
    from workbench.interventions.config import CheckConfig
    from workbench.workspace import Workspace

    root = tmp_path_factory.mktemp("qk_browser")
    tset = _tc_set(tiny[0], root / "tcs")
    ws = Workspace(root / "ws")
    cfg = GraphConfig(max_feature_nodes=40, qk=True)
    _, folder = steps.attribution_graph(ws, tiny[0], tset, PROMPT, "a", None, cfg=cfg, name="q")
    steps.check_graph(ws, tiny[0], folder / "graph.json", tset, CheckConfig(top_edges=2, top_qk=20))
    return ws.root


def strongest_qk_link(fg) -> tuple[dict, list]:
    """A link that is its target's strongest incoming one (the first the node's panel lists) and carries a QK
    entry with a checked source, and that entry (link_qk's form)."""
    strongest = {}
    for lk in fg.links:
        if abs(lk["weight"]) > abs(strongest.get(lk["target"], {"weight": 0})["weight"]):
            strongest[lk["target"]] = lk
    qk = fgf.link_qk(fg)
    for lk in strongest.values():
        for e in qk.get((lk["source"], lk["target"]), []):
            if any(word for side in ("query", "key") for *_, word in e[f"{side}_sources"]):
                return lk, e
    raise AssertionError("no target's strongest link carries a checked QK entry")


def test_a_link_through_a_head_shows_why_the_head_looked_there(qk_workspace, tmp_path):
    from playwright.sync_api import expect

    fg = browse.open_feature_graph(qk_workspace / "circuits" / "q")
    assert fg.check["qk"] and all(q["verdict"] for q in fg.check["qk"])
    link, entry = strongest_qk_link(fg)
    requests: list[str] = []
    with serving(qk_workspace, tmp_path) as url, browser_page(requests) as page:
        page.set_viewport_size({"width": 1600, "height": 1100})
        try:
            page.goto(f"{url}/feature_graph?graph=circuits%2Fq&node={link['target']}")
            drawn(page)
            details = page.get_by_test_id("graph-details")
            why = details.get_by_test_id("graph-why").first
            expect(why).to_have_text(
                f"why {', '.join(e['head'] for e in fgf.link_qk(fg)[link['source'], link['target']])} looked there"
            )
            why.click()
            box = details.locator(f"[data-testid='graph-qk'][data-head='{entry['head']}']").first
            q, k = entry["query"], entry["key"]
            expect(box).to_contain_text(
                f'why {entry["head"]} looked there: query position {q} "{entry["query_token"]}", key position {k} '
                f'"{entry["key_token"]}"'
            )
            for side in ("query", "key"):
                sources = box.locator(f".wbg-qk-src[data-side='{side}']")
                expect(sources).to_have_count(min(len(entry[f"{side}_sources"]), 5))
                for i, (name, _, word) in enumerate(entry[f"{side}_sources"][:5]):
                    expect(sources.nth(i)).to_contain_text(name)
                    if word:
                        expect(sources.nth(i)).to_contain_text(f"check: {word}")
            expect(details.locator("h4")).to_contain_text("→")
            details.screenshot(path=str(tmp_path / "qk_panel.png"))
            details.get_by_role("button", name="back to the node").click()
            expect(details.locator("h4")).to_contain_text(" · feature")  # the node's own panel again
        finally:
            page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
    assert_offline(requests)
