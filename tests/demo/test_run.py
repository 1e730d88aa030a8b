import json

import pytest

from workbench.cli import main
from workbench.demo.config import DemoConfig
from workbench.demo.run import run_demo
from workbench.errors import BadValueError, OutputExistsError
from workbench.workspace import Workspace

TINY = DemoConfig(
    cache_tokens=20_000,
    sae_tokens=40_000,
    transcoder_tokens=8192,
    sparsify_steps=4,
    sparsify_eval_every=2,
    sparsify_eval_sequences=4,
    report_queries=2,
    samples=1,
    tasks="ioi",
)


@pytest.mark.slow
def test_demo_fills_a_workspace_then_resumes_without_redoing_anything(tiny, tmp_path, capsys):
    summary = run_demo(tmp_path / "ws", TINY, progress=False)
    ws = Workspace(tmp_path / "ws")
    arts = ws.artifacts()
    assert {a.kind for a in arts} == {
        "caches",
        "saes",
        "transcoders",
        "features",
        "circuits",
        "models",
        "interventions",
    }
    # four SAEs and one transcoder per layer of the embedded model (4), each with its feature store
    assert len([a for a in arts if a.kind == "saes"]) == 8 and len([a for a in arts if a.kind == "features"]) == 8
    tset = json.loads((tmp_path / "ws" / "transcoders" / "tiny-topk" / "transcoders.json").read_text())
    assert [e["input_hook"] for e in tset["layers"]] == [f"blocks.{i}.ln2.hook_normalized" for i in range(4)]
    assert set(summary["transcoders"]["all_replaced"]) == {
        "topk_n1024_k16_seed0"
    }  # one config, every layer replaced at once
    for art in arts:
        assert art.manifest["files"], art.name  # checksums of every file
    circuits = {a.name for a in arts if a.kind == "circuits"}
    assert circuits <= {"ioi-0", "ioi-0-sparse", "graph-ioi", "features-ioi"} and {"ioi-0", "graph-ioi"} <= circuits
    graph = json.loads((tmp_path / "ws" / "circuits" / "graph-ioi" / "graph.json").read_text())
    assert graph["workbench_check"]["summary"]["nodes_checked"] > 0  # checked by interventions
    features = [n for n in graph["nodes"] if n["feature_type"] == "cross layer transcoder"]
    assert features and all(n["clerp"].startswith("[template] ") for n in features)  # labelled by explanations
    assert set(summary["explanations"]) == {ws.rel(a.path.parent) for a in arts if a.kind == "features"}
    assert len([a for a in arts if a.kind == "interventions"]) == 5  # a steering example per SAE and the set
    base = json.loads((tmp_path / "ws" / "circuits" / "ioi-0" / "circuit.json").read_text())
    assert base["model_id"] == summary["model"] and base["method"]["target_ndf"] == TINY.target_ndf
    models = {a.name: a for a in arts if a.kind == "models"}
    assert set(models) == {"tiny-sparse", "tiny-sparse-demo"}  # the embedded sparse model and the short run
    sparse = models["tiny-sparse"]
    assert sparse.manifest["made_by"] == "embedded data/models/tiny-sparse"
    assert "compare/ioi.json" in sparse.manifest["files"] and "attention_report.json" in sparse.manifest["files"]
    assert "compare/ioi.json" not in models["tiny-sparse-demo"].manifest["files"]
    report = json.loads((tmp_path / "ws" / "models" / "tiny-sparse" / "attention_report.json").read_text())
    on_sparse = json.loads((tmp_path / "ws" / "circuits" / "ioi-0-sparse" / "circuit.json").read_text())
    assert on_sparse["model_id"] == report["model_id"] != summary["model"]  # the circuit is the embedded model's
    assert set(summary["seconds"]) == {
        "cache",
        "saes",
        "sae eval",
        "features",
        "transcoders",
        "explain",
        "sparse attention",
        "sparse model",
        "circuits",
        "interventions",
        "compare",
        "total",
    }
    assert summary["skipped"] == ["compare"]  # the embedded sparse model ships its comparisons (compare/)

    # an interrupted demo continues: here every step is complete, so each is skipped and nothing is rewritten
    # (a query without a gap is tried again, and records nothing again)
    before = {a.name: a.manifest["created"] for a in arts}
    again = run_demo(tmp_path / "ws", TINY, progress=False)
    assert set(again["skipped"]) == set(summary["seconds"]) - {"total"}
    assert {a.name: a.manifest["created"] for a in ws.artifacts()} == before

    # --overwrite removes only what the manifests list: a user's file blocks it and survives
    (tmp_path / "ws" / "notes.md").write_text("mine")
    with pytest.raises(OutputExistsError, match="notes.md"):
        run_demo(tmp_path / "ws", TINY, overwrite=True, progress=False)
    assert (tmp_path / "ws" / "notes.md").read_text() == "mine" and len(ws.artifacts()) == len(arts)
    (tmp_path / "ws" / "notes.md").unlink()
    ws.clear()  # what run_demo(overwrite=True) does first
    assert not (tmp_path / "ws").exists()


