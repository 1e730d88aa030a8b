"""Every page of the app on a small real workspace (AppTest: the scripts run, no browser)."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from workbench.features import FeatureStore


def saes(ws):
    return sorted(f"saes/run/{p.name}" for p in (ws / "saes" / "run").iterdir() if (p / "cfg.json").is_file())


def ok(at):
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def plain(s: str) -> str:
    """Text as the browser shows it: the app escapes file and user text for Markdown."""
    return re.sub(r"\\(.)", r"\1", s)


def links(at):
    return [plain(p.proto.label) for p in at.get("page_link")]


def test_overview_lists_every_artifact(app, feature_workspace):
    at = ok(app())
    text = " ".join(str(v) for d in at.dataframe for v in d.value.to_numpy().ravel())
    for name in ("random", "random-synthetic", *[s.split("/")[-1] for s in saes(feature_workspace)]):
        assert name in text
    paths = at.dataframe[0].value["path"]  # absolute: pasted into a command, they work from any folder
    assert all(p.startswith(str(feature_workspace.resolve())) for p in paths)
    assert sum("open " in label for label in links(at)) == len(saes(feature_workspace))


def test_overview_draws_a_kind_s_configs_once_its_expander_is_opened(app, feature_workspace):
    """Each kind's configs and inputs run only inside an opened expander (a reload of a 30-layer workspace sent 84
    JSON and Markdown elements nobody had opened); opened, they show each artifact's manifest config and inputs."""
    from workbench import browse

    at = ok(app())
    assert not at.json
    kinds = [e.label.split(":")[0] for e in at.expander if e.label.endswith(": configs and inputs")]
    cat = browse.catalog(feature_workspace)
    assert sorted(kinds) == sorted({a.kind for a in cat.artifacts})
    at.session_state["ws_configs_saes"] = True  # what opening the expander records (it reruns the page)
    at = ok(at.run())
    want = [{"config": a.manifest.get("config"), "inputs": a.manifest.get("inputs")} for a in cat.artifacts]
    shown = [json.loads(j.value) for j in at.json]
    assert shown == [w for a, w in zip(cat.artifacts, want) if a.kind == "saes"] and shown


def test_sae_page_compares_saes_on_one_hook(app, feature_workspace):
    first, *others = saes(feature_workspace)
    at = ok(app("views/sae.py", sae=first, compare=",".join(others)))
    table = at.dataframe[0].value
    assert list(table.columns) == [s.split("/")[-1] for s in [first, *others]]
    assert "fvu" in table.index and "never fired (store)" in table.index
    charts = at.get("plotly_chart")
    assert len(charts) >= 3  # curves, log-frequency histogram, scaffold panel
    assert any("scaffold" in c.proto.spec for c in charts)


def test_an_undefined_ce_loss_recovered_is_shown_with_its_reason(feature_workspace, tmp_path, monkeypatch):
    """An SAE whose evaluation found zero ablation LOWERING the loss (its metrics summarised by eval's own
    _splice_summary from the fixture's numbers with the zero-ablation CE below the clean one): the SAE page and
    the overview show CE loss recovered as undefined with the reason, not as a huge negative number."""
    import torch

    from tests.app.conftest import _runner
    from workbench.sae.eval import _splice_summary
    from workbench.steps.artifacts import rerecord
    from workbench.workspace import Workspace

    ws = tmp_path / "ws"
    shutil.copytree(feature_workspace, ws, symlinks=True)
    first = saes(ws)[0]
    path = ws / first / "metrics.json"
    metrics = json.loads(path.read_text())
    s, n = metrics["splice"], metrics["splice"]["n_predictions"]
    ce = {"clean": s["ce_clean"], "sae": s["ce_sae"], "zero": s["ce_clean"] - 0.5}
    kl = {"sae": s["kl_sae"], "zero": s["kl_zero_ablation"]}
    metrics["splice"] = _splice_summary(
        torch.zeros(s["n_sequences"]), n, {k: v * n for k, v in ce.items()}, {k: v * n for k, v in kl.items()}, 0
    )
    path.write_text(json.dumps(metrics))
    rerecord(Workspace(ws), ws / first, "saes", "workbench sae eval")  # as sae eval does after writing metrics.json
    assert metrics["splice"]["ce_loss_recovered"] is None
    shown = f"undefined ({metrics['splice']['ce_loss_recovered_undefined']})"
    app = _runner(ws, monkeypatch)
    at = ok(app("views/sae.py", sae=first))
    assert at.dataframe[0].value.loc["ce_loss_recovered"].iloc[0] == shown
    overview = ok(app())
    assert any(shown in d.value.astype(str).to_numpy().ravel().tolist() for d in overview.dataframe)


