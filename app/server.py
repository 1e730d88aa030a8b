"""The app as an ASGI application (`st.App`): what `workbench app` serves; the pages run from main.py as before.

Why not `streamlit run main.py`: Streamlit's client does not know where its server lives, so on a page's own URL
(`/circuit`) it first pings `/circuit/_stcore/health`, gets a 404, waits 100 ms and tries `/`: every full load of
every page but the first paid that (0.13-0.17 s in bench/results/app.md). Here each page's HTML names the server's
root in `window.__streamlit.BACKEND_BASE_URL`, the client's hosting hook, so it connects at once.
"""

import importlib
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` and this checkout's `workbench`

import streamlit as st  # noqa: E402
from starlette.responses import HTMLResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

from app.pages import PAGES  # noqa: E402

INDEX = Path(st.__file__).parent / "static" / "index.html"
HOSTING = "<script>window.__streamlit = {BACKEND_BASE_URL: window.location.origin + '/'};</script>"


def page_html() -> str:
    """Streamlit's own page with the hosting hook first in its head (before the client's module runs)."""
    html = INDEX.read_text(encoding="utf-8")
    if html.count("<head>") != 1:
        raise RuntimeError(f"{INDEX} has no single <head>: this Streamlit's page is not the one app/server.py knows")
    return html.replace("<head>", "<head>" + HOSTING, 1)


PAGE_HTML = page_html()


async def _page(_request) -> HTMLResponse:
    return HTMLResponse(PAGE_HTML, headers={"Cache-Control": "no-cache"})


WARM = "workbench.models"  # torch and TransformerLens: 7-11 s of imports on two busy cores, 0.3 s for tiny's weights


def warm_imports() -> threading.Thread:
    """Import the model stack in the background as the server starts: a page that runs a model (Circuit's node details,
    the prompt box) then loads only the weights, on demand, instead of waiting seconds on imports first. No model is
    loaded here; a page that needs none never waits on this."""
    t = threading.Thread(target=importlib.import_module, args=(WARM,), name="warm-imports", daemon=True)
    t.start()
    return t


warm_imports()
ROUTES = [Route("/", _page)] + [Route(f"/{url}", _page) for _, _, url, _ in PAGES]
app = st.App(str(Path(__file__).with_name("main.py")), routes=ROUTES)
