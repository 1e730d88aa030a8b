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
from workbench.features.explanations import (
    FOLDER,
    LINES,
    SHORT_CHARS,
    headline,
    load_explanations,
    search,
    short_form,
    short_labels,
)

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


@pytest.mark.parametrize(
    "text, want",
    [
        (
            "[template] fires on task 'ioi' (95%) and role 'name' (88%) of its top examples; promotes ' Mary'",
            "[template] task 'ioi' and role 'name'",
        ),
        (
            "[template] fires on ' Mary', ' John' after ' and'; suppresses ' the'",
            "[template] ' Mary', ' John' after ' and'",
        ),
        ("[template] never fired in the pass; promotes 'a'", "[template] never fired in the pass"),
        ("[template] fires on 'abcdefghij', 'klmnopqrst', 'uvwxyz0123'", "[template] 'abcdefghij', 'klmnopqrst',…"),
    ],
)
def test_the_short_form_fits_a_node_label_and_stays_marked_as_template(text, want):
    assert short_form(text) == want and len(want) <= SHORT_CHARS


def test_short_labels_are_the_saved_explanations_short_forms(explained, feature_workspace):
    store = FeatureStore(explained)
    _, lines = load_explanations(store)
    assert short_labels(store) == {u: short_form(x["explanation"]) for u, x in lines.items()}
    bare = FeatureStore(next(p for p in (feature_workspace / "saes" / "run").iterdir() if p.name.startswith("block")))
    assert short_labels(bare) == {}
