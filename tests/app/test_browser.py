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
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

import pytest

from workbench.features import FeatureStore

CHROMIUM = "/usr/bin/chromium"
REPO = Path(__file__).resolve().parents[2]
WAIT_MS = 300_000  # waits for the page, not assertions on speed (2 shared cores, cold imports)

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is absent (apt-get install chromium; .ci/run installs it)"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(workspace, tmp_path):
    """`workbench app` on a free port, yielding its URL once its health endpoint answers."""
    port = free_port()
    cmd = [sys.executable, "-m", "workbench.cli", "app", "--workspace", str(workspace), "--port", str(port)]
    with serve(cmd, port, tmp_path / "server.log", PYTHONPATH=str(REPO)) as url:
        yield url


@contextmanager
def serve(cmd: list[str], port: int, log_path: Path, **env):
    """Run a Streamlit server command, yielding its URL once its health endpoint answers; stop it after."""
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env}, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):  # like Streamlit's own e2e suite: poll the health endpoint
            if proc.poll() is not None:
                pytest.fail(f"{' '.join(cmd[:4])} exited: {log_path.read_text()}")
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=1).read() == b"ok":
                    break
            except OSError:
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:  # a loaded machine: stop it for good
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture
def server(feature_workspace, tmp_path):
    with serving(feature_workspace, tmp_path) as url:
        yield url


@pytest.fixture
def circuit_server(circuit_workspace, tmp_path):
    with serving(circuit_workspace, tmp_path) as url:
        yield url


def settle(page) -> None:
    page.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']", timeout=WAIT_MS)


def drawn(page) -> None:
    """Until the page is drawn (bench.harness.wait_drawn: no skeleton or stale element, every chart's SVG)."""
    from bench.harness import wait_drawn

    wait_drawn(page)


@contextmanager
def browser_page(requests: list):
    """A headless Chromium page that records every request and websocket URL into `requests`."""
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
        page.on("request", lambda r: requests.append(r.url))
        page.on("websocket", lambda w: requests.append(w.url))
        page.set_default_timeout(WAIT_MS)
        expect.set_options(timeout=WAIT_MS)
        try:
            yield page
        finally:
            browser.close()


def assert_offline(requests: list) -> None:
    outside = [
        u
        for u in requests
        if urlparse(u).scheme not in ("data", "blob") and urlparse(u).hostname not in ("127.0.0.1", "localhost")
    ]
    assert requests and not outside, outside


def test_browse_search_feature_neighbour_reload_offline(server, feature_workspace, tmp_path):
    from playwright.sync_api import expect

    rel = next(
        f"saes/run/{p.name}"
        for p in sorted((feature_workspace / "saes" / "run").iterdir())
        if p.name.startswith("topk")
    )
    store = FeatureStore(feature_workspace / rel)
    word = store.token(int(store.array("token_counts").argmax()))
    first = store.search_token(word)[0]["unit"]
    requests = []
    with browser_page(requests) as page:
        try:
            page.goto(server)
            settle(page)
            expect(page.get_by_role("heading", name="Workspace")).to_be_visible()
            no_links(page)
            expect(page.locator("[data-testid='stJson']")).to_have_count(0)  # configs: drawn once opened
            page.get_by_text("saes: configs and inputs").click()
            expect(page.locator("[data-testid='stJson']").first).to_be_visible()
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
            page.locator("img[data-chart='histogram']").wait_for()  # an SVG image, no Plotly chunk
        finally:
            page.screenshot(path=str(tmp_path / "feature.png"), full_page=True)
    assert_offline(requests)
    assert (tmp_path / "feature.png").stat().st_size > 0
    # the reload of /feature connected at the server's root at once (app/server.py's hosting hook): no ping of a
    # page-relative /feature/_stcore/health, whose 404 cost a 100 ms retry on every full load
    pings = [urlparse(u).path for u in requests if u.endswith("_stcore/health")]
    assert pings and set(pings) == {"/_stcore/health"}, pings


def feature_and_back(page, url: str, back_checks) -> None:
    """Open the circuit at url (a node selected), follow the node's first feature link, go Back (back_checks: what
    the circuit page must show again) and Forward to the same feature."""
    from playwright.sync_api import expect

    page.goto(url)
    drawn(page)
    link = page.get_by_role("link", name=re.compile(r"^unit \d+")).first
    feature = page.get_by_role("heading", name=re.compile(rf"· (latent|block) {int(link.inner_text().split()[1])}$"))
    link.click()
    expect(feature).to_be_visible()
    drawn(page)
    page.go_back()
    drawn(page)
    back_checks()
    page.go_forward()
    expect(feature).to_be_visible()


