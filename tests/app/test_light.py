"""The app's read side (everything but the prompt view) imports no torch, TransformerLens or sae_lens."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_app_read_layer_imports_no_torch():
    code = (
        "import sys, json\nimport app.data, app.plots\nfrom workbench.features import FeatureStore\n"
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