def test_feature_page_shows_every_panel(app, feature_workspace):
    for rel in saes(feature_workspace):
        store = FeatureStore(feature_workspace / rel)
        u = int(store.units["count"].idxmax())
        at = ok(app("views/feature.py", sae=rel, unit=str(u)))
        assert at.title[0].value.endswith(f"{store.manifest['unit']} {u}")
        page = plain(" ".join(m.value for m in at.markdown) + " ".join(c.value for c in at.caption))
        assert "quantile" in page and "ln_final.w" in page
        nb = [label for label in links(at) if "cosine" in label or "correlation" in label]
        assert any("cosine" in label for label in nb) and any("correlation" in label for label in nb)
        if store.manifest["unit"] == "block":
            assert any('data-chart="scatter"' in h.proto.body for h in at.get("html"))
        if store.manifest["prefixes"]:
            assert any(m.label == "Matryoshka level" for m in at.metric)
        rare = int(store.units["count"].idxmin())  # a unit that never (or rarely) fired renders too
        ok(app("views/feature.py", sae=rel, unit=str(rare)))


@pytest.mark.parametrize("by", ["token", "text", "label", "index"])
def test_search_returns_the_store_s_answer(app, feature_workspace, by):
    rel = saes(feature_workspace)[-1]
    store = FeatureStore(feature_workspace / rel)
    tok = store.units  # noqa: F841  (warms the table like the page does)
    word = store.token(int(store.array("token_counts").argmax()))
    q = {
        "token": word,
        "text": word,
        "label": store.units["label"].iat[int(store.units["count"].idxmax())],
        "index": "7",
    }[by]
    expect = {
        "token": store.search_token,
        "text": store.search_text,
        "label": store.search_label,
        "index": lambda q: [{"unit": 7}],
    }[by](q)
    at = ok(app("views/search.py", sae=rel, by=by, q=q))
    assert list(at.dataframe[0].value["unit"]) == [h["unit"] for h in expect]
    assert links(at)[0].startswith(f"open {store.manifest['unit']} {expect[0]['unit']}")


def test_prompt_view_runs_the_model_and_sae(app, feature_workspace):
    rel = saes(feature_workspace)[0]
    at = ok(app("views/prompt.py", sae=rel, prompt="Mary and John went to the market"))
    table = at.dataframe[0].value
    assert list(table["token"])[-1].strip() == "market"
    assert any(label.startswith("open block") for label in links(at))  # the first SAE is the block-sparse one


@pytest.mark.parametrize(
    "params, message",
    [
        ({"sae": "../etc"}, "'..' may not appear"),
        ({"sae": "/etc/passwd"}, "not a path inside the workspace"),
        ({"sae": "saes/run/escape"}, "outside the workspace"),
        ({"sae": "saes/nothing-here"}, "does not exist"),
        ({"unit": "999999"}, "out of range"),
    ],
)
def test_bad_deep_links_show_an_error_not_a_traceback(app, feature_workspace, tmp_path, params, message):
    link = feature_workspace / "saes" / "run" / "escape"
    os.symlink(tmp_path, link)  # a symlink leading out of the workspace
    try:
        at = app("views/feature.py", **{"sae": saes(feature_workspace)[0], **params})
    finally:
        link.unlink()
    assert not at.exception
    assert message in plain(at.error[0].value)


@pytest.mark.parametrize("unit", ["abc", "1.5", "nan"])
def test_a_bad_number_in_the_url_is_a_notice_and_the_page_draws(app, feature_workspace, unit):
    """Every parsed URL parameter goes through state.url_param: a bad one is a warning naming it, not an error
    box or a trace, and the page draws without it (here on its default unit)."""
    at = ok(app("views/feature.py", sae=saes(feature_workspace)[0], unit=unit))
    [warning] = [plain(w.value) for w in at.warning if "unit=" in plain(w.value)]
    assert f"ignored the link's unit= ('{unit}' is not an integer)" in warning
    assert at.query_params.get("unit") != unit and any('data-chart="histogram"' in h.proto.body for h in at.get("html"))


