"""The feature graph page (AppTest) on a workspace holding attribution graphs made through workbench.steps on a
small random model with random transcoders and a random cross-layer transcoder: the graph drawn within its node cap (what the cap hides said), a
node's links with their heads, and an upload of a graph JSON of another schema version refused in one line."""

from __future__ import annotations

import json

import pytest
import torch
from small_models import small_model

from app.figures import feature_graph as fgf
from tests.app.test_circuit_pages import ok, plain, text, view_data
from tests.circuits.feature.test_attribution_graph import random_clt, random_transcoders
from workbench import browse


@pytest.fixture(scope="module")
def graph_workspace(tmp_path_factory):
    from workbench.atomic import write_json
    from workbench.circuits.feature.attribution_graph import build_graph
    from workbench.circuits.feature.graph_json import to_neuronpedia
    from workbench.circuits.feature.transcoders import CrossLayerTranscoders
    from workbench.workspace import Workspace

    root = tmp_path_factory.mktemp("fgraph")
    model = small_model(seed=3, n_layers=3)
    tcs = random_transcoders(model, root / "tcs", "topk", True)
    tokens = torch.randint(0, model.cfg.d_vocab, (9,), generator=torch.Generator().manual_seed(1))
    g = build_graph(model, tcs, tokens)
    ws = Workspace(root / "ws")
    folder = ws.path("circuits", "g")
    d = to_neuronpedia(g, folder / "graph.json", "g")
    ws.record(folder, "circuits", made_by="test", config=g.config)
    pinned = ws.path("circuits", "pinned")  # as a feature circuit's graph.json pins the circuit's nodes
    d["qParams"]["pinnedIds"] = [n["node_id"] for n in d["nodes"][:3]]
    write_json(pinned / "graph.json", d)
    ws.record(pinned, "circuits", made_by="test", config=g.config)
    _qk_graph(ws, model, tcs, tokens)
    hooks = [f"blocks.{layer}.ln2.hook_normalized" for layer in range(3)]  # a cross-layer transcoder's graph
    g = build_graph(model, CrossLayerTranscoders(random_clt(model, "topk", True), hooks), tokens)
    to_neuronpedia(g, ws.path("circuits", "clt") / "graph.json", "clt")
    ws.record(ws.path("circuits", "clt"), "circuits", made_by="test", config=g.config)
    return root / "ws"


def _qk_graph(ws, model, tcs, tokens) -> None:
    """circuits/qk: the graph with QK attribution, and a check record whose one QK row is the first link's
    largest query-side part, sign-flipped (the check itself is tested in tests/interventions/test_check_qk.py)."""
    from workbench.atomic import write_json
    from workbench.circuits.feature.attribution_graph import build_graph
    from workbench.circuits.feature.graph_config import GraphConfig
    from workbench.circuits.feature.graph_json import to_neuronpedia
    from workbench.circuits.neuronpedia import GRAPH_CHECK

    g = build_graph(model, tcs, tokens, cfg=GraphConfig(qk=True))
    d = to_neuronpedia(g, None, "qk")
    e = next(lk for lk in d["links"] if lk.get("qk"))["qk"][0]
    source, part = e["query_sources"][0]
    words = {k: "sign-flipped" for k in ("verdict", "verdict_frozen", "verdict_live")}
    row = {"head": e["head"], "query": e["query"], "key": e["key"], "side": "query", "source": source, "part": part}
    row |= {"score": e["score"], "predicted": -part, "confirmed": False, **words}
    row |= {k: part for k in ("measured", "measured_frozen", "measured_live")}
    check = {"schema": GRAPH_CHECK[1], "schema_version": GRAPH_CHECK[2], "summary": {}, "spearman": {}}
    d[GRAPH_CHECK[0]] = {**check, "nodes": [], "edges": [], "qk": [row]}
    write_json(ws.path("circuits", "qk") / "graph.json", d)
    ws.record(ws.path("circuits", "qk"), "circuits", made_by="test", config=g.config)


@pytest.fixture
def graph_app(graph_workspace, monkeypatch):
    from tests.app.conftest import _runner

    return _runner(graph_workspace, monkeypatch)


