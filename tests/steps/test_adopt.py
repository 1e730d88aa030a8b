"""`record`: what the Python API made, adopted into a workspace."""

import json

import pytest

from workbench.steps.adopt import API, record
from workbench.workspace import Workspace

HOOK = "blocks.1.hook_resid_post"


def test_record_adopts_what_the_python_api_made_and_names_what_it_cannot(tiny, tmp_path):
    from workbench.cache import harvest
    from workbench.corpus import load_corpus
    from workbench.errors import BadValueError
    from workbench.models import save

    model, tok = tiny
    ws = Workspace(tmp_path / "ws")
    harvest(model, load_corpus("synthetic", tok), [HOOK], tmp_path / "api-cache", n_tokens=2000, progress=False)
    folders = [tmp_path / "api-cache", save(model, tmp_path / "api-model")]
    assert record(ws, *folders) == folders
    made = {a.kind: a for a in ws.artifacts()}
    assert set(made) == {"caches", "models"} and made["caches"].manifest["made_by"] == API
    assert made["caches"].manifest["inputs"]["model"] == json.loads((folders[0] / "manifest.json").read_text())["model"]
    (tmp_path / "notes").mkdir()
    with pytest.raises(BadValueError, match="is none of what `record` takes: a cache folder"):
        record(ws, tmp_path / "notes")
