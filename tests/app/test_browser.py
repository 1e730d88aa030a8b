"""The app in a real browser: `workbench app` on a free port, driven by headless Chromium through Playwright.

Walks overview -> SAE -> search by token -> feature -> neighbour -> reload, asserting on visible
text, and fails if the page makes any request beyond localhost.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import pytest

from workbench.features import FeatureStore

CHROMIUM = "/usr/bin/chromium"
REPO = Path(__file__).resolve().parents[2]
WAIT_MS = 120_000  # waits for the page, not assertions on speed (2 shared cores, cold imports)

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is absent (apt-get install chromium; .ci/run installs it)"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(feature_workspace, tmp_path):
    port = free_port()
    log = open(tmp_path / "server.log", "w")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench.cli", "app", "--workspace", str(feature_workspace), "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=REPO,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):  # like Streamlit's own e2e suite: poll the health endpoint
            if proc.poll() is not None:
                pytest.fail(f"workbench app exited: {(tmp_path / 'server.log').read_text()}")
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=1).read() == b"ok":
                    break
            except OSError:
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def settle(page) -> None:
    page.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']", timeout=WAIT_MS)


def test_browse_search_feature_neighbour_reload_offline(server, feature_workspace, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    rel = next(
        f"saes/run/{p.name}"
        for p in sorted((feature_workspace / "saes" / "run").iterdir())
        if p.name.startswith("topk")
    )
    store = FeatureStore(feature_workspace / rel)
    word = store.token(int(store.array("token_counts").argmax()))
    first = store.search_token(word)[0]["unit"]
    requests = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("request", lambda r: requests.append(r.url))
        page.on("websocket", lambda w: requests.append(w.url))
        page.set_default_timeout(WAIT_MS)
        expect.set_options(timeout=WAIT_MS)
        try:
            page.goto(server)
            settle(page)
            expect(page.get_by_role("heading", name="Workspace")).to_be_visible()
            page.get_by_role("link", name=f"open {rel.split('/')[-1]}").click()
            expect(page.get_by_role("heading", name="SAE", exact=True)).to_be_visible()
            page.get_by_role("link", name=f"search the features of {rel.split('/')[-1]}").click()
            expect(page.get_by_role("heading", name="Search")).to_be_visible()
            box = page.get_by_label("query")
            box.fill(word)
            box.press("Enter")
            link = page.get_by_role("link", name=f"open latent {first}", exact=False).first
            expect(link).to_be_visible()
            link.click()
            expect(page.get_by_role("heading", name=f"latent {first}", exact=False)).to_be_visible()
            expect(page.get_by_text("top activating contexts")).to_be_visible()
            nb = page.get_by_role("link", name="cosine").first
            target = int(nb.inner_text().split("·")[0].split()[1])
            nb.click()
            heading = page.get_by_role("heading", name=f"{rel.split('/')[-1]} · latent {target}")
            expect(heading).to_be_visible()
            expect(page).to_have_url(re.compile(rf"/feature\?.*unit={target}\b"))  # the view state is in the URL
            assert "sae=saes" in page.url
            page.reload()
            settle(page)
            expect(heading).to_be_visible()
            expect(page.get_by_text("logit effects")).to_be_visible()
            settle(page)
            page.locator(".js-plotly-plot").first.wait_for()
        finally:
            page.screenshot(path=str(tmp_path / "feature.png"), full_page=True)
            browser.close()
    outside = [
        u
        for u in requests
        if urlparse(u).scheme not in ("data", "blob") and urlparse(u).hostname not in ("127.0.0.1", "localhost")
    ]
    assert requests and not outside, outside
    assert (tmp_path / "feature.png").stat().st_size > 0
