"""ensure=True: a complete cache is returned as it is (nothing reloaded or rewritten); without it the folder is refused."""

import pytest

from workbench.cache.config import HarvestConfig
from workbench.errors import OutputExistsError
from workbench.steps.cache import make_cache
from workbench.workspace import MANIFEST, Workspace

HOOK = "blocks.1.hook_resid_post"


def test_ensure_returns_a_complete_cache_as_it_is(tiny, tmp_path):
    model, _ = tiny
    ws = Workspace(tmp_path / "ws")
    cache = make_cache(
        ws, "tiny", hooks=[HOOK], cfg=HarvestConfig(n_tokens=3000), name="c", progress=False, model=model
    )
    manifest = (cache.path / MANIFEST).read_text()
    # complete: returned without loading a model (this spec names none) and without rewriting the manifest
    again = make_cache(ws, "no-such-model", hooks=[HOOK], name="c", ensure=True)
    assert again.path == cache.path and (cache.path / MANIFEST).read_text() == manifest
    with pytest.raises(OutputExistsError, match="already holds"):  # without ensure the same call refuses the folder
        make_cache(ws, "tiny", hooks=[HOOK], cfg=HarvestConfig(n_tokens=3000), name="c", progress=False, model=model)