def test_demo_refuses_an_unknown_task_family(tmp_path, capsys):
    with pytest.raises(BadValueError, match="valid: ioi"):
        DemoConfig(tasks="ioi,poetry")
    assert main(["demo", "--workspace", str(tmp_path / "ws"), "--tasks", "ioi,poetry", "--no-serve"]) == 2
    assert capsys.readouterr().err.startswith("workbench demo: error: demo tasks ['poetry'] unknown; valid: ioi")
    assert not (tmp_path / "ws").exists()


@pytest.mark.parametrize(
    "flag, value, need",
    [
        ("--cache-tokens", "2000", "--cache-tokens must be at least 4312"),
        ("--sae-tokens", "1000", "at least 2048"),
        ("--transcoder-tokens", "1000", "--transcoder-tokens must be at least 2048"),
    ],
)
def test_demo_refuses_too_few_tokens_for_one_sae_batch_before_any_work(tmp_path, capsys, flag, value, need):
    from workbench.cli import main

    assert main(["demo", "--workspace", str(tmp_path / "ws"), flag, value, "--no-serve", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and need in err[0] and f"raise {flag}" in err[0], err
    assert not (tmp_path / "ws").exists()


def test_demo_overwrite_keeps_the_users_empty_folders(tmp_path):
    ws = Workspace(tmp_path / "ws")
    (tmp_path / "ws" / "caches").mkdir(parents=True)
    folder = ws.path("caches", "c")
    folder.mkdir()
    (folder / "a.npy").write_text("a")
    ws.record(folder, "caches", made_by="test", config={})
    (tmp_path / "ws" / "my-notes").mkdir()
    ws.clear()  # what `demo --overwrite` runs first
    assert (tmp_path / "ws" / "my-notes").is_dir() and not folder.exists()


def test_demo_names_a_cache_harvested_without_the_mlp_inputs(tiny, tmp_path):
    """A workspace from an older demo (its cache has no MLP inputs) fails at once with the way out."""
    from workbench.cache.config import HarvestConfig
    from workbench.demo.config import CACHE
    from workbench.steps.cache import make_cache

    ws = Workspace(tmp_path / "ws")
    hooks = ["blocks.*.hook_resid_post", "blocks.*.hook_mlp_out"]  # what the demo harvested before transcoders
    make_cache(ws, "tiny", "synthetic", hooks, HarvestConfig(n_tokens=5000), name=CACHE, progress=False)
    with pytest.raises(BadValueError, match=r"lacks blocks.0.ln2.hook_normalized and 3 more hooks .* --overwrite"):
        run_demo(tmp_path / "ws", TINY, progress=False)
    assert [a.kind for a in ws.artifacts()] == ["caches"]


def test_the_demo_explains_every_feature_store_and_a_clean_up_still_knows_every_file(
    transcoder_workspace, tmp_path, capsys
):
    """The explain step: every store's latents explained and scored, listed in the store's record (so `demo
    --overwrite` removes them instead of refusing them as a user's files), and kept on a rerun."""
    import shutil

    from workbench.demo.run import _explain
    from workbench.features import FeatureStore
    from workbench.features.explanations import load_explanations
    from workbench.readback import artifact_manifest
    from workbench.workspace import MANIFEST

    root = shutil.copytree(transcoder_workspace, tmp_path / "ws", symlinks=True)
    ws = Workspace(root)
    stores = [a.path for a in ws.artifacts("features")]
    said = _explain(ws, False, print)
    assert len(said) == len(stores) >= 5
    for path in stores:
        _, lines = load_explanations(FeatureStore(path))
        record = artifact_manifest(path / MANIFEST)
        assert len(lines) == FeatureStore(path).n_units == record["summary"]["explanations"]["latents"]
        assert {"explanations/explanations.jsonl", "explanations/manifest.json"} <= set(record["files"])
    assert capsys.readouterr().out.count("template explanations, mean detection AUC 0.") == len(stores)
    before = {a.path: a.manifest for a in ws.artifacts()}
    _explain(ws, False, print)
    assert {a.path: a.manifest for a in ws.artifacts()} == before  # a rerun keeps them
    ws.clear()
    assert not root.exists()