@pytest.mark.parametrize("graph", ["g", "clt"])
def test_the_graph_is_drawn_within_its_cap_saying_what_it_hides(graph_app, graph_workspace, graph):
    fg = browse.open_feature_graph(graph_workspace / "circuits" / graph)
    inner = [n for n in fg.nodes if n["feature_type"] in ("cross layer transcoder", "mlp reconstruction error")]
    at = ok(graph_app("views/feature_graph.py", graph=f"circuits/{graph}", cap="5"))
    data = view_data(at)
    kinds = [n["kind"] for n in data["nodes"]]
    assert sum(k in ("feature", "error") for k in kinds) == 5 and "logits" in kinds and "input" in kinds
    assert f"hides {len(inner) - 5} of {len(inner)} features and error nodes" in text(at)
    full = ok(graph_app("views/feature_graph.py", graph=f"circuits/{graph}", cap="2000"))
    assert len(view_data(full)["nodes"]) == len(fg.nodes) and "hides" not in text(full)


@pytest.mark.parametrize("graph", ["g", "clt"])
def test_a_node_shows_its_links_and_the_heads_carrying_them(graph_app, graph_workspace, graph):
    """The same for a per-layer set's graph and a cross-layer transcoder's (its features' links into later layers
    split over heads too)."""
    fg = browse.open_feature_graph(graph_workspace / "circuits" / graph)
    link = next(lk for lk in fg.links if set(lk.get("heads", {})) - {"direct"})
    at = ok(graph_app("views/feature_graph.py", graph=f"circuits/{graph}", node=link["target"]))
    [table] = [d.value for d in at.dataframe]
    names = fgf.names(fg)  # links named by label and token, never by node id
    row = table[(table["source"] == names[link["source"]]) & (table["target"] == names[link["target"]])].iloc[0]
    assert row["heads"] == ", ".join(f"{k} {v:+.3g}" for k, v in link["heads"].items())
    assert not set(table["source"]) & {n["node_id"] for n in fg.nodes}


def test_an_unknown_graph_in_the_url_is_one_line(graph_app):
    at = graph_app("views/feature_graph.py", graph="circuits/nope")
    assert len(at.error) == 1 and "graph='circuits/nope' is not valid" in plain(at.error[0].value)


@pytest.mark.parametrize(
    "param, value, message",
    [
        ("notes", '{"x": 3}', "notes must map node names to text"),
        ("notes", "{", "query parameter notes='{' is not valid JSON"),
        ("groups", '[["lonely"]]', "groups must be a list of [name, node, ...] lists"),
        ("groups", "[" * 3000 + "]" * 3000, "nests JSON arrays or objects too deeply to be read"),
        ("notes", json.dumps({f"n{i}": "x" * 20 for i in range(5000)}), "KB, over the 64 KB of marks a link holds"),
    ],
)
def test_a_bad_url_parameter_is_a_notice_and_the_graph_still_draws(graph_app, param, value, message):
    """A malformed pins/groups/notes parameter (deeply nested JSON included) is a warning naming it, not a
    Streamlit exception box with a trace; the graph draws without it."""
    at = ok(graph_app("views/feature_graph.py", graph="circuits/g", **{param: value}))
    [warning] = [plain(w.value) for w in at.warning if f"{param}=" in plain(w.value)]
    assert f"ignored the link's {param}=" in warning and message in warning, warning
    assert view_data(at)["nodes"] and param not in at.query_params


def test_the_views_settings_in_the_url_reach_the_view(graph_app):
    """The link cap, influence thresholds and collapsed groups the URL holds (Back, a link, an upload) are handed
    to the view; a malformed one is a warning naming it, and the view opens at its defaults."""
    at = ok(
        graph_app("views/feature_graph.py", graph="circuits/g", links="300", node_threshold="0.5", collapsed='["x"]')
    )
    assert view_data(at)["settings"] == {
        "link_cap": 300,
        "node_threshold": 0.5,
        "edge_threshold": None,
        "collapsed": ["x"],
    }
    at = ok(graph_app("views/feature_graph.py", graph="circuits/g", edge_threshold="2"))
    assert any("edge_threshold must be a number in (0, 1], got 2.0" in plain(w.value) for w in at.warning)
    assert view_data(at)["settings"]["edge_threshold"] is None and view_data(at)["nodes"]


def test_the_figure_keeps_embeddings_and_logits_and_counts_hidden_weight(graph_workspace):
    d = json.loads((graph_workspace / "circuits" / "g" / "graph.json").read_text())
    fg = browse.open_feature_graph(graph_workspace / "circuits" / "g")
    g = fgf.to_graph(fg, cap=1)
    assert {n.kind for n in g.nodes} >= {"input", "logits"} and len(g.hidden) == 1
    assert "of the total |link weight|" in g.hidden[0]
    d["metadata"]["schema_version"] = 2
    from workbench.circuits import neuronpedia
    from workbench.errors import DamagedFileError

    with pytest.raises(DamagedFileError, match="schema_version is 2, expected 1"):
        neuronpedia.read_feature_graph(d)


