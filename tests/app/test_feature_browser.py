"""The feature page across dictionaries in a real browser (Chromium): the histogram drawn as inline SVG (no Plotly),
a link to the closest latent of another dictionary on the hook, the dictionary picker offering the closest match
instead of keeping the index, and a graph node's activation marked on the histogram; nothing leaves localhost."""

from __future__ import annotations

import re
from urllib.parse import unquote

import pytest

from tests.app.test_browser import assert_offline, browser_page, drawn, serving
from tests.app.test_pages import saes
from workbench.features import FeatureStore


@pytest.fixture
def server(feature_workspace, tmp_path):
    with serving(feature_workspace, tmp_path) as url:
        yield url


def test_feature_page_links_and_switches_across_dictionaries(server, feature_workspace, tmp_path):
    from playwright.sync_api import expect

    a, b = [r for r in saes(feature_workspace) if "block" not in r][:2]
    store = FeatureStore(feature_workspace / a)
    u = int(store.units["count"].idxmax())
    [entry] = [e for e in store.unit(u)["across"] if e["sae"].name == b.split("/")[-1]]
    j, cos = entry["cos"][0]
    requests: list = []
    with browser_page(requests) as page:
        try:
            page.goto(f"{server}/feature?sae={a}&unit={u}&act=0.5")
            drawn(page)
            expect(page.get_by_role("heading", name=f"{a.split('/')[-1]} · latent {u}")).to_be_visible()
            hist = page.locator("img[data-chart='histogram']")
            assert hist.get_attribute("data-mark") == "0.5" and "prompt" in unquote(hist.get_attribute("src"))
            assert hist.evaluate("i => i.complete && i.naturalWidth > 0")  # the SVG decoded and drawn
            assert not page.locator(".js-plotly-plot").count()  # no Plotly chart on the page
            page.get_by_role("link", name=f"latent {j} · cosine {cos:.3f}").first.click()
            drawn(page)
            expect(page.get_by_role("heading", name=f"{b.split('/')[-1]} · latent {j}")).to_be_visible()
            expect(page).to_have_url(re.compile(rf"unit={j}\b"))
            assert "act=" not in page.url
            box = page.locator("[data-testid='stSelectbox']").filter(has=page.get_by_text("SAE", exact=True))
            box.click()  # the picker open: type to filter its options, Enter picks the one left
            page.keyboard.type(a.split("/")[-1])
            page.keyboard.press("Enter")
            drawn(page)
            expect(page.get_by_text("does not carry over", exact=False)).to_be_visible()
            back = [
                e for e in FeatureStore(feature_workspace / b).unit(j)["across"] if e["sae"].name == a.split("/")[-1]
            ]
            k = back[0]["cos"][0][0]
            expect(page.get_by_role("heading", name=f"{a.split('/')[-1]} · latent {k}")).to_be_visible()
            expect(page).to_have_url(re.compile(rf"unit={k}\b"))
        finally:
            page.screenshot(path=str(tmp_path / "feature-across.png"), full_page=True)
    assert_offline(requests)