def compare_and_back(page) -> None:
    """From a circuit page: the Compare page (one graph of both models, with counts), the sparse circuit, Back to
    Compare in one step (the circuit page's defaults add no history entry), Forward, and the page's own way back."""
    from playwright.sync_api import expect

    def on_compare() -> None:
        expect(page.get_by_role("heading", name="Compare base and sparse attention")).to_be_visible()
        settle(page)
        expect(page.locator(".wbg-diff")).to_contain_text("only in base")

    def on_sparse() -> None:
        expect(page).to_have_url(re.compile(r"/circuit\?.*ioi-0-sparse"))
        drawn(page)

    page.get_by_role("link", name="Compare").click()
    on_compare()
    expect(page.get_by_text("queries with a gap on both models").first).to_be_visible()
    page.get_by_role("link", name="open the sparse attention circuit").click()
    on_sparse()
    page.go_back()
    on_compare()
    expect(page.get_by_text("is not a circuit in this workspace")).to_have_count(0)
    page.go_forward()
    on_sparse()
    page.get_by_role("link", name="compare with the other model's circuit").click()
    on_compare()


CURVE_MARK = "() => { const c = document.querySelector(\"img[data-chart='curve']\"); return c && c.dataset.mark; }"


def test_circuit_budget_click_download_upload_compare_feature_offline(circuit_server, circuit_workspace, tmp_path):
    """Open a circuit, move the budget and see the drawing and the curve's mark change, click a head and see
    its pattern, download the JSON and upload it again (and a wrong file: one line), open the comparison,
    follow a node to a feature page; nothing leaves localhost. WORKBENCH_SCREENSHOTS=DIR keeps circuit.png."""
    import json

    from playwright.sync_api import expect

    d = json.loads((circuit_workspace / "circuits" / "ioi-0" / "circuit.json").read_text())
    in_circuit = {n["name"] for n in d["nodes"] if n["in_circuit"]}
    layer2 = sorted(n for n in in_circuit if n.startswith(("a2.", "m2")))
    requests = []
    with browser_page(requests) as page:
        try:
            page.goto(f"{circuit_server}/circuit?circuit=circuits/ioi-0")
            settle(page)
            expect(page.get_by_role("heading", name="Circuit")).to_be_visible()
            page.locator("img[data-chart='curve']").wait_for()  # the curve, an SVG image (the graph is the graph view)
            page.get_by_text("edge budget", exact=True).click()
            settle(page)
            slider = page.get_by_role("slider").first
            before_label = page.get_by_text("drawn: top").inner_text()
            before_x = float(page.evaluate(CURVE_MARK))
            slider.focus()
            slider.press("ArrowRight")
            settle(page)
            expect(page.get_by_text("drawn: top")).not_to_have_text(before_label)
            page.wait_for_function(  # the curve's starred point moves right (the image is redrawn by the rerun)
                "b => { const c = document.querySelector(\"img[data-chart='curve']\");"
                " return c && parseFloat(c.dataset.mark) > b; }",
                arg=before_x,
            )
            expect(page).to_have_url(re.compile(r"view=budget.*budget=|budget=.*view=budget"))

            head = page.locator("[data-node-id^='a']").first
            name = head.get_attribute("data-node-id")
            head.locator("rect").click()
            settle(page)
            expect(page.get_by_role("img", name=f"{name}: attention pattern on the prompt")).to_be_visible()
            if os.environ.get("WORKBENCH_SCREENSHOTS"):
                page.screenshot(path=str(Path(os.environ["WORKBENCH_SCREENSHOTS"]) / "app.png"), full_page=True)

            with page.expect_download() as dl:
                page.get_by_role("button", name="download workbench JSON").click()
            saved = tmp_path / "downloaded.json"
            dl.value.save_as(saved)
            assert json.loads(saved.read_text())["schema"] == "workbench.circuit"
            page.get_by_text("upload a circuit JSON").click()
            bad = tmp_path / "bad.json"
            bad.write_text(json.dumps({"schema": "someone.else", "edges": []}))
            page.locator("input[type=file]").set_input_files(str(bad))
            settle(page)
            expect(page.get_by_text("not a circuit file")).to_be_visible()
            page.locator("input[type=file]").set_input_files(str(saved))
            settle(page)
            expect(page).to_have_url(re.compile(r"circuit=uploaded"))  # set only once an upload passed its checks
            expect(page.get_by_text("not a circuit file")).to_have_count(0)
            page.locator("[data-node-id]").first.wait_for()
            compare_and_back(page)

            if layer2:

                def back_on_the_node() -> None:  # the circuit with its own parameters, not the default one
                    expect(page).to_have_url(re.compile(rf"circuit=circuits%2Fioi-0.*node={re.escape(layer2[0])}"))
                    assert "unit=" not in page.url and "sae=" not in page.url
                    node_text = f"{layer2[0]}: direct logit effect at the answer position"
                    expect(page.get_by_text(node_text)).to_be_visible()

                url = f"{circuit_server}/circuit?circuit=circuits/ioi-0&cap=2000&node={layer2[0]}"
                feature_and_back(page, url, back_on_the_node)
        finally:
            page.screenshot(path=str(tmp_path / "circuit.png"), full_page=True)
    assert_offline(requests)
    assert layer2, "the IOI circuit of the random model has no layer-2 node, so no feature link was followed"


