"""The read-only layer, on artifacts the steps really made (tiny sizes)."""

import pytest

from workbench import browse, steps
from workbench.cache.config import HarvestConfig
from workbench.errors import MissingInputError
from workbench.sae.config import SAEConfig, TrainConfig
from workbench.workspace import Workspace

HOOK = "blocks.1.hook_resid_post"


@pytest.fixture(scope="module")
def made(tiny, tmp_path_factory):
    model, tok = tiny
    ws = Workspace(tmp_path_factory.mktemp("browse") / "ws")
    cache = steps.make_cache(ws, "tiny", "synthetic", [HOOK], HarvestConfig(n_tokens=3000), progress=False, model=model)
    [sae] = steps.train_saes(
        ws,
        cache.path,
        HOOK,
        [SAEConfig(k=4, expansion=2)],
        TrainConfig(n_tokens=4096, batch_size=1024, progress=False),
        name="run",
    )
    from workbench.corpus import tasks

    q = tasks.queries("induction", 1, tokenizer=tok)[0]
    _, circuit = steps.find_circuit(
        ws,
        model,
        q.prompt,
        q.answer,
        q.counterfactual,
        wrong=q.wrong,
        budget=0.1,
        n_samples=1,
        steps=2,
        refine_steps=1,
        min_gap=0.0,
        curve=False,
    )
    return ws, cache, sae, circuit


def test_artifacts_by_kind(made):
    ws, cache, sae, circuit = made
    assert [a.path for a in browse.artifacts(ws.root, "caches")] == [cache.path]
    assert [a.path for a in browse.artifacts(ws.root, "saes")] == [sae]
    assert [a.path for a in browse.artifacts(ws.root, "circuits")] == [circuit]


def test_open_sae_reads_config_info_and_curves(made):
    _, _, sae, _ = made
    view = browse.open_sae(sae)
    assert view.hook == HOOK and view.info["sae_config"]["k"] == 4 and view.curves and "fvu" in view.curves[-1]
    assert view.metrics == {}  # not evaluated yet


def test_open_cache_maps_the_token_ids(made):
    _, cache, _, _ = made
    view = browse.open_cache(cache.path)
    assert view.hooks == [HOOK] and view.n_tokens("train") == cache.n_tokens("train")
    assert (view.token_ids("train") == cache.token_ids("train")).all()
    assert (view.sequences("heldout") == cache.sequences("heldout")).all()
    with pytest.raises(MissingInputError, match="no split 'test'"):
        view.token_ids("test")


def test_open_circuit_reads_the_folder_or_the_file(made):
    _, _, _, circuit = made
    d = browse.open_circuit(circuit)
    assert d == browse.open_circuit(circuit / "circuit.json") and d["schema"] == "workbench.circuit"
    with pytest.raises(MissingInputError, match="not a workbench circuit file"):
        browse.open_circuit(circuit / "mib.json")
