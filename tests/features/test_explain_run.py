"""`features explain` end to end: lines saved in the store with their provenance, --out, resuming, refusals, search;
and a model brought in (a Llama folder saved by transformers, a plain text file, a SAELens SAE imported)."""

import json
import random
import shutil
from dataclasses import replace

import pytest

from workbench.cli import main
from workbench.errors import BadValueError
from workbench.features import FeatureStore
from workbench.features import explain_run as ex
from workbench.features.explain import TEMPLATE_MARK, ExplainConfig
from workbench.features.explain_run import explain_store
from workbench.features.explanations import load_explanations, search

CFG = ExplainConfig(chunk=4, pool=300)


@pytest.fixture
def sae_copy(feature_workspace, tmp_path):
    """The workspace's Top-k SAE and its store, copied (the store records its cache by absolute path)."""
    src = next(p for p in (feature_workspace / "saes" / "run").iterdir() if p.name.startswith("topk"))
    return shutil.copytree(src, tmp_path / src.name)


def test_explanations_are_saved_with_their_provenance_and_written_as_lines(sae_copy, tmp_path):
    explain_store(sae_copy, CFG, ("detection", "fuzz"), 10, out=tmp_path / "x.jsonl", progress=False)
    store = FeatureStore(sae_copy)
    manifest, lines = load_explanations(store)
    assert sorted(lines) == list(range(10))
    assert manifest["explainer"] == "template" and manifest["config"] == CFG.to_dict()
    assert manifest["scorers"] == ["detection", "fuzz"] and manifest["n_latents"] == 10
    assert (manifest["model"], manifest["sae_weights"]) == (store.manifest["model"], store.manifest["sae_weights"])
    out = [json.loads(x) for x in (tmp_path / "x.jsonl").read_text().splitlines()]
    assert [x["latent"] for x in out] == list(range(10))
    for x in out:
        assert set(x) == {"latent", "explanation", "explainer", "scores"} and set(x["scores"]) == {"detection", "fuzz"}
        assert x["explanation"].startswith(TEMPLATE_MARK) and x == {k: lines[x["latent"]][k] for k in x}
    scored = [x for x in out if x["scores"]["detection"]["auc"] is not None]
    assert scored and all(0 <= x["scores"]["detection"]["auc"] <= 1 for x in scored)
    with pytest.raises(BadValueError, match="already holds explanations; pass --overwrite"):
        explain_store(sae_copy, CFG, ("detection",), 10, progress=False)