def test_bad_search_mode_and_query(app, feature_workspace):
    rel = saes(feature_workspace)[0]
    assert "unknown search mode" in plain(app("views/search.py", sae=rel, by="regex", q="x").error[0].value)
    assert "no token spelled" in plain(app("views/search.py", sae=rel, by="token", q="qqqq").error[0].value)


def test_search_by_explanation_lists_the_explained_latents_best_auc_first(feature_workspace, tmp_path, monkeypatch):
    import shutil

    from tests.app.conftest import _runner
    from workbench.features.explain import ExplainConfig
    from workbench.features.explain_run import explain_store
    from workbench.features.explanations import search, short_form

    root = shutil.copytree(feature_workspace, tmp_path / "ws", symlinks=True)
    rel = next(r for r in saes(root) if "topk" in r)
    explain_store(root / rel, ExplainConfig(pool=200), ("detection",), 12, progress=False)
    want = search(FeatureStore(root / rel), "fires", top=100)
    at = ok(_runner(root, monkeypatch)("views/search.py", sae=rel, by="explanation", q="fires"))
    assert want and list(at.dataframe[0].value["unit"]) == [h["latent"] for h in want]
    assert list(at.dataframe[0].value["explanation"]) == [h["explanation"] for h in want]
    unit = FeatureStore(root / rel).manifest["unit"]
    assert links(at)[0] == f"open {unit} {want[0]['latent']} · {short_form(want[0]['explanation'])}"
    other = next(r for r in saes(root) if "topk" not in r)
    at = _runner(root, monkeypatch)("views/search.py", sae=other, by="explanation", q="fires")
    assert "has no explanations; make them with `workbench features explain`" in plain(at.error[0].value)


def test_listings_come_from_manifests_and_a_damaged_one_is_named(app, feature_workspace):
    bad = feature_workspace / "circuits" / "broken"
    stray = feature_workspace / "saes" / "stray"  # an SAE folder no manifest records
    bad.mkdir(parents=True)
    (bad / "artifact.json").write_text("{")
    stray.mkdir()
    for f in ("cfg.json", "sae_weights.safetensors"):
        shutil.copy(feature_workspace / saes(feature_workspace)[0] / f, stray / f)
    try:
        at = ok(app())
        assert any(str(bad / "artifact.json") in plain(w.value) for w in at.warning)
        assert not any("stray" in label for label in links(at))
        at = ok(app("views/sae.py"))
        assert "saes/stray" not in at.selectbox(key="w_sae_sae").options
    finally:
        for p in (bad / "artifact.json", stray / "cfg.json", stray / "sae_weights.safetensors"):
            p.unlink()
        bad.rmdir()
        stray.rmdir()


def test_feature_page_opens_on_a_labelled_unit(app, feature_workspace):
    """Without ?unit= the page opens on the unit whose best label fits it best (F1, units firing >= 20 times),
    in the SAE whose best unit fits best, not on unit 0 of the first SAE by name."""
    at = ok(app("views/feature.py"))
    best = {}
    for rel in saes(feature_workspace):
        u = FeatureStore(feature_workspace / rel).units
        f1 = (2 * u["label_precision"] * u["label_recall"] / (u["label_precision"] + u["label_recall"])).fillna(0.0)
        f1 = f1.where(u["count"] >= 20, -1.0)
        best[rel] = (float(f1.max()), int(f1.to_numpy().argmax()))
    rel = max(best, key=lambda r: best[r][0])
    assert at.selectbox(key="w_sae_feature").value == rel
    assert at.title[0].value.endswith(f" {best[rel][1]}")


def test_prompt_page_names_unknown_words_and_refuses_long_prompts(app, feature_workspace):
    rel = saes(feature_workspace)[0]
    at = app("views/prompt.py", sae=rel, prompt="Mary and Zyzzyva went to the market")
    assert (
        not at.exception
        and "'Zyzzyva'" in plain(at.error[0].value)
        and "outside the model's vocabulary" in plain(at.error[0].value)
    )
    at = app("views/prompt.py", sae=rel, prompt=" ".join(["Mary"] * 500))
    assert not at.exception and "context is" in plain(at.error[0].value)


def test_search_suggests_only_what_the_model_and_store_hold(app, feature_workspace):
    rel = saes(feature_workspace)[-1]
    store = FeatureStore(feature_workspace / rel)
    at = ok(app("views/search.py", sae=rel, by="token"))
    word = at.text_input(key="w_q").placeholder.split("e.g. ")[1]
    assert word in store.vocab and store.search_token(word)
