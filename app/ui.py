"""Streamlit helpers every page shares: cached readers, the SAE picker, deep-link state, errors."""

from __future__ import annotations

import streamlit as st

from app import data
from workbench.errors import UserError

PAGES = [
    ("views/workspace.py", "Workspace", "workspace"),
    ("views/sae.py", "SAEs", "sae"),
    ("views/feature.py", "Feature", "feature"),
    ("views/search.py", "Search", "search"),
    ("views/prompt.py", "Prompt", "prompt"),
    ("views/circuit.py", "Circuit", "circuit"),
    ("views/compare.py", "Compare", "compare"),
    ("views/attention.py", "Attention", "attention"),
    ("views/run.py", "Run", "run"),
]
FEATURE, SAE, SEARCH, PROMPT = "views/feature.py", "views/sae.py", "views/search.py", "views/prompt.py"
CIRCUIT, COMPARE = "views/circuit.py", "views/compare.py"


def root():
    return data.workspace_root()


def fail(msg) -> None:
    """Show a user error and stop the page (no traceback)."""
    st.error(str(msg))
    st.stop()


@st.cache_data(show_spinner=False)
def sae_list(root_str: str, stamp: float) -> list[str]:
    from pathlib import Path

    return data.sae_dirs(Path(root_str))


def saes() -> list[str]:
    r = root()
    return sae_list(str(r), (r / "saes").stat().st_mtime if (r / "saes").exists() else 0.0)


@st.cache_data(show_spinner=False, max_entries=64)
def _sae_info(root_str: str, rel: str, stamp: float) -> dict:
    from pathlib import Path

    return data.sae_info(Path(root_str), rel)


def sae_info(rel: str) -> dict:
    try:
        p = data.resolve(root(), rel)
        return _sae_info(str(root()), rel, _stamp(p))
    except UserError as e:
        fail(e)


def _stamp(folder) -> float:
    """Changes when the folder's SAE or store is rebuilt, so caches never serve stale files."""
    fm = folder / "features" / "manifest.json"
    return max(p.stat().st_mtime for p in [folder, fm] if p.exists())


@st.cache_resource(show_spinner="opening the feature store...", max_entries=16)
def _store(root_str: str, rel: str, stamp: float):
    from pathlib import Path

    return data.open_store(Path(root_str), rel)


def stamp(rel: str) -> float:
    """The stamp of an SAE folder inside the workspace: cache keys of what is read from its store."""
    try:
        return _stamp(data.resolve(root(), rel))
    except UserError as e:
        fail(e)


def store(rel: str):
    try:
        return _store(str(root()), rel, stamp(rel))
    except UserError as e:
        fail(e)


def pick_sae(page: str, require_store: bool = False, label: str = "SAE") -> str:
    """The SAE named by ?sae= (checked to lie in the workspace), else the last one used, else a picker.
    `page` names the calling page: a keyed widget must not share its key with another page's."""
    options = [s for s in saes() if not require_store or (root() / s / "features" / "manifest.json").is_file()]
    want = st.query_params.get("sae") or st.session_state.get("sae")
    if want is not None:
        try:
            data.resolve(root(), want)
        except UserError as e:
            fail(e)
        if want not in options:
            fail(
                f"{want!r} is not an SAE{' with a feature store' if require_store else ''} in this workspace; "
                f"choose one of: {', '.join(options) or '(none)'}"
            )
    if not options:
        fail(
            "this workspace holds no SAE"
            + (" with a feature store (build one with `workbench features build`)" if require_store else "")
        )
    chosen = synced(
        st.selectbox, "sae", want if want in options else options[0], f"w_sae_{page}", label=label, options=options
    )
    st.session_state["sae"] = chosen
    return chosen


def synced(widget, name: str, url_value, key: str, to_url=str, **kwargs):
    """A widget whose value lives in the query parameter `name`: taken from the URL when the URL changed
    from outside (a deep link, a page link), written back when the user changes the widget. The key
    stays fixed, so the widget keeps its identity (and focus) while its value changes."""
    mark = f"_url_{key}"
    if key not in st.session_state or st.session_state.get(mark) != url_value:
        st.session_state[key] = url_value
    out = widget(key=key, **kwargs)
    st.session_state[mark] = out
    st.query_params[name] = to_url(out)  # always sent: a link to the same page does not update the URL by itself
    return out


def int_param(name: str, default: int | None = None) -> int | None:
    raw = st.query_params.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        fail(f"query parameter {name}={raw!r} is not an integer")


def feature_link(sae: str, unit: int, label: str | None = None) -> None:
    st.page_link(FEATURE, label=label or f"unit {unit}", query_params={"sae": sae, "unit": str(unit)})