def test_an_interrupted_run_resumes_to_the_same_lines_and_refuses_other_settings(sae_copy, tmp_path, monkeypatch):
    other = shutil.copytree(sae_copy, tmp_path / "other")
    explain_store(other, CFG, ("detection", "fuzz"), 10, progress=False)  # uninterrupted
    want = load_explanations(FeatureStore(other))[1]

    def interrupted(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(ex, "_finish", interrupted)  # every chunk written, then the run stops
    with pytest.raises(KeyboardInterrupt):
        explain_store(sae_copy, CFG, ("detection", "fuzz"), 10, progress=False)
    monkeypatch.undo()
    partial = FeatureStore(sae_copy).path / ex.FOLDER / ".partial"
    assert len(list(partial.glob("c*.json"))) == 3
    (partial / "c000001.json").unlink()  # the second chunk lost: made again, the others reused
    with pytest.raises(BadValueError, match="holds an unfinished run with a different config; rerun it with the same"):
        explain_store(sae_copy, replace(CFG, min_share=0.2), ("detection", "fuzz"), 10, progress=False)
    explain_store(sae_copy, CFG, ("detection", "fuzz"), 10, progress=False)
    assert load_explanations(FeatureStore(sae_copy))[1] == want and not partial.exists()


def test_cli_explains_searches_and_refuses_bad_values(sae_copy, tmp_path, capsys):
    out = tmp_path / "lines.jsonl"
    args = ["features", "explain", str(sae_copy), "--latents", "6", "--chunk", "3", "--pool", "200", "--quiet"]
    assert main([*args, "--out", str(out)]) == 0, capsys.readouterr()
    assert "6 template explanations" in capsys.readouterr().out and len(out.read_text().splitlines()) == 6
    first = json.loads(out.read_text().splitlines()[0])["explanation"]
    word = first.removeprefix(TEMPLATE_MARK).split()[0]
    assert main(["features", "search", word, "--store", str(sae_copy)]) == 0
    assert "latent 0  detection AUC" in capsys.readouterr().out
    assert [h["latent"] for h in search(FeatureStore(sae_copy), word)] == [
        h["latent"] for h in search(FeatureStore(sae_copy), word.upper())
    ]
    with pytest.raises(SystemExit):
        main([*args[:3], "--latents", "none"])
    assert "--latents 'none': give a count >= 1 or 'all'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*args[:3], "--scorers", "embedding"])
    assert "invalid choice: 'embedding'" in capsys.readouterr().err
    assert main(["features", "search", "nothing-like-this", "--store", str(tmp_path)]) == 2
    assert "no feature store at" in capsys.readouterr().err


@pytest.fixture(scope="module")
def brought_in(tmp_path_factory):
    """A Llama folder saved by transformers, a plain text file as corpus and a Top-k SAE saved by sae_lens, imported
    into a workspace, a cache of the text made and the feature store built (this crashed on a corpus without
    labels: argmax of an empty sequence)."""
    from tests.hf_folders import hf_folder
    from tests.sae.test_imports import _saelens_folders
    from workbench.cache.config import HarvestConfig
    from workbench.corpus.vocab import vocabulary
    from workbench.steps.cache import make_cache
    from workbench.steps.exchange import import_sae
    from workbench.steps.features import build_features
    from workbench.steps.models import import_model
    from workbench.workspace import Workspace

    root = tmp_path_factory.mktemp("brought-in")
    ws = Workspace(root / "ws")
    _, model = import_model(ws, str(hf_folder("llama", root / "downloads" / "their-llama")))
    words, rng = [w for w in vocabulary() if w.isalpha()][:300], random.Random(0)
    text = "\n\n".join(" ".join(rng.choice(words) for _ in range(40)) for _ in range(200))
    (root / "own.txt").write_text(text)
    _, sae = import_sae(ws, _saelens_folders(root / "downloads")["topk"], str(model), name="their-sae")
    cfg = HarvestConfig(n_tokens=3000, heldout_fraction=0.3)
    cache = make_cache(ws, str(model), str(root / "own.txt"), ["blocks.1.hook_resid_post"], cfg, progress=False)
    build_features(ws, [sae], cache.path, str(model), progress=False)
    return sae, str(model)


def test_a_brought_in_model_text_and_sae_get_scored_explanations(brought_in, tmp_path, capsys):
    sae, model = brought_in
    store = FeatureStore(sae)
    assert store.manifest["label_kinds"]["entity"] == []  # the text file plants no entities
    out = tmp_path / "lines.jsonl"
    args = ["features", "explain", str(sae), "--scorers", "detection", "fuzz", "intervention", "--model", model]
    assert main([*args, "--steer-prompts", "2", "--out", str(out), "--quiet"]) == 0, capsys.readouterr()
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == store.n_units
    fired = [x for x in lines if store.units["count"].iat[x["latent"]] > 0]
    assert fired
    for x in fired:
        assert "never fired" not in x["explanation"] and "'word'" not in x["explanation"]  # no uninformative label
        assert x["scores"]["detection"]["n_pos"] > 0 and x["scores"]["intervention"]["n_positions"] > 0
        assert 0 <= x["scores"]["intervention"]["percentile"] <= 1
    assert main([*args[:3], "--scorers", "intervention", "--overwrite", "--quiet"]) == 2  # the default model: tiny
    assert "pass the store's model with --model" in capsys.readouterr().err


@pytest.mark.parametrize("arch", ["matryoshka", "block_topk"])
def test_scaffold_and_block_dictionaries_get_scored_explanations(feature_workspace, tmp_path, arch):
    """A Matryoshka SAE with a scaffold (its sparse latents only) and a block SAE (a unit is a block, its activation
    the code norm, steered as one), every scorer."""
    src = next(p for p in (feature_workspace / "saes" / "run").iterdir() if p.name.startswith(arch))
    folder = shutil.copytree(src, tmp_path / src.name)
    model = str(feature_workspace / "models" / "random")
    cfg = replace(CFG, steer_prompts=1)
    explain_store(folder, cfg, ("detection", "fuzz", "intervention"), 6, progress=False, model=model)
    store = FeatureStore(folder)
    _, lines = load_explanations(store)
    assert (
        sorted(lines) == list(range(6)) and store.n_units == store.manifest["n_sparse"] // store.manifest["block_size"]
    )
    fired = [x for u, x in lines.items() if store.units["count"].iat[u] > 0]
    assert fired and all(x["scores"]["intervention"]["n_positions"] > 0 for x in fired)
    assert all(x["scores"]["detection"]["n_pos"] > 0 for x in fired if store.units["count"].iat[x["latent"]] > 40)
