"""The feature page across dictionaries (AppTest on the small workspace, whose three SAEs on one hook had their
stores built together): links to the closest units of the others, a dictionary switch that offers the closest
match instead of keeping the index, the headline label by precision with the runner-up, and a graph node's
activation on the histogram."""

from __future__ import annotations

from urllib.parse import unquote

import pytest

from tests.app.test_pages import links, ok, plain, saes
from workbench.features import FeatureStore


def busiest(ws, rel) -> tuple[FeatureStore, int]:
    store = FeatureStore(ws / rel)
    return store, int(store.units["count"].idxmax())


def rel_of(ws, path) -> str:
    return path.resolve().relative_to(ws.resolve()).as_posix()


def page_text(at) -> str:
    return plain(" ".join([m.value for m in at.markdown] + [c.value for c in at.caption] + [i.value for i in at.info]))


def test_the_page_links_the_closest_units_of_every_other_dictionary(app, feature_workspace):
    for rel in saes(feature_workspace):
        store, u = busiest(feature_workspace, rel)
        at = ok(app("views/feature.py", sae=rel, unit=str(u)))
        shown = links(at)
        entries = store.unit(u)["across"]
        assert len(entries) == len(saes(feature_workspace)) - 1
        for e in entries:
            other = FeatureStore(e["sae"])
            assert plain(f"**{e['sae'].name}**") in page_text(at)
            for kind, key in (("cosine", "cos"), ("correlation", "corr")):
                for j, v in e[key][:3]:
                    assert any(s.startswith(f"{other.manifest['unit']} {j} · {kind} {v:.3f}") for s in shown), (j, v)
        targets = {(lk.proto.query_string if hasattr(lk.proto, "query_string") else "") for lk in at.get("page_link")}
        for e in entries:
            j = e["cos"][0][0]
            assert any(
                f"unit={j}" in t and rel_of(feature_workspace, e["sae"]).replace("/", "%2F") in t for t in targets
            )


def test_switching_the_dictionary_offers_the_closest_match_not_the_same_index(app, feature_workspace):
    a, b = [r for r in saes(feature_workspace) if "block" not in r][:2]
    store, u = busiest(feature_workspace, a)
    [entry] = [e for e in store.unit(u)["across"] if rel_of(feature_workspace, e["sae"]) == b]
    j, cos = entry["cos"][0]
    at = ok(app("views/feature.py", sae=a, unit=str(u)))
    at.selectbox(key="w_sae_feature").set_value(b).run()
    ok(at)
    assert (
        at.title[0].value.endswith(f"latent {j}")
        and at.query_params["unit"] == [str(j)]
        or at.query_params["unit"] == str(j)
    )
    assert at.number_input(key="w_unit").value == j
    notice = plain(at.info[0].value)
    assert "does not carry over" in notice and f"closest match instead: latent {j} (decoder cosine {cos:.3f}" in notice
    assert any(s == f"back to {a.split('/')[-1]} latent {u}" for s in links(at))
    at.number_input(key="w_unit").set_value(0).run()  # a change of the index itself is not a switch
    assert ok(at).title[0].value.endswith("latent 0") and not at.info


def test_the_headline_is_the_best_precision_label_with_the_runner_up(app, feature_workspace):
    """The headline takes each kind's best label and orders them by precision (a coarse label the unit's firings
    are mostly about beats a specific value with high F1 but low precision)."""
    rel = saes(feature_workspace)[0]
    store = FeatureStore(feature_workspace / rel)
    df, kinds = store.units, store.manifest["label_kinds"]
    u = int(df["count"].idxmax())
    ranked = sorted(
        ((df[f"{k}_precision"].iat[u], df[f"{k}_label"].iat[u], k) for k in kinds if df[f"{k}_label"].iat[u]),
        reverse=True,
    )
    assert len(ranked) >= 2
    at = ok(app("views/feature.py", sae=rel, unit=str(u)))
    head = next(plain(m.value) for m in at.markdown if m.value.startswith("ground-truth label"))
    (p0, l0, k0), (p1, l1, k1) = ranked[:2]
    assert f"**{l0}** ({k0}), precision {p0:.2f}" in head
    assert f"runner-up: **{l1}** ({k1}), precision {p1:.2f}" in head


@pytest.mark.parametrize("act", ["1.5", "1e3"])
def test_a_graph_node_s_activation_is_marked_on_the_histogram(app, feature_workspace, act):
    rel = saes(feature_workspace)[0]
    _, u = busiest(feature_workspace, rel)
    at = ok(app("views/feature.py", sae=rel, unit=str(u), act=act))
    [hist] = [unquote(h.proto.body) for h in at.get("html") if 'data-chart="histogram"' in h.proto.body]
    assert f'data-mark="{float(act):.6g}"' in hist and "prompt" in hist
    assert "its activation on the prompt of the graph node" in page_text(at)
    at.number_input(key="w_unit").set_value(u + 1).run()  # another unit: the prompt's activation is not its own
    [hist] = [unquote(h.proto.body) for h in ok(at).get("html") if 'data-chart="histogram"' in h.proto.body]
    assert "data-mark" not in hist and "act" not in at.query_params


def test_the_headline_shows_the_explanation_marked_as_template_text_with_its_scores(
    feature_workspace, tmp_path, monkeypatch
):
    import shutil

    from tests.app.conftest import _runner
    from workbench.features.explain import ExplainConfig
    from workbench.features.explain_run import explain_store
    from workbench.features.explanations import load_explanations

    root = shutil.copytree(feature_workspace, tmp_path / "ws", symlinks=True)
    rel = next(r for r in saes(root) if "topk" in r)
    store, u = busiest(root, rel)
    explain_store(root / rel, ExplainConfig(pool=200), ("detection", "fuzz"), u + 1, progress=False)
    line = load_explanations(FeatureStore(root / rel))[1][u]
    text = page_text(ok(_runner(root, monkeypatch)("views/feature.py", sae=rel, unit=str(u))))
    auc = line["scores"]["detection"]["auc"]
    assert f"explanation (template text, not a model's words): {line['explanation']}" in text
    assert line["explanation"].startswith("[template]") and f"detection AUC {auc:.2f}" in text
    other = next(r for r in saes(root) if "topk" not in r)  # a store without explanations shows none
    assert "explanation (" not in page_text(ok(_runner(root, monkeypatch)("views/feature.py", sae=other, unit="0")))
