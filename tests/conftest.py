import pytest
import torch

# pytest -n 2 runs two workers on two cores: one thread each avoids oversubscription stalls.
torch.set_num_threads(1)

from workbench.corpus.synthetic import vocabulary
from workbench.models.tokenizer import build_tokenizer


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer(vocabulary())


@pytest.fixture(scope="session")
def tiny():
    """The embedded model and its tokenizer (loaded once per test session)."""
    from workbench.models import load

    return load("tiny", device="cpu")


@pytest.fixture(scope="session")
def feature_workspace(tmp_path_factory):
    """A small real workspace for the feature store and the app: a random-init model of the embedded
    shape (saved under models/), a cache of one hook, a Top-k, a Matryoshka + scaffold and a block
    Top-k SAE trained for a few steps and evaluated, and their feature stores."""
    from workbench import sae
    from workbench.cache import harvest
    from workbench.corpus import load_corpus
    from workbench.features.build import build_stores
    from workbench.features.config import FeatureConfig
    from workbench.models import model_id, save
    from workbench.models.toy import TinyConfig, build
    from workbench.workspace import Workspace

    root = tmp_path_factory.mktemp("workspace")
    ws = Workspace(root)
    hook = "blocks.2.hook_resid_post"
    tok = build_tokenizer(vocabulary())
    model = build(TinyConfig(), tok)
    mid = model_id(model)
    save(model, ws.path("models", "random"))
    ws.record("models", "random", made_by="test", config={}, summary={"model_id": mid})
    cache = ws.path("caches", "random-synthetic")
    harvest(model, load_corpus("synthetic", tok), [hook], cache, 6000, heldout_fraction=0.3, progress=False)
    ws.record("caches", cache.name, made_by="workbench cache", config={"hook": hook}, inputs={"model": mid}, checksums=False)
    cfgs = [sae.SAEConfig("topk", k=8, expansion=4), sae.SAEConfig("matryoshka", k=8, expansion=4, scaffold_rank=4),
            sae.SAEConfig("block_topk", expansion=4, block_size=4, n_active_blocks=2)]
    folders = sae.train(cache, hook, cfgs, sae.TrainConfig(n_tokens=16_384, batch_size=512, lr=1e-3, progress=False),
                        root / "saes")
    for f in folders:
        m = sae.evaluate(f, cache, str(ws.path("models", "random")), max_tokens=1000, n_sequences=4)
        ws.record("saes", f.name, made_by="workbench sae train", config={"hook": hook}, inputs={"cache": str(cache)},
                  summary={"fvu": m["reconstruction"]["fvu"]})
    build_stores(folders, cache, str(ws.path("models", "random")), FeatureConfig(chunk_rows=1000, corr_tokens=1500),
                 progress=False)
    return root