def test_token_and_position_nodes_are_labelled_by_token_and_position(graph_workspace):
    """The workspace's model has absolute positions, so its graph has two embedding nodes at each position: the
    token's, labelled by its text, and the position's, labelled 'pos p' (both always drawn)."""
    fg = browse.open_feature_graph(graph_workspace / "circuits" / "g")
    n_pos = len(fg.metadata["prompt_tokens"])
    labels = {(n.pos, n.label) for n in fgf.to_graph(fg, cap=1).nodes if n.kind == "input"}
    assert {(p, f"pos {p}") for p in range(n_pos)} <= labels
    assert sorted(p for p, label in labels if label.startswith("Emb: ")) == list(range(n_pos))


def test_a_feature_circuits_nodes_start_pinned_unless_the_url_has_marks(graph_app, graph_workspace):
    fg = browse.open_feature_graph(graph_workspace / "circuits" / "pinned")
    at = ok(graph_app("views/feature_graph.py", graph="circuits/pinned"))
    assert view_data(at)["annotations"][
        "pinned"
    ] == fg.pinned and "feature circuit's 3 nodes in this graph open pinned" in text(at)
    other = fg.nodes[-1]["node_id"]
    at = ok(graph_app("views/feature_graph.py", graph="circuits/pinned", pinned=other))
    assert view_data(at)["annotations"]["pinned"] == [other]


def test_a_feature_circuits_undrawn_nodes_are_listed_with_the_reason(graph_workspace):
    """A circuit node silent on the prompt fires only on the counterfactual; one absent otherwise was pruned; one in
    the graph but not drawn lies below the cap. Links are named by label and token, with their check verdict."""
    fg = browse.open_feature_graph(graph_workspace / "circuits" / "g")
    feats = [n for n in fg.nodes if n["feature_type"] == "cross layer transcoder"]
    layer, latent, pos = (int(v) for v in feats[0]["node_id"].split("_"))
    row = dict(kind="feature", layer=layer, latent=latent, pos=pos, clean=1.0, token="t", effect=0.1)
    circuit = {
        "nodes": [
            {**row, "name": "drawn"},
            {**row, "name": "capped", "latent": int(feats[1]["node_id"].split("_")[1]), "pos": feats[1]["ctx_idx"]},
            {**row, "name": "counterfactual", "latent": 10**6, "clean": 0.0},
            {**row, "name": "pruned", "latent": 10**6 + 1},
        ]
    }
    circuit["nodes"][1]["layer"] = int(feats[1]["layer"])
    rows = fgf.not_drawn(fg, circuit, {feats[0]["node_id"]})
    why = {r["node"]: r["why"] for r in rows}
    assert set(why) == {"capped", "counterfactual", "pruned"}
    assert why["capped"].startswith("below the node cap") and why["pruned"].startswith("pruned from")
    assert why["counterfactual"].startswith("fires only on the counterfactual prompt")
    target = feats[0]["node_id"]
    assert fgf.names(fg)[target] == f"{feats[0]['clerp']} @ {fg.metadata['prompt_tokens'][pos]!r}"
    link = next(lk for lk in fg.links if lk["target"] == target)
    check = {"nodes": [], "edges": [{"source": link["source"], "target": target, "confirmed": False}]}
    checked = fgf.node_rows(type(fg)(fg.nodes, fg.links, fg.pinned, fg.metadata, check), target)
    assert {r["check"] for r in checked if r["source"] == fgf.names(fg)[link["source"]]} == {"failed"}
    g = fgf.to_graph(type(fg)(fg.nodes, fg.links, fg.pinned, fg.metadata, check), cap=2000)
    assert [e.check for e in g.edges if (e.src, e.dst) == (link["source"], target)] == ["failed"]


def test_marked_nodes_beyond_the_node_cap_are_drawn(graph_app, graph_workspace):
    """A pin, a note and the selected node among the least influential nodes: drawn under a cap of 1 (issue #47)."""
    fg = browse.open_feature_graph(graph_workspace / "circuits" / "g")
    kinds = ("cross layer transcoder", "mlp reconstruction error")
    last = [n["node_id"] for n in sorted((n for n in fg.nodes if n["feature_type"] in kinds), key=fgf._rank)[-3:]]
    link = dict(graph="circuits/g", cap="1", pinned=last[0], notes=json.dumps({last[1]: "x"}), node=last[2])
    at = ok(graph_app("views/feature_graph.py", **link))
    assert set(last) <= {n["id"] for n in view_data(at)["nodes"]}
    assert "3 marked nodes beyond it are drawn" in text(at)


