"""The Steer panel (app/steer.py, AppTest) on a workspace's real model and dictionaries: what it shows is what
workbench.interventions computes for the same deep link, on the feature page, on an attribution graph's node (the
measured effect next to the graph's prediction and the check's measurement) and on a circuit's MLP; user text is
escaped."""

from __future__ import annotations

import shutil

import pytest

from tests.app.test_circuit_pages import ok, plain, text
from workbench.interventions import InterventionConfig, intervene

SAE = "saes/run/topk_n512_k8_seed0"


@pytest.fixture(scope="module")
def steer_workspace(transcoder_workspace, tmp_path_factory):
    """The transcoder workspace (copied) with a transcoder set on every layer, an IOI query's attribution graph through it, checked by
    interventions (check_graph, two edges), and the query's component circuit."""
    from workbench.corpus import tasks
    from workbench.interventions.config import CheckConfig
    from workbench.models import load
    from workbench.sae.config import SAEConfig, TrainConfig
    from workbench.steps.circuits import find_circuit
    from workbench.steps.dictionaries import train_transcoder_set
    from workbench.steps.graphs import attribution_graph, check_graph
    from workbench.workspace import Workspace

    root = tmp_path_factory.mktemp("steer") / "ws"
    shutil.copytree(transcoder_workspace, root, symlinks=True)
    ws = Workspace(root)
    spec = str(root / "models" / "random")
    model, tok = load(spec, device="cpu")
    q = tasks.queries("ioi", 1, seed=0, tokenizer=tok)[0]
    train = TrainConfig(n_tokens=4096, batch_size=512, lr=1e-3, progress=False)
    tset, _ = train_transcoder_set(
        ws, root / "caches" / "mlp", "all", [SAEConfig("topk", k=8, expansion=4)], train, name="full"
    )
    _, folder = attribution_graph(ws, model, tset, q.prompt, q.answer, name="graph-ioi", model_spec=spec)
    check_graph(ws, model, folder / "graph.json", tset, CheckConfig(top_edges=2))
    fast = dict(n_samples=1, steps=2, refine_steps=1, min_gap=0.0, budget=0.05)  # as tests/app/conftest.py
    find_circuit(ws, model, q, model_spec=spec, name="ioi-0", **fast)
    return root


@pytest.fixture(scope="module")
def model(steer_workspace):
    from workbench.models import load

    return load(str(steer_workspace / "models" / "random"), device="cpu")[0]


@pytest.fixture
def steer_app(steer_workspace, monkeypatch):
    from tests.app.conftest import _runner

    return _runner(steer_workspace, monkeypatch)


