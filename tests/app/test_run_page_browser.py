"""The Run page in a real browser: a component-level circuit (heads and MLPs, EAP-IG) of a generated IOI query on
the embedded model, recorded in an empty workspace and opened on the circuit page, drawn; and a feature-level
circuit built through a transcoder set of the workspace (trained through workbench.steps for a few steps),
recorded there and opened on the feature graph page."""

from __future__ import annotations

from urllib.parse import unquote

import pytest

from tests.app.test_browser import assert_offline, browser_page, serving, settle


def test_run_page_finds_a_component_circuit_and_opens_it_drawn(tmp_path, tiny):
    """The researcher's path: type a query, run the search, open the result; the circuit page draws its graph and
    its faithfulness curve with the searched budget starred, and nothing leaves localhost."""
    from playwright.sync_api import expect

    from tests.app.test_browser import drawn
    from workbench.corpus import tasks
    from workbench.workspace import Workspace

    ws = tmp_path / "ws"
    ws.mkdir()
    q = tasks.queries("ioi", 1, seed=0, tokenizer=tiny[1])[0]
    requests: list = []
    with serving(ws, tmp_path) as url, browser_page(requests) as page:
        page.goto(f"{url}/run")
        settle(page)
        expect(page.get_by_role("heading", name="Run a circuit search")).to_be_visible()
        page.get_by_role("textbox", name="prompt", exact=True).fill(q.prompt)
        page.get_by_role("textbox", name="answer (one token)").fill(q.answer)
        page.get_by_role("textbox", name="counterfactual prompt (optional)").fill(q.counterfactual)
        page.get_by_role("textbox", name="name (optional)").fill("from-the-ui")
        page.get_by_role("spinbutton", name="EAP-IG steps").fill("2")
        page.get_by_role("spinbutton", name="paraphrases and resampled counterfactuals (best-of-N candidates)").fill(
            "0"
        )
        page.get_by_role("button", name="find the circuit").click()
        expect(page.get_by_text("circuit found:", exact=False)).to_be_visible(timeout=1_500_000)  # a wait, 2 busy cores
        [art] = [a for a in Workspace(ws).artifacts("circuits") if a.name == "from-the-ui"]
        assert art.manifest["inputs"]["answer"] == q.answer and (art.path / "circuit.json").is_file()
        page.get_by_role("link", name="open from-the-ui").click()
        expect(page.get_by_role("heading", name="Circuit", exact=True)).to_be_visible()
        drawn(page)
        assert "circuit=circuits%2Ffrom-the-ui" in page.url or "circuit=circuits/from-the-ui" in page.url
        curve = page.locator("img[data-chart='curve']")  # the curve, its drawn point starred
        assert curve.get_attribute("data-mark") and "drawn:" in unquote(curve.get_attribute("src"))
        expect(page.get_by_text("drawn: ", exact=False).first).to_be_visible()
    assert_offline(requests)


@pytest.fixture(scope="module")
def tiny_set_workspace(tmp_path_factory):
    """A workspace with a transcoder set of the embedded model: a small cache of its default hooks and a Top-k
    transcoder per layer, trained for a few steps."""
    from workbench.cache.config import HarvestConfig
    from workbench.sae.config import SAEConfig, TrainConfig
    from workbench.steps.cache import make_cache
    from workbench.steps.dictionaries import train_transcoder_set
    from workbench.workspace import Workspace

    ws = Workspace(tmp_path_factory.mktemp("runfeat") / "ws")
    cache = make_cache(ws, "tiny", "synthetic", None, HarvestConfig(n_tokens=6000), name="c", progress=False)
    train = TrainConfig(n_tokens=8192, batch_size=512, lr=1e-3, progress=False)
    train_transcoder_set(ws, cache.path, "all", [SAEConfig("topk", k=8, expansion=4)], train, name="set")
    return ws.root


def test_run_page_builds_a_feature_circuit_of_the_embedded_model(tiny_set_workspace, tmp_path, tiny):
    from playwright.sync_api import expect

    from workbench.corpus import tasks
    from workbench.workspace import Workspace

    q = tasks.queries("ioi", 1, seed=0, tokenizer=tiny[1])[0]
    requests: list = []
    with serving(tiny_set_workspace, tmp_path) as url, browser_page(requests) as page:
        page.goto(f"{url}/run")
        settle(page)
        page.get_by_text("features (a transcoder set)").click()
        settle(page)
        page.get_by_role("textbox", name="prompt", exact=True).fill(q.prompt)
        page.get_by_role("textbox", name="answer (one token)").fill(q.answer)
        page.get_by_role("textbox", name="counterfactual prompt (optional)").fill(q.counterfactual)
        page.get_by_role("textbox", name="name (optional)").fill("features-from-the-ui")
        page.get_by_role("spinbutton", name="paraphrases and resampled counterfactuals (best-of-N candidates)").fill(
            "0"
        )
        page.get_by_role("button", name="find the feature circuit").click()
        expect(page.get_by_text("circuit found:", exact=False)).to_be_visible(timeout=1_500_000)  # a wait, 2 busy cores
        art = next(a for a in Workspace(tiny_set_workspace).artifacts("circuits") if a.name == "features-from-the-ui")
        assert art.manifest["made_by"] == "workbench circuit find --transcoders"
        assert art.manifest["inputs"]["answer"] == q.answer and (art.path / "graph.json").is_file()
        page.get_by_role("link", name="open features-from-the-ui").click()
        expect(page.get_by_role("heading", name="Feature graph")).to_be_visible()
        settle(page)
        assert "features-from-the-ui" in page.url
    assert_offline(requests)
