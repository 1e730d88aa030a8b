"""The app's read side imports no torch, TransformerLens or sae_lens: views, figures and state stand on
workbench.browse and the circuit schema; only app/live.py runs a model."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "modules",
    [
        "app.state",
        "app.figures.circuit, app.figures.sae, app.figures.attention",
        "workbench.browse",
        "workbench.circuits.schema",
    ],
)
def test_read_side_imports_no_torch(modules):
    code = (
        f"import sys, json\nimport {modules}\nfrom workbench.features import FeatureStore\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformer_lens', 'sae_lens'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_only_live_imports_torch_in_the_app():
    """No app module but live.py names torch, the model loader or training code at all (server.py names the model
    stack once, to import it in a background thread as the server starts, so that no page waits on it)."""
    heavy = ("import torch", "from torch", "workbench.models", "workbench.sae", "transformer_lens", "workbench.steps")
    for p in sorted((ROOT / "app").rglob("*.py")):
        if p.name in ("live.py", "run.py"):
            continue
        if p.name == "server.py":
            assert [h for h in heavy if h in p.read_text()] == ["workbench.models"]
            continue
        text = p.read_text()
        assert not [h for h in heavy if h in text], p


def test_no_pages_folder_beside_the_entry_script():
    """Streamlit would run app/main.py in its legacy multipage mode and skip its st.navigation (titles, URLs)."""
    assert not (ROOT / "app" / "pages").exists()