def metric(at, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def shown(at, r: dict) -> None:
    """The panel shows r's next-token change and continuations, as it formats them."""
    last = r["positions"][-1]
    assert metric(at, "KL from the clean run (next token)") == f"{last['kl']:.4g}"
    assert plain(metric(at, "top next token, intervened")) == last["top"][0]["str"]
    page = text(at)
    for row in last["top"] + last["most_raised"]:
        assert f"| {row['str']} | {row['prob']:.4g} | {row['clean_prob']:.4g} | {row['logit_change']:.4g} |" in page
    for which in ("clean", "intervened"):
        assert f"**{which}**: " + " ".join(r["continuation"][which]["str_tokens"]) in page


def test_the_feature_page_steers_its_unit_as_the_engine_does(steer_app, steer_workspace, model):
    link = dict(sae=SAE, unit="3", steer="1", s_op="steer", s_value="8", s_pos="all", s_n="5")
    at = ok(steer_app("views/feature.py", **link))
    prompt = at.text_input(key="feature_prompt").value
    assert prompt  # the unit's top example, up to where it fires
    sweep = [float(v) for v in at.text_input(key="feature_sweep").value.split(",")]
    assert len(sweep) == 7 and sweep[0] == 0  # multiples of the unit's largest activation
    cfg = InterventionConfig(features=["3"], op="steer", value=[8.0], strengths=sweep, continue_tokens=5)
    r = intervene(model, str(steer_workspace / SAE), prompt, cfg)
    shown(at, r)
    page = text(at)
    for row in r["sweep"]["rows"]:
        assert f"| {row['strength']:.4g} | {row['kl']:.4g} | {row['target_logit_change']:.4g} |" in page
    assert len(at.get("plotly_chart")) == 1
    assert r["continuation"]["clean"] != r["continuation"]["intervened"] or r["positions"][-1]["kl"] > 0
    # a frozen ablation to the counterfactual's codes at the last position, from its deep link
    link.update(s_op="ablate", s_ablate="counterfactual", s_cf=prompt, s_pos="-1", s_sem="frozen", s_prompt=prompt)
    at = ok(steer_app("views/feature.py", **link))
    cfg = InterventionConfig(
        features=["3"],
        op="ablate",
        ablate_to="counterfactual",
        counterfactual=prompt,
        positions="-1",
        semantics="frozen",
        continue_tokens=5,
    )
    shown(at, intervene(model, str(steer_workspace / SAE), prompt, cfg))


def test_a_graph_node_shows_the_measured_effect_next_to_the_predicted_one(steer_app, steer_workspace, model):
    from workbench import browse
    from workbench.interventions.check import GraphNodes

    fg = browse.open_feature_graph(steer_workspace / "circuits" / "graph-ioi")
    row = max(fg.check["nodes"], key=lambda r: abs(r["predicted"]))
    nid = row["node_id"]
    at = ok(steer_app("views/feature_graph.py", graph="circuits/graph-ioi", node=nid, steer="1", s_n="3"))
    layer, latent, pos = nid.split("_")
    assert (
        at.text_input(key="feature_graph_pos").value == pos and at.selectbox(key="feature_graph_op").value == "ablate"
    )
    # the default, a live ablation to zero at the node's position, is what the check measured live
    assert metric(at, "measured effect (this intervention)") == f"{row['measured_live']:+.4g}"
    assert metric(at, "check's measured ablation") == f"{row['measured_live']:+.4g}"
    assert metric(at, "graph's predicted effect of ablating") == f"{row['predicted']:+.4g}"
    cfg = InterventionConfig(features=[f"{layer}:{latent}"], positions=pos, continue_tokens=3)
    r = intervene(model, str(steer_workspace / "transcoders" / "full"), fg.metadata["prompt"], cfg)
    shown(at, r)
    g = GraphNodes({"nodes": fg.nodes, "links": fg.links}, "target", r["tokens"])
    assert g.predicted(fg.links)[nid] == pytest.approx(row["predicted"])


def test_a_circuit_node_steers_a_unit_of_a_dictionary_on_its_layer(steer_app, steer_workspace, model):
    from workbench import browse

    cd = browse.open_circuit(steer_workspace / "circuits" / "ioi-0" / "circuit.json")
    link = dict(circuit="circuits/ioi-0", node="m2", s_dict=SAE, s_unit="5", steer="1", s_op="scale", s_value="0")
    at = ok(steer_app("views/circuit.py", **link))
    assert at.selectbox(key="w_node").value == "m2"
    cfg = InterventionConfig(features=["5"], op="scale", value=[0.0])
    shown(at, intervene(model, str(steer_workspace / SAE), cd.query["prompt"], cfg))


def test_user_text_is_escaped_and_a_bad_link_is_one_notice(steer_app):
    prompt = "**bold** <img src=x onerror=alert(1)> [a](http://x.test)"
    at = steer_app("views/feature.py", sae=SAE, unit="3", steer="1", s_prompt=prompt, s_op="nope")
    assert len(at.warning) == 1 and "s_op='nope'" in plain(at.warning[0].value)
    [err] = at.error
    assert "\\*\\*bold\\*\\*" in err.value and "\\<img" in err.value and "](" not in err.value
    assert not at.exception
    off = ok(steer_app("views/feature.py", sae=SAE, unit="3"))  # the toggle off: no controls, no model run
    assert [t.label for t in off.toggle] == ["intervene on unit 3 in the model"] and not off.text_input


def test_a_group_of_graph_nodes_is_ablated_together(steer_app, steer_workspace, model):
    import json

    from workbench import browse

    fg = browse.open_feature_graph(steer_workspace / "circuits" / "graph-ioi")
    a, b = sorted(fg.check["nodes"], key=lambda r: -abs(r["predicted"]))[:2]
    groups = json.dumps([["pair", a["node_id"], b["node_id"]]])
    link = dict(graph="circuits/graph-ioi", groups=groups, s_target="group pair", steer="1", s_n="2")
    at = ok(steer_app("views/feature_graph.py", **link))
    units = sorted({f"{n.split('_')[0]}:{n.split('_')[1]}" for n in (a["node_id"], b["node_id"])})
    positions = ",".join(str(p) for p in sorted({int(n.split("_")[2]) for n in (a["node_id"], b["node_id"])}))
    cfg = InterventionConfig(features=units, positions=positions, continue_tokens=2)
    shown(at, intervene(model, str(steer_workspace / "transcoders" / "full"), fg.metadata["prompt"], cfg))
    assert metric(at, "graph's predicted effect of ablating") == f"{a['predicted'] + b['predicted']:+.4g}"
    assert metric(at, "check's measured ablation") == f"{a['measured_live'] + b['measured_live']:+.4g}"


def test_a_mean_ablation_takes_its_means_from_the_dictionarys_training_cache(steer_app, steer_workspace, model):
    from workbench.cache.reader import ActivationCache

    at = ok(steer_app("views/feature.py", sae=SAE, unit="3", steer="1", s_op="ablate", s_ablate="mean", s_n="0"))
    prompt = at.text_input(key="feature_prompt").value
    cache = ActivationCache.open(steer_workspace / "caches" / "random-synthetic")
    cfg = InterventionConfig(features=["3"], op="ablate", ablate_to="mean", continue_tokens=0)
    shown(at, intervene(model, str(steer_workspace / SAE), prompt, cfg, mean_source=cache))


def test_a_circuit_group_offers_the_dictionaries_at_its_layers(steer_app, steer_workspace, model):
    import json

    from workbench import browse

    cd = browse.open_circuit(steer_workspace / "circuits" / "ioi-0" / "circuit.json")
    member = next(p.name for p in (steer_workspace / "transcoders" / "full").glob("L1-*"))
    rel = f"transcoders/full/{member}"
    groups = json.dumps([["mlps", "m1", "m2"]])
    link = dict(circuit="circuits/ioi-0", node="m2", groups=groups, s_target="group mlps", s_dict=rel, s_unit="7")
    at = ok(steer_app("views/circuit.py", **link, steer="1", s_op="steer", s_value="4", s_n="3"))
    offered = at.selectbox(key="w_circuit_steer_dict").options
    assert rel in offered and SAE in offered and not any("/L0-" in o or "/L3-" in o for o in offered)
    cfg = InterventionConfig(features=["7"], op="steer", value=[4.0], continue_tokens=3)
    shown(at, intervene(model, str(steer_workspace / rel), cd.query["prompt"], cfg))


@pytest.fixture(scope="module")
def clt_workspace(steer_workspace, tmp_path_factory):
    """The steer workspace (copied) with a CLT trained on its MLP cache and the IOI query's graph through it."""
    from workbench.circuits.feature.graph_config import GraphConfig
    from workbench.corpus import tasks
    from workbench.models import load
    from workbench.sae.config import CLTConfig, TrainConfig
    from workbench.steps.dictionaries import train_clt
    from workbench.steps.graphs import attribution_graph
    from workbench.workspace import Workspace

    root = tmp_path_factory.mktemp("steer_clt") / "ws"
    shutil.copytree(steer_workspace, root, symlinks=True)
    ws, spec = Workspace(root), str(root / "models" / "random")
    model, tok = load(spec, device="cpu")
    q = tasks.queries("ioi", 1, seed=0, tokenizer=tok)[0]
    train = TrainConfig(n_tokens=4096, batch_size=512, lr=1e-3, progress=False)
    clt = train_clt(ws, root / "caches" / "mlp", "all", CLTConfig("batchtopk", k=8, expansion=4), train)
    cfg = GraphConfig(max_feature_nodes=20, heads=False)
    attribution_graph(ws, model, clt, q.prompt, q.answer, cfg=cfg, name="graph-clt", model_spec=spec)
    return root, clt


def test_a_clt_graph_node_is_ablated_through_the_clt(clt_workspace, model, monkeypatch):
    """The panel on a CLT graph's node runs the CLT (its change written into every later layer) as the engine does."""
    from tests.app.conftest import _runner
    from workbench import browse
    from workbench.sae.clt_io import MANIFEST

    root, clt = clt_workspace
    assert browse.catalog(root).clts == [clt.relative_to(root).as_posix()] and MANIFEST == "clt.json"
    fg = browse.open_feature_graph(root / "circuits" / "graph-clt")
    nid = max(
        (n for n in fg.nodes if n["feature_type"] == "cross layer transcoder"), key=lambda n: abs(n["activation"])
    )["node_id"]
    at = ok(
        _runner(root, monkeypatch)("views/feature_graph.py", graph="circuits/graph-clt", node=nid, steer="1", s_n="3")
    )
    layer, latent, pos = nid.split("_")
    cfg = InterventionConfig(features=[f"{layer}:{latent}"], positions=pos, continue_tokens=3)
    r = intervene(model, str(clt), fg.metadata["prompt"], cfg)
    assert r["units"][0]["write_hooks"][-1] == f"blocks.{model.cfg.n_layers - 1}.hook_mlp_out"
    shown(at, r)


@pytest.mark.parametrize(
    "value, message",
    [
        ("nan", "value[0]=nan must be a finite number in [-1e+06, 1e+06]"),
        ("inf", "value[0]=inf must be a finite number"),
        ("1e308", "value[0]=1e+308 must be a finite number"),
        ("1,,2", "'1,,2' has an empty element"),
    ],
)
def test_a_link_value_that_is_not_a_finite_number_in_range_is_one_error_and_no_run(steer_app, value, message):
    """s_value is bounded as --value is (InterventionConfig.value's bounds): nan, inf and 1e308 ran and showed KL
    nan; '1,,2' read as 1,2."""
    at = steer_app("views/feature.py", sae=SAE, unit="3", steer="1", s_op="set", s_value=value, s_n="1")
    [err] = at.error
    assert message in plain(err.value), plain(err.value)
    assert not at.exception and not [m for m in at.metric if "KL" in m.label]  # nothing ran


def test_an_uploaded_graph_the_workbench_downloaded_steers_through_its_set(steer_workspace, monkeypatch):
    """A download names the graph's transcoder set (metadata.info, app.steer.GRAPH_SET) and keeps its check, so
    the uploaded file's node is ablated through that set, next to the check's measurement (issue #47)."""
    from streamlit.testing.v1 import AppTest

    from app import steer
    from tests.app.conftest import APP
    from workbench import browse
    from workbench.circuits import neuronpedia

    monkeypatch.setenv("WORKBENCH_WORKSPACE", str(steer_workspace))
    fg = browse.open_feature_graph(steer_workspace / "circuits" / "graph-ioi")
    row = max(fg.check["nodes"], key=lambda r: abs(r["predicted"]))
    info = {**fg.metadata["info"], steer.GRAPH_SET: "transcoders/full"}
    qparams = {"pinnedIds": [], "supernodes": [], "linkType": "both", "clickedId": "", "sg_pos": ""}
    d = {"metadata": {**fg.metadata, "info": info}, "qParams": qparams, "nodes": fg.nodes, "links": fg.links}
    uploaded = neuronpedia.read_feature_graph({**d, neuronpedia.GRAPH_CHECK[0]: fg.check})
    at = AppTest.from_file(str(APP), default_timeout=180)
    at.switch_page("views/feature_graph.py")
    at.session_state["uploaded-graph"] = uploaded
    for k, v in dict(graph="uploaded-graph", node=row["node_id"], steer="1", s_n="3").items():
        at.query_params[k] = v
    at = ok(at.run())

    measured = row.get("measured_live", row["measured"])  # schema v2 keeps the live reading apart
    assert metric(at, "check's measured ablation") == f"{measured:+.4g}"
