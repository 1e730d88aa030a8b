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
    hooks = [f"blocks.{layer}.ln2.hook_normalized" for layer in range(3)]  # a cross-layer transcoder's graph
    g = build_graph(model, CrossLayerTranscoders(random_clt(model, "topk", True), hooks), tokens)
    to_neuronpedia(g, ws.path("circuits", "clt") / "graph.json", "clt")
    ws.record(ws.path("circuits", "clt"), "circuits", made_by="test", config=g.config)
    return root / "ws"


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
    row = table[(table["source"] == link["source"]) & (table["target"] == link["target"])].iloc[0]
    assert row["heads"] == ", ".join(f"{k} {v:+.3g}" for k, v in link["heads"].items())


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
    ],
)
def test_a_bad_url_parameter_is_a_notice_and_the_graph_still_draws(graph_app, param, value, message):
    """A malformed pins/groups/notes parameter (deeply nested JSON included) is a warning naming it, not a
    Streamlit exception box with a trace; the graph draws without it."""
    at = ok(graph_app("views/feature_graph.py", graph="circuits/g", **{param: value}))
    [warning] = [plain(w.value) for w in at.warning if f"{param}=" in plain(w.value)]
    assert f"ignored the link's {param}=" in warning and message in warning, warning
    assert view_data(at)["nodes"] and param not in at.query_params


def test_the_figure_keeps_embeddings_and_logits_and_counts_hidden_weight(graph_workspace):
    d = json.loads((graph_workspace / "circuits" / "g" / "graph.json").read_text())
    fg = browse.open_feature_graph(graph_workspace / "circuits" / "g")
    g = fgf.to_graph(fg, cap=1)
    assert {n.kind for n in g.nodes} >= {"input", "logits"} and len(g.hidden) == 1
    assert "of the total |link weight|" in g.hidden[0]
    d["metadata"]["schema_version"] = 2
    from workbench.circuits import schema
    from workbench.errors import DamagedFileError

    with pytest.raises(DamagedFileError, match="schema_version is 2, expected 1"):
        schema.read_feature_graph(d)


def test_a_feature_circuits_nodes_start_pinned_unless_the_url_has_marks(graph_app, graph_workspace):
    fg = browse.open_feature_graph(graph_workspace / "circuits" / "pinned")
    at = ok(graph_app("views/feature_graph.py", graph="circuits/pinned"))
    assert view_data(at)["annotations"]["pinned"] == fg.pinned and "3 nodes pinned" in text(at)
    other = fg.nodes[-1]["node_id"]
    at = ok(graph_app("views/feature_graph.py", graph="circuits/pinned", pinned=other))
    assert view_data(at)["annotations"]["pinned"] == [other]
