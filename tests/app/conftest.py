from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app" / "main.py"


@pytest.fixture
def app(feature_workspace, monkeypatch):
    """A fresh AppTest of the whole app on the small workspace; call with (page, **query params)."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("WORKBENCH_WORKSPACE", str(feature_workspace))

    def run(page: str | None = None, **params):
        at = AppTest.from_file(str(APP), default_timeout=120)
        if page:
            at.switch_page(page)
        for k, v in params.items():
            at.query_params[k] = v
        at.run()
        return at

    return run
