"""The template explainer: predicates evaluated against plain loops, explanations read from a real store."""

import numpy as np
import pytest

from workbench.errors import BadValueError
from workbench.features import FeatureStore
from workbench.features.build import row_metadata
from workbench.features.explain import TEMPLATE_MARK, ExplainConfig, predicate_scores, template_explanation


def _meta():
    """Two sequences of 6 tokens, all 12 positions rows of the pass; a 'role' label on the rows."""
    sequences = np.array([[5, 1, 7, 2, 7, 3], [7, 4, 4, 5, 1, 7]])
    seq, pos = np.repeat([0, 1], 6), np.tile(np.arange(6), 2)
    role = np.array([0, 1, 0, 1, 0, -1, 0, 1, 1, 0, 1, 0])
    return {
        "seq": seq,
        "pos": pos,
        "sequences": sequences,
        "seqpos_row": np.arange(12).reshape(2, 6),
        "tokens": sequences[seq, pos],
        "labels": {"role": (role, ["name", "verb"])},
    }


def test_a_token_predicate_with_a_cue_holds_where_the_token_follows_the_cue_within_k():
    m = _meta()
    pred = {"kind": "tokens", "tokens": [7], "weights": [0.75], "after": [1], "within": 2}
    rows = np.arange(12)
    want = []
    for r in rows:
        s, p = m["seq"][r], m["pos"][r]
        cue = any(p - j >= 0 and m["sequences"][s, p - j] == 1 for j in (1, 2))
        want.append(0.75 if m["tokens"][r] == 7 and cue else 0.0)
    assert predicate_scores(pred, rows, m).tolist() == want
    assert sum(w > 0 for w in want) == 2  # row 2 (7 right after 1) and row 11 (7 right after 1); row 4 is too far
    assert predicate_scores(pred, np.array([-1, 2]), m).tolist() == [0.0, 0.75]  # a row outside the pass: 0


def test_a_label_predicate_holds_on_the_rows_with_that_value_and_an_unknown_value_nowhere():
    m = _meta()
    got = predicate_scores({"kind": "label", "labels": [["role", "verb"]]}, np.arange(12), m)
    assert got.tolist() == (m["labels"]["role"][0] == 1).astype(float).tolist()
    assert not predicate_scores({"kind": "label", "labels": [["role", "noun"]]}, np.arange(12), m).any()
    m["labels"]["task"] = (np.array([0] * 6 + [1] * 6), ["a", "b"])
    both = predicate_scores({"kind": "label", "labels": [["role", "verb"], ["task", "b"]]}, np.arange(12), m)
    assert both.tolist() == ((m["labels"]["role"][0] == 1) & (np.arange(12) >= 6)).astype(float).tolist()
    assert not predicate_scores(None, np.arange(12), m).any()


def test_config_refuses_bad_values_by_name():
    with pytest.raises(BadValueError, match=r"explainer='llm' is not valid; choose one of \['template', 'openai'\]"):
        ExplainConfig(explainer="llm")
    with pytest.raises(BadValueError, match=r"label_share=1.5 must be a finite number in \[0, 1\]"):
        ExplainConfig(label_share=1.5)


@pytest.fixture(scope="module")
def store_meta(feature_workspace):
    from workbench.cache import ActivationCache

    folder = next(p for p in (feature_workspace / "saes" / "run").iterdir() if p.name.startswith("topk"))
    store = FeatureStore(folder)
    cache = ActivationCache.open(store.manifest["cache"])
    return store, row_metadata(cache, "heldout", store.manifest["n_rows"], store.vocab)


def test_template_explanations_are_read_from_the_top_examples(store_meta):
    store, meta = store_meta
    cfg = ExplainConfig(label_base=0.0)  # every label in the pass is more common than that: token predicates only
    ids = np.asarray(store.array("logit_ids"))
    for u in np.flatnonzero(store.units["count"].to_numpy() > 0)[:10]:
        e = template_explanation(int(u), store, meta, cfg)
        assert e["text"].startswith(TEMPLATE_MARK)
        assert e["promoted"] == ids[u, :3].tolist() and e["suppressed"] == ids[u, len(ids[u]) // 2 :][:3].tolist()
        e = template_explanation(int(u), store, meta, cfg)
        top = np.asarray(store.array("ex_rows")[u, : store.config.n_top])
        toks = meta["tokens"][top[top >= 0]]
        pred = e["predicate"]
        assert pred["kind"] == "tokens" and np.bincount(toks)[pred["tokens"][0]] == np.bincount(toks).max()
        assert pred["weights"][0] == pytest.approx(np.bincount(toks).max() / len(toks), abs=1e-4)
        assert repr(store.vocab[pred["tokens"][0]]) in e["text"]
        # its own simulator: the predicate holds on the top rows whose token it lists (and whose cue is there)
        assert (predicate_scores(pred, top[top >= 0], meta) > 0).sum() >= 1


def test_the_labels_shared_by_the_top_examples_become_the_predicate(store_meta):
    store, meta = store_meta
    cfg = ExplainConfig(label_base=1.0)
    seen = 0
    for u in np.flatnonzero(store.units["count"].to_numpy() >= store.config.n_top)[:40]:
        top = np.asarray(store.array("ex_rows")[u, : store.config.n_top])
        e = template_explanation(int(u), store, meta, cfg)
        pred = e["predicate"]
        if pred["kind"] != "label":
            continue
        seen += 1
        for kind, name in pred["labels"]:
            lab, names = meta["labels"][kind]
            share = (lab[top] == names.index(name)).mean()
            assert share >= cfg.label_share and f"{kind} {name!r} ({share:.0%})" in e["text"]
        assert (predicate_scores(pred, top, meta) > 0).mean() >= cfg.label_share - 1e-9 or len(pred["labels"]) > 1
    assert seen > 0
