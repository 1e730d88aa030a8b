"""A model and an SAE made elsewhere, in a real browser: a GPT-NeoX folder saved by transformers and a Top-k SAE saved
by sae_lens, both imported with the CLI, listed on the Workspace page, and the Prompt page running that model and
SAE live on a typed prompt, fetching nothing beyond the app."""

from __future__ import annotations

import pytest

from tests.app.test_browser import assert_offline, browser_page, serving, settle


@pytest.fixture(scope="module")
def imported_workspace(tmp_path_factory):
    from tests.hf_folders import hf_folder
    from tests.sae.test_imports import _saelens_folders
    from workbench.steps.exchange import import_sae
    from workbench.steps.models import import_model
    from workbench.workspace import Workspace

    root = tmp_path_factory.mktemp("byo-browser")
    ws = Workspace(root / "ws")
    _, model = import_model(ws, str(hf_folder("neox", root / "downloads" / "their-pythia")))
    import_sae(ws, _saelens_folders(root / "downloads")["topk"], str(model), name="their-sae")
    return ws.root


def test_prompt_page_runs_an_imported_model_and_sae_live(imported_workspace, tmp_path):
    from playwright.sync_api import expect

    requests: list = []
    with serving(imported_workspace, tmp_path) as url, browser_page(requests) as page:
        try:
            page.goto(url)
            settle(page)
            expect(page.get_by_role("heading", name="Workspace")).to_be_visible()
            page.get_by_role("link", name="open their-sae").click()
            expect(page.get_by_role("heading", name="SAE", exact=True)).to_be_visible()
            page.goto(f"{url}/prompt?sae=saes/imported/their-sae")
            settle(page)
            box = page.get_by_role("textbox", name="prompt", exact=True)
            box.fill("Mary and John went to the store")
            box.press("Enter")
            expect(page.get_by_text("top 5 latents per token")).to_be_visible()
            expect(page.get_by_text("show one latent across the prompt")).to_be_visible()  # some latent fired
            settle(page)
            expect(page.get_by_text("this SAE has no feature store")).to_be_visible()  # the latent drawn, no page
            assert "unit=" not in page.url  # the page's default latent adds nothing to the URL (nor a history entry)
        finally:
            page.screenshot(path=str(tmp_path / "prompt.png"), full_page=True)
    assert_offline(requests)
