"""Every step works on any model the loader returns: no LayerNorm at all, grouped-query attention (with
RMSNorm, rotary positions, a gated MLP) and learned absolute positions, each saved and loaded as a folder."""

import pytest
import torch
from small_models import VARIANTS, small_model

from workbench.cache.config import HarvestConfig
from workbench.circuits import find_circuit
from workbench.circuits.component.hooks import answer_logits, writer_means
from workbench.corpus import tasks
from workbench.models import load, save
from workbench.sae.config import SAEConfig, TrainConfig
from workbench.steps import circuits as circuit_steps
from workbench.steps.cache import make_cache
from workbench.steps.dictionaries import train_saes
from workbench.steps.features import build_features
from workbench.workspace import Workspace

HOOK = "blocks.1.hook_resid_post"


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request, tokenizer, tmp_path_factory):
    """(the loaded model, its folder, a workspace) for one architecture variant."""
    root = tmp_path_factory.mktemp(request.param)
    folder = save(small_model(tokenizer, seed=1, **VARIANTS[request.param]), root / "model")
    model, _ = load(str(folder), device="cpu")
    return model, folder, Workspace(root / "ws")


def test_the_loaded_model_is_the_variant(variant):
    model, _, _ = variant
    tokens = torch.tensor([[0, 5, 6, 7]])
    logits = model(tokens)
    assert torch.isfinite(logits).all()
    resid = model(tokens, stop_at_layer=model.cfg.n_layers)
    torch.testing.assert_close(answer_logits(model, resid), logits[:, -1])  # the circuits' own unembedding


def test_circuit_find_and_mean_ablation(variant, tokenizer):
    model, folder, ws = variant
    q = tasks.queries("ioi", 1, seed=0, tokenizer=tokenizer)[0]
    c, path = circuit_steps.find_circuit(
        ws,
        model,
        q.prompt,
        q.answer,
        q.counterfactual,
        model_spec=str(folder),
        budget=0.1,
        n_samples=1,
        steps=2,
        refine_steps=1,
        min_gap=0.0,
    )
    assert c.n_edges > 0 and c.ndf is not None and (path / "mib.json").is_file()
    means = writer_means(model, [q.prompt])
    c = find_circuit(
        model, q, budget=0.1, n_samples=1, steps=2, refine_steps=1, min_gap=0.0, ablation="mean", means=means
    )
    assert c.n_edges > 0


def test_cache_sae_training_and_features(variant):
    _, folder, ws = variant
    cache = make_cache(
        ws,
        str(folder),
        "synthetic",
        [HOOK],
        HarvestConfig(n_tokens=1200, heldout_fraction=0.2),
        name="c",
        progress=False,
    )
    assert cache.n_tokens("train") > 0 and torch.isfinite(cache.rows(HOOK, [0, 1])).all()
    [sae_dir] = train_saes(
        ws,
        cache.path,
        HOOK,
        [SAEConfig("topk", k=4, expansion=2)],
        TrainConfig(n_tokens=512, batch_size=128, warmup_steps=1, progress=False),
        name="run",
    )
    from workbench.sae.io import load_sae

    assert load_sae(sae_dir).cfg.d_in == cache.d(HOOK)
    from workbench.features.config import FeatureConfig

    [store] = build_features(ws, [sae_dir], cache.path, str(folder), FeatureConfig(corr_tokens=200), progress=False)
    assert store.n_units == 64 and "W_U" in store.manifest["logit_effects"]


def test_attention_gates_train_and_save(variant, tmp_path):
    from workbench.attention.config import GateConfig, SparsifyConfig
    from workbench.attention.gates import is_gated
    from workbench.attention.train import sparsify

    _, folder, _ = variant
    cfg = SparsifyConfig(
        steps=4,
        batch_size=4,
        eval_sequences=4,
        eval_every=2,
        checkpoint_every=2,
        tolerance=0.5,
        ctx_len=24,
        progress=False,
        gates=GateConfig(init_bias=1.0),
    )
    report = sparsify(str(folder), tmp_path / "sparse", cfg, report_queries=2)
    assert 0 < report["open_fraction"] <= 1
    assert is_gated(load(str(tmp_path / "sparse"), device="cpu")[0])
