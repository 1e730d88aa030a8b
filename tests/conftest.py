import pytest
import torch

# pytest -n 2 runs two workers on two cores: one thread each avoids oversubscription stalls.
torch.set_num_threads(1)

from workbench.corpus.vocab import vocabulary
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
    """A small real workspace for the feature store and the app, made through workbench.steps: a
    random-init model of the embedded shape (saved under models/), a cache of one hook, a Top-k, a
    Matryoshka + scaffold and a block Top-k SAE trained for a few steps and evaluated, and their
    feature stores."""
    from workbench.cache.config import HarvestConfig
    from workbench.features.config import FeatureConfig
    from workbench.models import save
    from workbench.models.toy import TinyConfig, build
    from workbench.provenance import model_id
    from workbench.sae.config import EvalConfig, SAEConfig, TrainConfig
    from workbench.steps.cache import make_cache
    from workbench.steps.dictionaries import evaluate_sae, train_saes
    from workbench.steps.features import build_features
    from workbench.workspace import Workspace

    root = tmp_path_factory.mktemp("workspace")
    ws = Workspace(root)
    hook = "blocks.2.hook_resid_post"
    model = build(TinyConfig(), build_tokenizer(vocabulary()))
    model_dir = save(model, ws.path("models", "random"))
    ws.record(model_dir, "models", made_by="test", config={}, summary={"model_id": model_id(model)})
    cache = make_cache(
        ws,
        str(model_dir),
        "synthetic",
        [hook],
        HarvestConfig(n_tokens=6000, heldout_fraction=0.3),
        name="random-synthetic",
        progress=False,
        model=model,
    )
    cfgs = [
        SAEConfig("topk", k=8, expansion=4),
        SAEConfig("matryoshka", k=8, expansion=4, scaffold_rank=4),
        SAEConfig("block_topk", expansion=4, block_size=4, n_active_blocks=2),
    ]
    folders = train_saes(
        ws, cache.path, hook, cfgs, TrainConfig(n_tokens=16_384, batch_size=512, lr=1e-3, progress=False), name="run"
    )
    for f in folders:
        evaluate_sae(ws, f, cache.path, str(model_dir), EvalConfig(max_tokens=1000, n_sequences=4))
    build_features(
        ws, folders, cache.path, str(model_dir), FeatureConfig(chunk_rows=1000, corr_tokens=1500), progress=False
    )
    return root


@pytest.fixture(scope="session")
def transcoder_workspace(feature_workspace, tmp_path_factory):
    """The feature workspace (copied) plus a transcoder set of its random model, made through workbench.steps: a
    cache of the default hooks (each MLP's input and output among them), a Top-k transcoder on layers 0 and 2
    trained for a few steps, the set evaluated (every MLP replaced at once), and the members' feature stores."""
    import shutil

    from workbench.cache.config import HarvestConfig
    from workbench.features.config import FeatureConfig
    from workbench.sae.config import EvalConfig, SAEConfig, TrainConfig
    from workbench.steps.cache import make_cache
    from workbench.steps.dictionaries import evaluate_sae, train_transcoder_set
    from workbench.steps.features import build_features
    from workbench.workspace import Workspace

    root = tmp_path_factory.mktemp("transcoders") / "ws"
    shutil.copytree(feature_workspace, root, symlinks=True)
    ws = Workspace(root)
    model_dir = str(root / "models" / "random")
    cache = make_cache(
        ws, model_dir, "synthetic", None, HarvestConfig(n_tokens=6000, heldout_fraction=0.3), name="mlp", progress=False
    )
    folder, members = train_transcoder_set(
        ws,
        cache.path,
        "0,2",
        [SAEConfig("topk", k=8, expansion=4)],
        TrainConfig(n_tokens=8192, batch_size=512, lr=1e-3, progress=False),
        name="set",
    )
    evaluate_sae(ws, folder, cache.path, model_dir, EvalConfig(max_tokens=1000, n_sequences=4))
    build_features(ws, members, cache.path, model_dir, FeatureConfig(chunk_rows=1000, corr_tokens=1500), progress=False)
    return root


def _small_cache(spec, model, root):
    """A small cache of the default hooks (every MLP's input and output) of a model, under root/cache."""
    from workbench.cache.config import HarvestConfig
    from workbench.steps.cache import make_cache
    from workbench.workspace import Workspace

    cfg = HarvestConfig(n_tokens=6000, heldout_fraction=0.2)
    make_cache(Workspace(root / "ws"), spec, "synthetic", None, cfg, out=root / "cache", progress=False, model=model)
    return root / "cache"


