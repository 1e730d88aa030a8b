import json

import pytest

from workbench.demo import run_demo
from workbench.errors import OutputExistsError
from workbench.workspace import Workspace


@pytest.mark.slow
def test_demo_fills_a_workspace_with_manifested_artifacts(tiny, tmp_path):
    summary = run_demo(tmp_path / "ws", progress=False, cache_tokens=20_000, sae_tokens=60_000)
    ws = Workspace(tmp_path / "ws")
    kinds_before = ws.artifacts()
    kinds = {a.kind for a in kinds_before}
    assert kinds == {"caches", "saes", "circuits"}
    for art in ws.artifacts():
        assert art.manifest["files"], art.name  # checksums of every file
    circuit = json.loads((tmp_path / "ws" / "circuits" / "ioi-0" / "circuit.json").read_text())
    assert circuit["model_id"] == summary["model"]
    with pytest.raises(FileExistsError, match="--overwrite"):
        run_demo(tmp_path / "ws", progress=False)
    # --overwrite removes only what the manifests list: a user's file blocks it and survives
    (tmp_path / "ws" / "notes.md").write_text("mine")
    with pytest.raises(OutputExistsError, match="notes.md"):
        run_demo(tmp_path / "ws", overwrite=True, progress=False)
    assert (tmp_path / "ws" / "notes.md").read_text() == "mine" and len(ws.artifacts()) == len(kinds_before)
    (tmp_path / "ws" / "notes.md").unlink()
    ws.clear()  # what run_demo(overwrite=True) does first
    assert not (tmp_path / "ws").exists()