def test_each_check_verdict_reaches_the_view_and_a_version_1_record_still_reads(graph_workspace):
    """Schema version 2's verdict words, a word this app does not know yet (the view draws it as "checked") and a
    version 1 row (confirmed: false, "failed") each reach the view's links and the node table."""
    import dataclasses

    fg = browse.open_feature_graph(graph_workspace / "circuits" / "g")
    a, b, c = fg.links[:3]
    rows = [
        {"source": a["source"], "target": a["target"], "confirmed": False},
        {"source": b["source"], "target": b["target"], "confirmed": False, "verdict": "under-predicted"},
        {"source": c["source"], "target": c["target"], "confirmed": False, "verdict": "wobbly"},
    ]
    fg = dataclasses.replace(fg, check={"nodes": [], "edges": rows})
    checks = {(e.src, e.dst): e.check for e in fgf.to_graph(fg, cap=2000).edges}
    assert [checks[(lk["source"], lk["target"])] for lk in (a, b, c)] == ["failed", "under-predicted", "wobbly"]
    table = {(r["source"], r["target"]): r["check"] for r in fgf.node_rows(fg, b["target"])}
    names = fgf.names(fg)
    assert table[(names[b["source"]], names[b["target"]])] == "under-predicted"


def test_a_node_shows_why_the_heads_on_its_links_looked_there(graph_app, graph_workspace):
    """A graph built with --qk: the node a QK link enters lists, per head entry, its query- and key-side sources
    with their parts (named by label and token) and the check's verdict where the check measured one; the view
    gets each link's entries."""
    fg = browse.open_feature_graph(graph_workspace / "circuits" / "qk")
    link = next(lk for lk in fg.links if lk.get("qk"))
    e = link["qk"][0]
    at = ok(graph_app("views/feature_graph.py", graph="circuits/qk", node=link["target"], cap="2000"))
    [_, table] = [d.value for d in at.dataframe]
    names = fgf.names(fg)
    mine = table[(table["link from"] == names[link["source"]]) & table["head, entry"].str.startswith(e["head"] + " ")]
    assert len(mine) == len(e["query_sources"]) + len(e["key_sources"])
    top = mine[mine["side"] == "query"].iloc[0]
    assert top["source"] == names.get(e["query_sources"][0][0], e["query_sources"][0][0])
    assert top["part"] == pytest.approx(e["query_sources"][0][1]) and top["check"] == "sign-flipped"
    assert set(mine["check"]) == {"sign-flipped", "not checked"}
    assert "why the heads carrying its incoming links looked there" in text(at)
    drawn = view_data(at)
    assert sum(x.get("qk") is not None for x in drawn["edges"]) == sum(bool(lk.get("qk")) for lk in fg.links)


def test_groups_accepted_by_circuit_group_open_as_the_pages_groups(tiny, tiny_set, tmp_path, monkeypatch, capsys):
    """`workbench circuit group GRAPH --accept all` writes qParams.supernodes into the recorded graph; the page opens
    that graph with them as its groups (the view outlines them, test_feature_graph_browser) and says so; the
    URL's own marks win."""
    from tests.app.conftest import _runner
    from workbench.circuits.feature.graph_config import GraphConfig
    from workbench.cli import main
    from workbench.steps.graphs import attribution_graph
    from workbench.workspace import Workspace

    ws = tmp_path / "ws"
    cfg = GraphConfig(max_feature_nodes=30, heads=False)
    prompt = "When Mary and John went to the store , John gave"
    _, folder = attribution_graph(Workspace(ws), tiny[0], tiny_set, prompt, "a", None, cfg=cfg, name="g")
    argv = ["circuit", "group", str(folder), "--workspace", str(ws), "--threshold", "0.05", "--accept", "all"]
    assert main(argv) == 0
    capsys.readouterr()
    supernodes = json.loads((folder / "graph.json").read_text())["qParams"]["supernodes"]
    assert supernodes
    run = _runner(ws, monkeypatch)
    at = ok(run("views/feature_graph.py", graph="circuits/g"))
    assert view_data(at)["annotations"]["groups"] == supernodes
    assert f"the file's {len(supernodes)} groups (qParams.supernodes) open as groups" in text(at)
    drawn = {n["id"] for n in view_data(at)["nodes"]}
    assert {m for _, *ms in supernodes for m in ms} <= drawn  # grouped: marked, so drawn whatever the cap
    mine = [["mine", *supernodes[0][1:]]]
    at = ok(run("views/feature_graph.py", graph="circuits/g", groups=json.dumps(mine)))
    assert view_data(at)["annotations"]["groups"] == mine