MARKDOWN = "![t](http://tracker.invalid/x.png) [l](http://tracker.invalid/l) <img src='http://tracker.invalid/h.png'>"


def no_links(page) -> None:
    """Nothing on the page links or points to the tracker: no anchor, image or source names it."""
    from playwright.sync_api import expect

    expect(page.locator("[href*='tracker.invalid'], [src*='tracker.invalid']")).to_have_count(0)


def test_text_from_files_is_shown_as_text_and_fetches_nothing(circuit_server, circuit_workspace, tmp_path):
    """A workspace circuit and an upload whose every text field holds Markdown images, links and HTML: the
    pages show the text, and no request leaves 127.0.0.1."""
    import json
    import shutil

    from playwright.sync_api import expect

    from workbench.workspace import Workspace

    folder = circuit_workspace / "circuits" / "markdown-0"
    shutil.copytree(circuit_workspace / "circuits" / "ioi-0", folder, dirs_exist_ok=True)
    (folder / "artifact.json").unlink()
    d = json.loads((folder / "circuit.json").read_text())
    q = d["query"]
    for k in ("prompt", "answer", "wrong", "counterfactual"):
        q[k] = f"{k} {MARKDOWN}"
    q["str_tokens"] = [f"{t}{MARKDOWN}" for t in q["str_tokens"]]
    d["method"]["name"] = MARKDOWN
    (folder / "circuit.json").write_text(json.dumps(d))
    Workspace(circuit_workspace).record(folder, "circuits", made_by=MARKDOWN, config={"note": MARKDOWN})
    upload = tmp_path / "markdown.json"
    upload.write_text(json.dumps(d))
    requests = []
    with browser_page(requests) as page:
        try:
            page.goto(f"{circuit_server}/circuit?circuit=circuits/markdown-0")
            drawn(page)
            expect(page.get_by_text("prompt ![t](http:", exact=False).first).to_be_visible()  # shown as typed
            no_links(page)
            page.get_by_text("upload a circuit JSON").click()
            page.locator("input[type=file]").set_input_files(str(upload))
            drawn(page)
            expect(page).to_have_url(re.compile(r"circuit=uploaded"))
            no_links(page)
            page.screenshot(path=str(tmp_path / "markdown-upload.png"), full_page=True)
            page.goto(circuit_server)  # the Workspace page: manifests' made_by and config
            drawn(page)
            expect(page.get_by_role("heading", name="Workspace")).to_be_visible()
            no_links(page)
        finally:
            page.screenshot(path=str(tmp_path / "markdown.png"), full_page=True)
            shutil.rmtree(folder)
    assert not [u for u in requests if "tracker.invalid" in u]
    assert_offline(requests)


def pinned_in_url(page, heads: list[str]) -> None:
    page.wait_for_function(
        f"new URLSearchParams(location.search).get('pinned') === {','.join(heads)!r}", timeout=WAIT_MS
    )


def upload_restores_marks(page, base: str, exported: Path, heads: list[str]) -> None:
    """A plain link to the circuit has no marks; uploading the exported file brings the pins and the group back."""
    from playwright.sync_api import expect

    page.goto(base)
    drawn(page)
    expect(page).not_to_have_url(re.compile("pinned="))
    page.get_by_text("upload a circuit JSON").click()
    page.locator("input[type=file]").set_input_files(str(exported))
    drawn(page)
    expect(page).to_have_url(re.compile(r"circuit=uploaded"))
    pinned_in_url(page, heads)
    expect(page.locator(".wbg-pinned")).to_have_count(2)
    page.get_by_role("button", name="pinned subgraph (2)").click()
    expect(page.locator("[data-node-id='group:name movers']")).to_have_count(1)


