"""ensure=True: a complete artifact is returned as it is (nothing reloaded or rewritten), an interrupted one resumes."""

import json
from pathlib import Path

import pytest

from workbench import browse, steps
from workbench.cache.config import HarvestConfig
from workbench.errors import DamagedFileError, OutputExistsError
from workbench.sae.config import SAEConfig, TrainConfig
from workbench.workspace import MANIFEST, Workspace

HOOK = "blocks.1.hook_resid_post"
ROOT = Path(__file__).resolve().parents[1]


def test_ensure_returns_complete_artifacts_and_resumes_an_interrupted_run(tiny, tmp_path):
    model, _ = tiny
    ws = Workspace(tmp_path / "ws")
    cache = steps.make_cache(
        ws, "tiny", hooks=[HOOK], cfg=HarvestConfig(n_tokens=3000), name="c", progress=False, model=model
    )
    manifest = (cache.path / MANIFEST).read_text()
    # complete: returned without loading a model (this spec names none) and without rewriting the manifest
    again = steps.make_cache(ws, "no-such-model", hooks=[HOOK], name="c", ensure=True)
    assert again.path == cache.path and (cache.path / MANIFEST).read_text() == manifest
    with pytest.raises(OutputExistsError, match="already holds"):  # without ensure the same call refuses the folder
        steps.make_cache(
            ws, "tiny", hooks=[HOOK], cfg=HarvestConfig(n_tokens=3000), name="c", progress=False, model=model
        )

    cfgs = [SAEConfig(architecture="topk", k=4, expansion=2)]
    train = TrainConfig(n_tokens=4096, batch_size=1024, checkpoint_every=2, progress=False)
    (folder,) = steps.train_saes(ws, cache.path, HOOK, cfgs, train, name="run")
    (manifest_path := folder / MANIFEST).unlink()  # as if the run had stopped before recording its SAE
    with pytest.raises(DamagedFileError, match="pass resume=True"):  # without ensure the run folder is refused
        steps.train_saes(ws, cache.path, HOOK, cfgs, train, name="run")
    (resumed,) = steps.train_saes(ws, cache.path, HOOK, cfgs, train, name="run", ensure=True)  # resumes
    assert resumed == folder and manifest_path.is_file()
    assert steps.train_saes(ws, cache.path, HOOK, cfgs, train, name="run", ensure=True) == [folder]
    assert json.loads(manifest_path.read_text())["kind"] == "saes"


def test_ensure_on_a_circuit_needs_its_name(tiny, tmp_path):
    with pytest.raises(ValueError, match="needs the circuit's name"):
        steps.find_circuit(Workspace(tmp_path), tiny[0], "a b", "c", ensure=True)


@pytest.mark.parametrize("name, base, flows", [("tiny-sparse", "tiny", 0), ("small-sparse", "small", 10)])
def test_the_embedded_sparse_model_is_copied_recorded_and_loadable(name, base, flows, tmp_path):
    """Each embedded sparse model ships its circuit claims for Compare: the committed section-3 results of
    bench/circuits/circuit_claims.py for all five task families, byte for byte (flows: the head flows through per-layer sets
    and CLTs, one per family and kind)."""
    from workbench.errors import BadValueError
    from workbench.models import load, model_id

    ws = Workspace(tmp_path / "ws")
    report, folder = steps.embedded_sparse_model(ws, name, ensure=True)
    art = next(a for a in ws.artifacts("models"))
    assert art.name == name and art.manifest["made_by"] == f"embedded data/models/{name}"
    assert {"model.safetensors", "attention_report.json", "README.md"} <= set(art.manifest["files"])
    shipped = dict(browse.compare_results(folder))  # the circuit claims measured on this model, for Compare
    assert set(shipped) == {"ioi", "induction", "greater_than", "addition", "facts"}
    assert all(r["n"] == 20 and r["sparse_model"] == report["model_id"] for r in shipped.values())
    assert all(r["base_model"] == report["base_model"] for r in shipped.values())
    claims = ROOT / "bench" / "results" / "circuit_claims" / f"{base}-vs-{name}"
    for task in shipped:
        assert (folder / "compare" / f"{task}.json").read_bytes() == (claims / f"heldout-{task}-n20.json").read_bytes()
    heads = browse.head_flow_results(folder)
    assert len(heads) == flows and {kind for kind, _, _ in heads} <= {"set", "clt"}
    for kind, task, res in heads:
        stored = claims / f"heads-{kind}-heldout-{task}-n20.json"
        assert (folder / "compare" / f"heads-{kind}-{task}.json").read_bytes() == stored.read_bytes()
        assert res["n"] == 20 and res["sparse_model"] == report["model_id"] and res["task"] == task
    assert art.manifest["summary"]["mean_open_keys_per_query"] == report["mean_open_keys_per_query"]
    assert model_id(load(str(folder), device="cpu")[0]) == report["model_id"] == model_id(load(name)[0])
    manifest = (folder / MANIFEST).read_text()
    assert (
        steps.embedded_sparse_model(ws, name, ensure=True)[1] == folder and (folder / MANIFEST).read_text() == manifest
    )
    with pytest.raises(OutputExistsError, match="already holds a model"):
        steps.embedded_sparse_model(ws, name)
    if flows:  # a listed file outside the naming scheme is refused by name, not misread
        (folder / "compare" / "heads-sae-ioi.json").write_bytes(
            (folder / "compare" / "heads-set-ioi.json").read_bytes()
        )
        steps.rerecord(ws, folder, "models", "a test")
        with pytest.raises(DamagedFileError, match=r"heads-sae-ioi.json: .* with kind one of set, clt; rename"):
            browse.head_flow_results(folder)
    with pytest.raises(
        BadValueError,
        match="'tiny' is not an embedded sparse-attention model; choose one of: tiny-sparse, small-sparse",
    ):
        steps.embedded_sparse_model(ws, "tiny")


def test_record_adopts_what_the_python_api_made_and_names_what_it_cannot(tiny, tmp_path):
    from workbench.cache import harvest
    from workbench.corpus import load_corpus
    from workbench.errors import BadValueError
    from workbench.models import save

    model, tok = tiny
    ws = Workspace(tmp_path / "ws")
    harvest(model, load_corpus("synthetic", tok), [HOOK], tmp_path / "api-cache", n_tokens=2000, progress=False)
    folders = [tmp_path / "api-cache", save(model, tmp_path / "api-model")]
    assert steps.record(ws, *folders) == folders
    made = {a.kind: a for a in ws.artifacts()}
    assert set(made) == {"caches", "models"} and made["caches"].manifest["made_by"] == steps.API
    assert made["caches"].manifest["inputs"]["model"] == json.loads((folders[0] / "manifest.json").read_text())["model"]
    (tmp_path / "notes").mkdir()
    with pytest.raises(BadValueError, match="is none of what `record` takes: a cache folder"):
        steps.record(ws, tmp_path / "notes")
