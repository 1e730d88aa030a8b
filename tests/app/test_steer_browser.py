"""The Steer panel in a real browser (headless Chromium, tests/app/test_browser.py's recipe): a deep link opens the
panel with its result, a change of the semantics reruns it and lands in the URL, and nothing leaves localhost."""

from __future__ import annotations

import re

from tests.app.test_browser import assert_offline, browser_page, server, settle  # noqa: F401 (server: a fixture)

SAE = "saes/run/topk_n512_k8_seed0"


def test_a_steering_deep_link_runs_and_a_semantics_change_reaches_the_url(server, tmp_path):  # noqa: F811
    from playwright.sync_api import expect

    requests = []
    with browser_page(requests) as page:
        try:
            page.goto(f"{server}/feature?sae={SAE}&unit=3&steer=1&s_op=steer&s_value=8&s_n=4")
            settle(page)
            expect(page.get_by_text("KL from the clean run (next token)")).to_be_visible()
            expect(page.get_by_text("intervened:", exact=False).first).to_be_visible()
            settle(page)  # no rerun under way: the radio stays the one clicked
            page.get_by_text("frozen", exact=True).click()
            settle(page)
            expect(page).to_have_url(re.compile(r"s_sem=frozen"))
            expect(page.get_by_text("frozen semantics", exact=False)).to_be_visible()
            expect(page.get_by_text("KL from the clean run (next token)")).to_be_visible()
        finally:
            page.screenshot(path=str(tmp_path / "steer.png"), full_page=True)
    assert_offline(requests)