def test_circuit_graph_pins_groups_export_upload_back_forward(circuit_server, circuit_workspace, tmp_path):
    """The graph view on the circuit page (issue #23): hover a node and read its details, pin two nodes and find
    them in the URL and the downloaded Neuronpedia JSON, reload and find them pinned, group them into a supernode
    that survives export -> upload, and go Back/Forward across a feature page keeping circuit, budget and pins."""
    import json

    from playwright.sync_api import expect

    from workbench.circuits import annotations as an

    d = json.loads((circuit_workspace / "circuits" / "ioi-0" / "circuit.json").read_text())
    n_heads = d["graph"]["n_heads"]
    budget = str(d["curve"]["fractions"][-1])  # the whole graph: every node is drawn
    heads = sorted(n["name"] for n in d["nodes"] if n["name"].startswith("a") and n["in_circuit"])[:2]
    assert len(heads) == 2, d["nodes"]
    layer2 = sorted(n["name"] for n in d["nodes"] if n["name"].startswith(("a2.", "m2")))
    base = f"{circuit_server}/circuit?circuit=circuits/ioi-0"
    requests = []

    def download_np(name: str):
        with page.expect_download() as dl:
            page.get_by_role("button", name=re.compile(r"^download (Neuronpedia|the uploaded)")).click()
        path = tmp_path / name
        dl.value.save_as(path)
        return path, an.read_neuronpedia(json.loads(path.read_text()), n_heads)

    with browser_page(requests) as page:
        try:
            page.goto(base)
            drawn(page)
            stage = page.locator(".wbg-stage").bounding_box()  # the page's width (a 30-layer circuit needs it):
            assert stage["width"] >= 900, stage  # 556 px when the node details sat beside it, at 1,400 px
            page.locator(f"[data-node-id='{heads[0]}'] rect").hover()
            expect(page.get_by_test_id("graph-tip")).to_contain_text(f"{heads[0]} · head")
            expect(page.get_by_test_id("graph-tip")).to_contain_text("strongest")
            page.locator(f"[data-node-id='{heads[0]}'] rect").click()
            expect(page.get_by_test_id("graph-details").locator("h4")).to_have_text(f"{heads[0]} · head")
            page.get_by_test_id("graph-details").get_by_role("button", name="pin").click()
            page.locator(f"[data-node-id='{heads[1]}'] rect").click(modifiers=["Shift"])
            pinned_in_url(page, heads)
            drawn(page)
            _, marks = download_np("pinned.json")
            assert marks.pinned == heads
            page.reload()
            drawn(page)
            expect(page.locator(".wbg-pinned")).to_have_count(2)
            page.get_by_placeholder("group name").fill("name movers")
            for h in heads:  # the pins selected for the group (ctrl-click), as the reload forgot the selection
                page.locator(f"[data-node-id='{h}'] rect").click(modifiers=["Control"])
            page.get_by_role("button", name="group selected pins (2)").click()
            page.wait_for_function("new URLSearchParams(location.search).get('groups') !== null", timeout=WAIT_MS)
            drawn(page)
            exported, marks = download_np("grouped.json")
            assert marks.groups == [["name movers", *heads]] and marks.pinned == heads
            with page.expect_download() as dl:  # the workbench JSON carries them too (its `annotations` key)
                page.get_by_role("button", name=re.compile(r"^download workbench JSON")).click()
            assert an.read(json.loads(Path(dl.value.path()).read_text()), n_heads) == marks
            upload_restores_marks(page, base, exported, heads)

            if layer2:

                def back_with_budget_and_pins() -> None:
                    expect(page).to_have_url(re.compile(rf"budget={re.escape(budget)}"))
                    expect(page).to_have_url(re.compile(r"circuit=circuits%2Fioi-0"))
                    pinned_in_url(page, heads)
                    expect(page.locator(".wbg-pinned")).to_have_count(2)

                url = f"{base}&view=budget&budget={budget}&node={layer2[0]}&pinned={','.join(heads)}"
                feature_and_back(page, url, back_with_budget_and_pins)
        finally:
            page.screenshot(path=str(tmp_path / "graph.png"), full_page=True)
    assert_offline(requests)
    assert layer2, "the IOI circuit of the random model has no layer-2 node, so no feature link was followed"


