"""The feature graph page's prompt box in a real browser (headless Chromium, issue #47): a prompt typed into the box
on a workspace with no graph yet is built and checked while the page shows its progress, recorded in the workspace as
a circuit artifact (its manifest and the graph's check, as `circuit graph` + `circuit check` record them), and the
page opens the new graph with its nodes drawn; an empty prompt is refused in one line."""

from __future__ import annotations

import json

from test_browser import WAIT_MS, assert_offline, browser_page, drawn, pytestmark, serving, settle  # noqa: F401

from workbench.circuits import neuronpedia
from workbench.corpus import tasks
from workbench.workspace import MANIFEST, Workspace

BUILD = "build and check the graph"


def test_a_typed_prompt_becomes_a_recorded_checked_graph_the_page_opens(prompt_workspace, tokenizer, tmp_path):
    from playwright.sync_api import expect

    prompt = " ".join(tasks.queries("ioi", 1, seed=0, tokenizer=tokenizer)[0].prompt.split()[:6])  # short: cheap
    requests = []
    with serving(prompt_workspace, tmp_path) as url, browser_page(requests) as page:
        page.goto(f"{url}/feature_graph")
        settle(page)
        box = page.get_by_label("prompt", exact=True)  # open: the workspace holds no graph yet
        page.get_by_role("button", name=BUILD).click()
        expect(page.get_by_text("the prompt is empty")).to_be_visible()
        box.fill(prompt)
        page.get_by_role("button", name=BUILD).click()
        expect(page.get_by_test_id("stProgress")).to_be_visible()  # its progress while the steps run
        expect(page.get_by_text("workbench circuit check").first).to_be_visible()  # and the commands it runs
        # it opened the new graph: building and checking take minutes on two busy cores (a wait, not a speed check)
        page.wait_for_function("new URLSearchParams(location.search).get('graph') || ''", timeout=4 * WAIT_MS)
        rel = page.evaluate("new URLSearchParams(location.search).get('graph')")
        expect(page.locator("[data-node-id]").first).to_be_attached(timeout=WAIT_MS)  # drawn in the graph view
        drawn(page)
        n_drawn = page.locator("[data-node-id]").count()
        expect(page.get_by_text("recorded and opened")).to_be_visible()
        expect(page.get_by_text(f"circuit check {prompt_workspace / rel} --workspace").first).to_be_visible()
    assert_offline(requests)
    folder = (prompt_workspace / rel).resolve()
    assert rel.startswith("circuits/graph-") and folder in {
        a.path.resolve() for a in Workspace(prompt_workspace).artifacts()
    }
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["made_by"] == "workbench circuit graph" and manifest["inputs"]["transcoders"] == "transcoders/all"
    assert "check_nodes_confirmed_share" in manifest["summary"]
    graph = json.loads((folder / "graph.json").read_text())
    assert neuronpedia.GRAPH_CHECK[0] in graph and graph["metadata"]["prompt"] == prompt
    assert n_drawn >= 3  # embeddings, features or errors, and the logit nodes