def _brief_training():
    from workbench.sae.config import TrainConfig

    return TrainConfig(n_tokens=512 * 12, batch_size=512, lr=3e-3, warmup_steps=2, progress=False)


def _train_set(spec, model, root):
    """A transcoder set on every layer of a model, trained briefly on a small cache of it."""
    from workbench.sae.config import SAEConfig
    from workbench.sae.transcoders import train_set

    cache = _small_cache(spec, model, root)
    folder, _ = train_set(cache, "all", [SAEConfig("topk", k=8, expansion=4)], _brief_training(), root / "set")
    return folder


@pytest.fixture(scope="session")
def tiny_set(tiny, tmp_path_factory):
    """A transcoder set of the embedded model."""
    return _train_set("tiny", tiny[0], tmp_path_factory.mktemp("tiny_set"))


def _train_clt(spec, model, root):
    """A BatchTopK cross-layer transcoder over every layer of a model (so circuit-tracer's files are written beside
    it), trained briefly on a small cache of it."""
    from workbench.sae.config import CLTConfig
    from workbench.sae.transcoders import train_clt

    cache = _small_cache(spec, model, root)
    return train_clt(cache, "all", CLTConfig("batchtopk", k=8, expansion=4), _brief_training(), root / "clt")


@pytest.fixture(scope="session")
def tiny_clt(tiny, tmp_path_factory):
    """A cross-layer transcoder of the embedded model."""
    return _train_clt("tiny", tiny[0], tmp_path_factory.mktemp("tiny_clt"))


@pytest.fixture(scope="session")
def tiny_sparse_clt(tiny_sparse, tmp_path_factory):
    """A cross-layer transcoder of the embedded sparse-attention model, by tiny_clt's recipe."""
    return _train_clt("tiny-sparse", tiny_sparse[0], tmp_path_factory.mktemp("tiny_sparse_clt"))


SPARSE = "tiny-sparse"


@pytest.fixture(scope="session")
def tiny_sparse():
    from workbench.models import load

    return load(SPARSE, device="cpu")


@pytest.fixture(scope="session")
def sparse_set(tiny_sparse, tmp_path_factory):
    """A transcoder set of the embedded sparse-attention model."""
    return _train_set(SPARSE, tiny_sparse[0], tmp_path_factory.mktemp("sparse_set"))


@pytest.fixture(scope="session")
def small_world(tmp_path_factory):
    """A 2-layer random model (tests/small_models.py, the corpus tokenizer) saved, a cache of its default hooks
    (each MLP's input and output among them) and a one-pass transcoder set of both layers, made through the CLI:
    {"root", "model", "cache", "set", "train": the set's training flags, "two_passes_mib": a --memory-budget-mib that
    splits it into two passes}."""
    from small_models import small_model

    from workbench.cache.config import HarvestConfig
    from workbench.cli import main
    from workbench.models import save
    from workbench.sae.transcoders import load_set
    from workbench.steps.cache import make_cache
    from workbench.workspace import Workspace

    root = tmp_path_factory.mktemp("small_world")
    model = small_model(build_tokenizer(vocabulary()), seed=0)
    save(model, root / "model")
    cfg = HarvestConfig(n_tokens=3000, heldout_fraction=0.2)
    make_cache(
        Workspace(root / "ws"),
        str(root / "model"),
        "synthetic",
        None,
        cfg,
        out=root / "cache",
        progress=False,
        model=model,
    )
    train = ["--k", "4", "--expansion", "2", "--tokens", "2048", "--batch-size", "256", "--warmup-steps", "2"]
    train += ["--checkpoint-every", "2", "--log-every", "2", "--quiet"]
    argv = ["sae", "train", "--cache", str(root / "cache"), "--transcoders", "all", *train]
    assert main([*argv, "--out", str(root / "set"), "--workspace", str(root / "ws")]) == 0
    from workbench.cache import ActivationCache
    from workbench.cache.hooks import transcoder_hooks
    from workbench.sae.config import SAEConfig, TrainConfig
    from workbench.sae.transcoders import plan_passes

    cache = ActivationCache.open(root / "cache")
    layer0 = {0: (*transcoder_hooks(0, cache.hooks), [SAEConfig("topk", k=4, expansion=2)])}
    alone = plan_passes(cache, layer0, TrainConfig(n_tokens=2048, batch_size=256))["estimate_mib"][0]
    both = load_set(root / "set")["memory"]["estimate_mib"][0]
    budget = (alone + both) / 2  # room for one layer per pass, not two: a two-pass set
    return {
        "root": root,
        "model": root / "model",
        "cache": root / "cache",
        "set": root / "set",
        "train": train,
        "two_passes_mib": budget,
    }