# per Plotly trace on the page: [name, colour scale, drawn (non-NaN) cells of z]; z as Plotly holds it: nested
# arrays, or the typed-array encoding {dtype, bdata (base64), shape} that Plotly's Python side sends
CELLS_JS = """() => {
  const flat = z => {
    if (z && z.bdata) {
      const b = atob(z.bdata), u = new Uint8Array(b.length);
      for (let i = 0; i < b.length; i++) u[i] = b.charCodeAt(i);
      return Array.from(z.dtype === "f4" ? new Float32Array(u.buffer) : new Float64Array(u.buffer));
    }
    return Array.from(z || []).flatMap(r => (typeof r === "number" || r === null ? [r] : flat(r)));
  };
  return [...document.querySelectorAll(".js-plotly-plot")].flatMap(d => d.data.map(t =>
    [t.name || "", JSON.stringify(t.colorscale || ""), flat(t.z).filter(v => v !== null && !Number.isNaN(v)).length]));
}"""


def test_attention_page_closed_gates_difference_and_masks_in_the_browser(circuit_server, tmp_path):
    """The embedded sparse model's Attention page: the sparse pattern carries the closed gates as their own
    trace in their own colour, the view switch draws base - sparse and then every head's mask; offline.
    WORKBENCH_SCREENSHOTS=DIR keeps attention-*.png."""
    from playwright.sync_api import expect

    from app.figures.attention import CLOSED

    shots = os.environ.get("WORKBENCH_SCREENSHOTS")
    requests = []
    with browser_page(requests) as page:
        try:
            page.goto(f"{circuit_server}/attention?model=models/tiny-sparse")
            drawn(page)
            expect(page.get_by_text("orange cells in the sparse model: closed gates")).to_be_visible()
            traces = page.evaluate(CELLS_JS)
            closed = [t for t in traces if t[0] == "closed gate"]
            assert closed and CLOSED in closed[0][1] and closed[0][2] > 0, traces  # cells drawn in CLOSED
            if shots:
                page.screenshot(path=str(Path(shots) / "attention-side.png"), full_page=True)
            page.get_by_text("difference, base − sparse").click()
            drawn(page)
            expect(page).to_have_url(re.compile(r"view=difference"))
            expect(page.locator(".js-plotly-plot").filter(has_text="base − sparse").first).to_be_visible()
            page.get_by_text("open/closed gates, every head of the layer").click()
            drawn(page)
            expect(page.get_by_text(re.compile(r"^a0\.h3: \d+ of \d+ open$"))).to_be_visible()
            if shots:
                page.screenshot(path=str(Path(shots) / "attention-mask.png"), full_page=True)
        finally:
            page.screenshot(path=str(tmp_path / "attention.png"), full_page=True)
    assert_offline(requests)


def test_hostile_uploads_through_the_real_file_input_each_register(circuit_server, circuit_workspace, tmp_path):
    """One file after another through the browser's file input: each damaged one shows its one-line error and
    each valid one (Markdown, links and HTML in its text fields, a marker of its own) replaces the view, so every
    upload is seen to take effect; nothing is fetched beyond 127.0.0.1."""
    import json

    from playwright.sync_api import expect

    d = json.loads((circuit_workspace / "circuits" / "ioi-0" / "circuit.json").read_text())

    def valid(marker: str) -> str:
        q = {**d["query"], "prompt": f"{marker} {MARKDOWN}", "answer": f"answer {MARKDOWN}"}
        return json.dumps({**d, "query": q, "method": {**d["method"], "name": MARKDOWN}})

    uploads = [
        ("deep.json", "[" * 200_000 + "]" * 200_000, "nests JSON arrays or objects too deeply"),
        ("valid-a.json", valid("upload-a"), "upload-a"),
        ("truncated.json", valid("upload-x")[:5000], "is not valid JSON"),
        ("other.json", json.dumps({"schema": "someone.else", "edges": []}), "not a circuit file"),
        ("valid-b.json", valid("upload-b"), "upload-b"),
        ("list.json", "[1, 2, 3]", "not a circuit file (top level a list)"),
    ]
    requests = []
    with browser_page(requests) as page:
        try:
            page.goto(f"{circuit_server}/circuit?circuit=circuits/ioi-0")
            drawn(page)
            page.get_by_text("upload a circuit JSON").click()
            for name, raw, seen in uploads:
                path = tmp_path / name
                path.write_text(raw)
                page.locator("input[type=file]").set_input_files(str(path))
                settle(page)
                expect(page.get_by_text(seen, exact=False).first).to_be_visible()
                no_links(page)
                if name.startswith("valid"):
                    expect(page).to_have_url(re.compile(r"circuit=uploaded"))
        finally:
            page.screenshot(path=str(tmp_path / "uploads.png"), full_page=True)
    assert not [u for u in requests if "tracker.invalid" in u]
    assert_offline(requests)
