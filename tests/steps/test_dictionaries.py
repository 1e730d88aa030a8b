"""ensure=True on a training run: an interrupted run resumes from its checkpoint, a complete one is returned as it is."""

import json

import pytest

from workbench.cache.config import HarvestConfig
from workbench.errors import DamagedFileError
from workbench.sae.config import SAEConfig, TrainConfig
from workbench.steps.cache import make_cache
from workbench.steps.dictionaries import train_saes
from workbench.workspace import MANIFEST, Workspace

HOOK = "blocks.1.hook_resid_post"


def test_ensure_resumes_an_interrupted_training_run_and_returns_a_complete_one(tiny, tmp_path):
    model, _ = tiny
    ws = Workspace(tmp_path / "ws")
    cache = make_cache(
        ws, "tiny", hooks=[HOOK], cfg=HarvestConfig(n_tokens=3000), name="c", progress=False, model=model
    )
    cfgs = [SAEConfig(architecture="topk", k=4, expansion=2)]
    train = TrainConfig(n_tokens=4096, batch_size=1024, checkpoint_every=2, progress=False)
    (folder,) = train_saes(ws, cache.path, HOOK, cfgs, train, name="run")
    (manifest_path := folder / MANIFEST).unlink()  # as if the run had stopped before recording its SAE
    with pytest.raises(DamagedFileError, match="pass resume=True"):  # without ensure the run folder is refused
        train_saes(ws, cache.path, HOOK, cfgs, train, name="run")
    (resumed,) = train_saes(ws, cache.path, HOOK, cfgs, train, name="run", ensure=True)  # resumes
    assert resumed == folder and manifest_path.is_file()
    assert train_saes(ws, cache.path, HOOK, cfgs, train, name="run", ensure=True) == [folder]
    assert json.loads(manifest_path.read_text())["kind"] == "saes"
