"""Entry script of the workbench app's pages: app/server.py serves it (`workbench app`), AppTest runs it directly.

Pages are registered here with st.navigation; each page keeps its view state in the URL's query
parameters, so every view is a deep link.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `app` and this checkout's `workbench`

import streamlit as st  # noqa: E402

from app import state  # noqa: E402

st.set_page_config(page_title="workbench", layout="wide")
state.new_run()
nav = st.navigation([st.Page(p, title=t, url_path=u, default=u == "workspace") for p, t, u, _ in state.PAGES])
st.sidebar.caption(f"workspace: `{state.root()}`")
state.own_params(nav.url_path or "workspace")
nav.run()
