"""Reading saved explanations without torch: the lines checked against their manifest, the headline, search."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.errors import BadValueError, DamagedFileError
from workbench.features import FeatureStore
from workbench.features.explain import ExplainConfig
from workbench.features.explain_run import explain_store
from workbench.features.explanations import FOLDER, LINES, headline, load_explanations, search

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def explained(feature_workspace, tmp_path_factory):
    src = next(p for p in (feature_workspace / "saes" / "run").iterdir() if p.name.startswith("topk"))
    folder = shutil.copytree(src, tmp_path_factory.mktemp("explained") / src.name)
    explain_store(folder, ExplainConfig(pool=200), ("detection", "fuzz"), 12, progress=False)
    return folder


def test_the_reader_imports_no_torch():
    probe = "import sys, workbench.features.explanations; print(any(m.split('.')[0] == 'torch' for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_headline_and_search_read_the_saved_lines(explained):
    store = FeatureStore(explained)
    _, lines = load_explanations(store)
    for u, x in lines.items():
        h = headline(store, u)
        assert h.startswith("explanation (template text, not a model's words): [template]") and x["explanation"] in h
        auc = x["scores"]["detection"]["auc"]
        assert (f"detection AUC {auc:.2f}" in h) if auc is not None else "not scored" in h
    assert headline(store, 12) is None  # not explained
    hits = search(store, "FIRES")
    assert {h["latent"] for h in hits} == {u for u, x in lines.items() if "fires" in x["explanation"].casefold()}
    aucs = [h["auc"] if h["auc"] is not None else -1 for h in hits]
    assert aucs == sorted(aucs, reverse=True)
    with pytest.raises(BadValueError, match="type some words"):
        search(store, "  ")


def test_a_store_without_explanations_and_damaged_lines_are_named(explained, feature_workspace, tmp_path):
    bare = FeatureStore(next(p for p in (feature_workspace / "saes" / "run").iterdir() if p.name.startswith("block")))
    assert load_explanations(bare) is None and headline(bare, 0) is None
    with pytest.raises(BadValueError, match="has no explanations; make them with `workbench features explain`"):
        search(bare, "fires")
    copy = shutil.copytree(explained, tmp_path / "copy")
    path = FeatureStore(copy).path / FOLDER / LINES
    first = json.loads(path.read_text().splitlines()[0])
    path.write_text(path.read_text().replace(first["explanation"], first["explanation"] + " and more", 1))
    with pytest.raises(DamagedFileError, match=LINES):
        load_explanations(FeatureStore(copy))
