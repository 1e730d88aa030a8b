"""The graph check: its arithmetic on a graph made by hand, its measurements against the graph's own edges where
they must agree (frozen semantics), and `circuit check` storing the record in a recorded graph."""

import json
import math

import pytest
import torch

from workbench.circuits.neuronpedia import GRAPH_CHECK, read_feature_graph
from workbench.errors import DamagedFileError
from workbench.interventions.check import GraphNodes, check_edges, check_graph, summary, verdict
from workbench.interventions.config import CheckConfig
from workbench.interventions.dictionary import load_dictionary
from workbench.interventions.validation import spearman

PROMPT = "When Mary and John went to the store , John gave"


def _graph(model, folder):
    from workbench.circuits.feature.attribution_graph import build_graph
    from workbench.circuits.feature.graph_config import GraphConfig
    from workbench.circuits.feature.graph_json import to_neuronpedia
    from workbench.circuits.feature.transcoders import open_set

    cfg = GraphConfig(max_feature_nodes=40, heads=False)
    return to_neuronpedia(build_graph(model, open_set(folder).load(0, "cpu", model), PROMPT, "a", None, cfg))


@pytest.fixture(scope="module")
def graph(tiny, tc_set):
    return _graph(tiny[0], tc_set)


def _node(nid, kind, pos, **kw):
    return {"node_id": nid, "feature_type": kind, "ctx_idx": pos, "is_target_logit": False, "activation": 0.0, **kw}


def test_predicted_effects_follow_the_kept_paths():
    """f0 (act 2) -> f1 (act 4) -> logit, and f0 -> logit directly: ablating f0 removes its direct 3 and, through
    f1's pre-activation moving by 5 (one unit of f1 is 10 / 4 of the logit), 12.5 more."""
    nodes = [
        _node("E_7_0", "embedding", 0),
        _node("0_3_0", "cross layer transcoder", 0, activation=2.0),
        _node("1_4_0", "cross layer transcoder", 0, activation=4.0),
        _node("3_9_0", "logit", 0, feature=9, is_target_logit=True),
    ]
    links = [
        {"source": "0_3_0", "target": "1_4_0", "weight": 5.0},
        {"source": "1_4_0", "target": "3_9_0", "weight": 10.0},
        {"source": "0_3_0", "target": "3_9_0", "weight": 3.0},
    ]
    g = GraphNodes({"nodes": nodes, "links": links}, "target")
    assert g.tokens.tolist() == [7] and g.features["0_3_0"] == (0, 0, 3, 2.0)
    assert g.predicted(links) == pytest.approx({"1_4_0": -10.0, "0_3_0": -(3.0 + 5.0 * 10.0 / 4.0)})


def test_summary_weighs_by_predicted_effect():
    rows = [
        {"node_id": "a", "predicted": -3.0, "measured": -2.0, "confirmed": True},
        {"node_id": "b", "predicted": 1.0, "measured": -1.0, "confirmed": False},
    ]
    s = summary(rows, "nodes")
    assert s == {"nodes_checked": 2, "nodes_confirmed_share": 0.75, "nodes_failed": ["b"]}


@pytest.mark.parametrize("dictionary", ["tc_set", "tiny_clt"])
def test_frozen_edges_reproduce_the_graph_exactly(tiny, request, dictionary):
    """With patterns and scales frozen and the MLPs between held, a source's write into its target is the graph's
    own direct effect: measured = -weight for every edge checked, into features and into the logit. For a CLT the
    source's writes into every held layer between reach the target too, as its graph's edges sum them."""
    model = tiny[0]
    folder = request.getfixturevalue(dictionary)
    sites, graph = load_dictionary(folder, model), _graph(model, folder)
    r = check_graph(model, sites, graph, CheckConfig(semantics="frozen", top_edges=12, edge_target="encoder"))
    assert len(r["edges"]) == 12
    assert any(e["target"].startswith(f"{model.cfg.n_layers + 1}_") for e in r["edges"])  # a logit edge among them
    for e in r["edges"]:
        assert e["measured"] == pytest.approx(e["predicted"], rel=1e-3, abs=1e-4), e
    assert r["summary"]["edges_confirmed_share"] == 1.0


@pytest.mark.parametrize("dictionary", ["tc_set", "tiny_clt"])
def test_the_active_reading_reads_a_set_and_a_clt(tiny, request, dictionary):
    """edge_target mlp_active changes only how an edge into a feature is read (a logit edge measures the same as
    with mlp), for per-layer sets and CLTs (whose layer reads its own layer's active rows) alike."""
    model = tiny[0]
    folder = request.getfixturevalue(dictionary)
    sites, graph = load_dictionary(folder, model), _graph(model, folder)
    runs = [check_graph(model, sites, graph, CheckConfig(top_edges=6, edge_target=t)) for t in ("mlp", "mlp_active")]
    by_target = [{(e["source"], e["target"]): e for e in r["edges"]} for r in runs]
    into_features = [k for k in by_target[0] if not k[1].startswith(f"{model.cfg.n_layers + 1}_")]
    assert into_features and all(math.isfinite(by_target[1][k]["measured_frozen"]) for k in into_features)
    for k, e in by_target[0].items():
        if k not in into_features:
            assert by_target[1][k]["measured_frozen"] == pytest.approx(e["measured_frozen"])


def test_the_check_measures_every_kept_feature_in_both_readings(tiny, tc_set, graph):
    """Every kept feature is measured frozen (direct) and live (total); the verdict of cfg.semantics is the row's;
    the stored Spearman values are those of the stored rows (nodes), and every causal feature pair is ranked."""
    model = tiny[0]
    cfg = CheckConfig(top_edges=3, semantics="live")
    sites = load_dictionary(tc_set, model)
    calls = []
    r = check_graph(model, sites, graph, cfg, progress=lambda *a: calls.append(a))
    alone = check_edges(model, sites, graph, cfg)  # the edges alone, as the full check reads them
    assert alone["edges"] == r["edges"] and alone["summary"]["edges_verdicts"] == r["summary"]["edges_verdicts"]
    feats = [n["node_id"] for n in graph["nodes"] if n["feature_type"] == "cross layer transcoder"]
    assert sorted(n["node_id"] for n in r["nodes"]) == sorted(feats)
    n_edges = len(r["edges"])  # progress (the app's prompt box): before each node, each edge, and the QK parts
    assert calls == [("nodes", i, len(feats)) for i in range(len(feats))] + [
        ("edges", i, n_edges) for i in range(n_edges)
    ] + [("qk", 0, 1)]
    for row in r["nodes"] + r["edges"]:
        for s in ("frozen", "live"):
            assert row[f"verdict_{s}"] == verdict(row["predicted"], row[f"measured_{s}"], cfg)
        assert row["measured"] == row["measured_live"] and row["confirmed"] == (row["verdict_live"] == "confirmed")
        assert row["through_attention"] == pytest.approx(row["measured_live"] - row["measured_frozen"])
    assert r["semantics"] == "live" and r["summary"]["cpu_seconds"] > 0
    for s in ("frozen", "live"):
        x, y = [abs(n["predicted"]) for n in r["nodes"]], [abs(n[f"measured_{s}"]) for n in r["nodes"]]
        assert r["spearman"]["nodes"][s]["ablate"] == pytest.approx(spearman(x, y))
        assert -1 <= r["spearman"]["pairs"][s]["steer"] <= 1
        assert sum(r["summary"]["nodes_verdicts"][s].values()) == len(feats)
    assert r["spearman"]["nodes"]["n"] == len(feats) and r["spearman"]["pairs"]["n"] > 0
    stored = read_feature_graph({**graph, GRAPH_CHECK[0]: r})
    assert stored.check["summary"] == r["summary"]
    assert read_feature_graph(graph).check is None  # a graph never checked still loads
    bad = json.loads(json.dumps(r))
    bad["nodes"][0]["measured"] = "x"
    with pytest.raises(DamagedFileError, match="measured"):
        read_feature_graph({**graph, GRAPH_CHECK[0]: bad})
    bad = json.loads(json.dumps(r))
    bad["edges"][0]["verdict_frozen"] = "fine"
    with pytest.raises(DamagedFileError, match="verdict_frozen is 'fine'"):
        read_feature_graph({**graph, GRAPH_CHECK[0]: bad})
    old = {k: v for k, v in r.items() if k != "spearman"} | {"schema_version": 1}  # a record made before still reads
    old["nodes"] = [{k: n[k] for k in ("node_id", "predicted", "measured", "confirmed")} for n in r["nodes"]]
    assert read_feature_graph({**graph, GRAPH_CHECK[0]: old}).check["nodes"] == old["nodes"]


def test_circuit_check_stores_the_record_in_a_recorded_graph(tiny, tc_set, tmp_path, capsys):
    from workbench.circuits.feature.graph_config import GraphConfig
    from workbench.cli import main
    from workbench.steps.graphs import attribution_graph
    from workbench.workspace import Workspace

    ws = tmp_path / "ws"
    cfg = GraphConfig(max_feature_nodes=10, heads=False)
    _, folder = attribution_graph(Workspace(ws), tiny[0], tc_set, PROMPT, "a", None, cfg=cfg, name="g")
    assert main(["circuit", "check", str(folder), "--workspace", str(ws), "--top-edges", "2"]) == 0
    out = capsys.readouterr().out
    assert "of the predicted influence confirmed" in out
    d = json.loads((folder / "graph.json").read_text())
    record = d[GRAPH_CHECK[0]]
    assert record["config"]["top_edges"] == 2 and record["config"]["under"] == 2.0
    for e in record["edges"]:  # each edge's verdict in both readings, printed as stored
        assert f"{e['measured_frozen']:+.4g} {e['verdict_frozen']}; total (live) {e['measured_live']:+.4g}" in out
    block = record["spearman"]["nodes"]
    value = "n/a" if block["frozen"]["ablate"] is None else f"{block['frozen']['ablate']:.3f}"
    assert f"Spearman |predicted| vs |measured|, nodes (n={block['n']}): frozen ablate {value}" in out
    assert main(["circuit", "check", str(folder), "--workspace", str(ws), "--absent", "0.6"]) == 2
    assert "absent=0.6 must be below fraction=0.5" in capsys.readouterr().err
    manifest = json.loads((folder / "artifact.json").read_text())
    assert "check_nodes_confirmed_share" in manifest["summary"] and manifest["made_by"] == "workbench circuit graph"
    assert main(["circuit", "check", str(tmp_path / "nothing.json")]) == 2
    assert "no graph JSON" in capsys.readouterr().err


def test_circuit_check_refuses_a_dictionary_the_graph_was_not_built_with(
    tiny, tiny_sparse, tc_set, other_tc_set, tmp_path, capsys
):
    """--transcoders OTHER (or --model OTHER) is refused in one line naming both content ids, and nothing is written
    (the graph and its manifest stay as they were); a copy of the graph's own set under another name is the same
    dictionary."""
    import shutil

    from workbench.circuits.feature.graph_config import GraphConfig
    from workbench.cli import main
    from workbench.provenance import dictionary_id, model_id
    from workbench.steps.graphs import attribution_graph
    from workbench.workspace import Workspace

    ws = tmp_path / "ws"
    cfg = GraphConfig(max_feature_nodes=10, heads=False)
    _, folder = attribution_graph(Workspace(ws), tiny[0], tc_set, PROMPT, "a", None, cfg=cfg, name="g")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    argv = ["circuit", "check", str(folder), "--workspace", str(ws), "--top-edges", "2"]
    assert main([*argv, "--transcoders", str(other_tc_set)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and dictionary_id(tc_set) in err and dictionary_id(other_tc_set) in err, err
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    graph_only = tmp_path / "graph.json"  # the file alone, without its manifest: its metadata names the set
    shutil.copyfile(folder / "graph.json", graph_only)
    assert main([*argv[:2], str(graph_only), *argv[3:], "--transcoders", str(other_tc_set)]) == 2
    assert dictionary_id(other_tc_set) in capsys.readouterr().err
    assert main([*argv, "--model", "tiny-sparse"]) == 2  # another model of the same shape
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and model_id(tiny[0]) in err and model_id(tiny_sparse[0]) in err, err
    copy = shutil.copytree(tc_set, tmp_path / "renamed_set")
    assert main([*argv, "--transcoders", str(copy)]) == 0


def test_an_imported_graph_json_is_a_workspace_graph_that_keeps_its_ids(tiny, tc_set, other_tc_set, tmp_path, capsys):
    """`circuit import graph.json` records it as a graph the app lists; its ids travel in it, so the check refuses
    another set and runs with its own."""
    from workbench import browse
    from workbench.circuits.feature.graph_config import GraphConfig
    from workbench.cli import main
    from workbench.steps.graphs import attribution_graph
    from workbench.workspace import Workspace

    cfg = GraphConfig(max_feature_nodes=10, heads=False)
    _, made = attribution_graph(Workspace(tmp_path / "a"), tiny[0], tc_set, PROMPT, "a", None, cfg=cfg, name="g")
    ws = tmp_path / "ws"
    assert main(["circuit", "import", str(made / "graph.json"), "--workspace", str(ws), "--name", "in"]) == 0
    assert "a graph: " in capsys.readouterr().out
    folder = ws / "circuits" / "in"
    assert browse.catalog(ws).feature_graphs == ["circuits/in"]
    assert json.loads((folder / "artifact.json").read_text())["made_by"] == "workbench circuit import"
    argv = ["circuit", "check", str(folder), "--workspace", str(ws), "--top-edges", "2", "--transcoders"]
    assert main([*argv, str(other_tc_set)]) == 2 and "was made with dictionary" in capsys.readouterr().err
    assert main([*argv, str(tc_set)]) == 0


def test_circuit_check_on_a_clt_graph(tiny, tiny_clt, tmp_path, capsys):
    """`circuit graph --transcoders CLT` then `circuit check` on its folder: the CLT is read from the manifest."""
    from workbench.cli import main

    ws = tmp_path / "ws"
    graph_args = ["circuit", "graph", "--transcoders", str(tiny_clt), "--prompt", PROMPT, "--answer", "a", "--no-heads"]
    assert main([*graph_args, "--max-feature-nodes", "8", "--workspace", str(ws), "--name", "clt"]) == 0
    folder = next((ws / "circuits").glob("*clt*"))
    assert main(["circuit", "check", str(folder), "--workspace", str(ws), "--top-edges", "3"]) == 0
    assert "of the predicted influence confirmed" in capsys.readouterr().out
    record = json.loads((folder / "graph.json").read_text())[GRAPH_CHECK[0]]
    assert record["nodes"] and len(record["edges"]) == 3
    assert all(isinstance(n["measured"], float) for n in record["nodes"])


def test_token_and_position_edges_are_measured_apart(absolute_set):
    """A model with absolute positions: each embedding link is a token link (its check zeroes hook_embed there) or
    a position link (hook_pos_embed); both are measured in both readings, and frozen through the encoder each
    reproduces its own part of the graph's edge exactly."""
    from workbench.circuits.feature.attribution_graph import build_graph
    from workbench.circuits.feature.graph_config import GraphConfig
    from workbench.circuits.feature.graph_json import to_neuronpedia
    from workbench.circuits.feature.transcoders import open_set

    model, folder = absolute_set
    tokens = torch.tensor([3, 17, 5, 9, 30, 12, 7, 21])
    built = build_graph(model, open_set(folder).load(0, "cpu", model), tokens, None, None, GraphConfig(heads=False))
    graph = to_neuronpedia(built)
    g = GraphNodes(graph, "target")
    assert torch.equal(g.tokens, tokens)
    assert {nid[0]: hook for nid, (_, hook) in g.embeddings.items()} == {"E": "hook_embed", "P": "hook_pos_embed"}
    emb = sorted((link for link in graph["links"] if link["source"] in g.embeddings), key=lambda k: -abs(k["weight"]))
    picked = [next(k for k in emb if k["source"][0] == kind) for kind in "EP"]  # the largest of each kind
    r = check_graph(
        model, load_dictionary(folder, model), {**graph, "links": picked}, CheckConfig(edge_target="encoder")
    )
    assert sorted(e["source"][0] for e in r["edges"]) == ["E", "P"]
    for e in r["edges"]:
        assert e["measured_frozen"] == pytest.approx(e["predicted"], rel=1e-3, abs=1e-4), e
        assert isinstance(e["measured_live"], float) and "through_attention" in e


def test_one_reading_is_measured_alone_and_a_shared_clean_run_changes_nothing(tiny, tc_set, graph):
    """both_readings off: only the semantics' reading is measured, stored and printed. The clean run the check
    shares over its interventions gives each exactly what the intervention's own clean run gives."""
    from workbench.interventions.check import (
        READINGS,
        measure_edge,
        measure_node,
        report_lines,
        shared_clean_runs,
    )

    model = tiny[0]
    sites = load_dictionary(tc_set, model)
    one = check_graph(model, sites, graph, CheckConfig(semantics="live", both_readings=False, top_edges=3))
    assert one["readings"] == ["live"] and set(one["spearman"]["nodes"]) == {"live", "n"}
    for row in one["edges"] + one["nodes"]:
        assert "measured_live" in row and "measured_frozen" not in row and "through_attention" not in row
    assert set(one["summary"]["edges_verdicts"]) == {"live"}
    assert not any("frozen" in line for line in report_lines(one))
    g = GraphNodes(graph, "target")
    shared = shared_clean_runs(model, sites, g, READINGS)
    nid, link = next(iter(g.features)), next(k for k in graph["links"] if k["source"] in g.embeddings)
    for s in READINGS:
        assert measure_node(model, sites, g, nid, s, shared=shared) == measure_node(model, sites, g, nid, s)
        cfg = CheckConfig(semantics=s)
        assert measure_edge(model, sites, g, link, cfg, shared) == measure_edge(model, sites, g, link, cfg)


def test_a_nodes_readings_in_one_batched_run_are_its_readings_one_by_one(tiny, tc_set, graph):
    """measure_node_rows (the check's: every reading of a node in one run, a batch row each, the frozen rows held)
    gives each reading's metric change and pre-activation changes as its own run does (measure_node)."""
    from workbench.interventions.check import (
        OPS,
        READINGS,
        feature_preacts,
        measure_node,
        measure_node_rows,
        shared_clean_runs,
    )

    model = tiny[0]
    sites = load_dictionary(tc_set, model)
    g = GraphNodes(graph, "target")
    _, clean = feature_preacts(model, sites, g, [])
    shared = shared_clean_runs(model, sites, g, READINGS)
    rows = [(s, op) for s in READINGS for op in OPS]
    for nid in list(g.features)[:3]:
        batched = measure_node_rows(model, sites, g, nid, rows, clean, shared)
        for s, op in rows:
            metric, pre = measure_node(model, sites, g, nid, s, op, clean)
            assert batched[s, op][0] == pytest.approx(metric, rel=1e-4, abs=1e-5), (nid, s, op)
            assert batched[s, op][1] == pytest.approx(pre, rel=1e-4, abs=1e-5), (nid, s, op)
        assert batched["frozen", "ablate"] != batched["live", "ablate"]  # the rows are not all one reading


def test_difference_needs_a_second_logit(graph):
    from workbench.errors import BadValueError

    with pytest.raises(BadValueError, match="second logit"):
        GraphNodes(graph, "difference")
    assert torch.is_tensor(GraphNodes(graph, "target").tokens)


def _blank_model(d_model: int, n_ctx: int, d_head: int, name: str, n_layers: int = 1):
    """A one-head-per-layer (one layer by default), LayerNorm-free model with absolute positions and every weight
    zero: the hand-set models below fill in only their mechanism (5 tokens, 4 MLP neurons per layer)."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    cfg = HookedTransformerConfig(
        n_layers=n_layers,
        d_model=d_model,
        n_ctx=n_ctx,
        d_head=d_head,
        n_heads=1,
        d_mlp=4,
        d_vocab=5,
        act_fn="relu",
        normalization_type=None,
        positional_embedding_type="standard",
        model_name=name,
        device="cpu",
    )
    model = HookedTransformer(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    return model


def _shortcut_model():
    """One layer, no LayerNorm, d_model 8 (basis e0..e7), tokens 0 BOS, 1 A, 2 B, 3 C, 4 OUT. The mechanism: the head
    copies 'A' from position 0 into e6 at position 1 (a constant query, a key on position 0's positional e4), and
    the MLP reads e6 and writes e7, the OUT logit's direction. B's own embedding (e1) reaches nothing."""
    model = _blank_model(d_model=8, n_ctx=4, d_head=8, name="shortcut")
    e = torch.eye(8)
    with torch.no_grad():
        model.W_E[1], model.W_E[2], model.W_E[3], model.W_E[0] = e[0], e[1], e[2], e[3]
        model.W_pos[0] = e[4]
        model.blocks[0].attn.b_Q[0, 0] = 60.0  # every query: "position 0's key"
        model.blocks[0].attn.W_K[0, 4, 0] = 1.0
        model.blocks[0].attn.W_V[0, 0, 1] = 1.0  # A -> head dim 1 -> e6
        model.blocks[0].attn.W_O[0, 1, 6] = 1.0
        model.blocks[0].mlp.W_in[6, 0] = 1.0
        model.blocks[0].mlp.W_out[0, 7] = 2.0
        model.W_U[7, 4] = 1.0
    return model.eval()


def _zero_transcoder(d: int, k: int = 1):
    """A Top-k transcoder with every weight zero (two latents): a hand-set set fills in its features."""
    from workbench.sae.architectures import build
    from workbench.sae.config import SAEConfig

    sae = build(SAEConfig("topk", k=k, n_latents=2, transcoder=True).resolve(d_in=d, d_out=d))
    with torch.no_grad():
        for p in sae.parameters():
            p.zero_()
    return sae


def _write_set(model, root, saes: list):
    """A transcoder set in `root` of one transcoder per layer (saes[layer])."""
    from workbench.provenance import model_id
    from workbench.sae.io import save_sae
    from workbench.sae.transcoders import SCHEMA, SET_MANIFEST

    layers = []
    for i, sae in enumerate(saes):
        hooks = f"blocks.{i}.hook_mlp_in", f"blocks.{i}.hook_mlp_out"
        meta = {"hook_name": hooks[0], "hook_name_out": hooks[1], "model_name": model_id(model)}
        save_sae(sae, root / f"L{i}", meta)
        layers.append(
            {
                "layer": i,
                "input_hook": hooks[0],
                "target_hook": hooks[1],
                "input_kind": "hook_mlp_in",
                "transcoders": [f"L{i}"],
            }
        )
    manifest = {
        "schema": SCHEMA,
        "version": 1,
        "model": model_id(model),
        "cache": "",
        "n_layers": len(saes),
        "layers": layers,
    }
    (root / SET_MANIFEST).write_text(json.dumps(manifest))
    return root


def _shortcut_set(model, root, reads=None, second=None):
    """A transcoder for the MLP that learned the shortcut: where B follows A (always, in its training text) its
    feature 0 reads B's embedding e1, not the head's e6, and writes what the MLP writes (2 e7). reads: basis
    direction -> encoder weight of feature 0 instead; second: (reads, writes) of a feature 1 (then k = 2)."""
    sae = _zero_transcoder(model.cfg.d_model, 1 + bool(second))
    with torch.no_grad():
        for i, w in (reads or {1: 1.0}).items():
            sae.W_enc[0, i] = w
        sae.W_dec[0, 7] = 2.0
        for latent, (ins, outs) in enumerate([second] if second else [], 1):
            for i, w in ins.items():
                sae.W_enc[latent, i] = w
            for i, w in outs.items():
                sae.W_dec[latent, i] = w
    return _write_set(model, root, [sae])


def test_the_check_flags_exactly_the_shortcut_edge(tmp_path):
    """On 'A B' the transcoder reconstructs the MLP exactly (no error), so the graph shows emb B -> feature -> OUT
    and nothing from A; the real MLP ignores B. Ablating B's embedding moves the real MLP output by nothing: the
    check flags that edge, and only it (the feature's write into the logit is real)."""
    from workbench.circuits.feature.attribution_graph import build_graph
    from workbench.circuits.feature.graph_config import GraphConfig
    from workbench.circuits.feature.graph_json import to_neuronpedia
    from workbench.circuits.feature.transcoders import open_set

    model = _shortcut_model()
    folder = _shortcut_set(model, tmp_path)
    tokens = [1, 2]
    g = build_graph(model, open_set(folder).load(0, "cpu", model), tokens, 4, None, GraphConfig(heads=False))
    graph = to_neuronpedia(g)
    weights = {(link["source"], link["target"]): link["weight"] for link in graph["links"]}
    assert weights[("E_2_1", "0_0_1")] == pytest.approx(1.0)  # the graph's shortcut
    assert not any(s == "E_1_0" and w for (s, _), w in weights.items())  # and nothing from A
    sites = load_dictionary(folder, model)
    r = check_graph(model, sites, graph, CheckConfig(top_edges=10))
    assert r["summary"]["edges_failed"] == ["E_2_1 -> 0_0_1"]
    assert r["summary"]["nodes_failed"] == []
    blind = check_graph(model, sites, graph, CheckConfig(top_edges=10, edge_target="encoder"))
    assert blind["summary"]["edges_failed"] == []  # read through the transcoder's encoder, the shortcut looks real


def test_a_circuits_own_graph_is_checked_with_the_prompts_tokens(graph):
    """A feature circuit's neuronpedia.json keeps only its own embedding nodes: the tokens come from its folder."""
    from workbench.errors import BadValueError

    kept = [n for n in graph["nodes"] if not (n["feature_type"] == "embedding" and n["ctx_idx"] == 1)]
    partial = {**graph, "nodes": kept}
    with pytest.raises(BadValueError, match="embedding node for every position"):
        GraphNodes(partial, "target")
    full = GraphNodes(graph, "target")
    assert torch.equal(GraphNodes(partial, "target", full.tokens.tolist()).tokens, full.tokens)


def _previous_token_model(mlp_reads_b: float = 0.0, second_neuron: bool = False):
    """The ground truth of issue 45: one layer, no LayerNorm, d_model 12, tokens 0 BOS, 1 A, 2 B, 3 C, 4 OUT, on
    'BOS A B' (positions 0..2; basis: e0 A, e1 B, e3 BOS, e4 e5 e8 positions 0 1 2, e6 the head's copy, e7 the
    MLP's write, the OUT logit's direction). A previous-token head whose query depends on its own position: at
    position 2 its query (from e8) looks for position 1's key (e5), and a bias looks for BOS (a sink, scored far
    lower); it copies A (e0) into e6. The MLP reads e6 (and `mlp_reads_b` times B's e1) and writes 2 e7. The true
    edges: A's embedding at position 1 -> the MLP at position 2 (through the head's OV), the MLP -> OUT. B's own
    embedding reaches the MLP only through the head's QK: zeroed with attention live, the query loses its
    position and the head attends to BOS, which carries nothing. second_neuron: a second MLP neuron reads e6 too and
    writes e7 + e9."""
    model = _blank_model(d_model=12, n_ctx=3, d_head=2, name="previous-token")
    e = torch.eye(12)
    attn, mlp = model.blocks[0].attn, model.blocks[0].mlp
    with torch.no_grad():
        model.W_E[0], model.W_E[1], model.W_E[2], model.W_E[3] = e[3], e[0], e[1], e[2]
        model.W_pos[0], model.W_pos[1], model.W_pos[2] = e[4], e[5], e[8]
        attn.W_Q[0, 8, 0], attn.W_K[0, 5, 0] = 60.0, 1.0  # position 2 looks for position 1
        attn.b_Q[0, 1], attn.W_K[0, 3, 1] = 10.0, 1.0  # every query looks for BOS, less strongly
        attn.W_V[0, 0, 0], attn.W_O[0, 0, 6] = 1.0, 1.0  # A -> e6
        mlp.W_in[6, 0], mlp.W_in[1, 0], mlp.W_out[0, 7] = 1.0, mlp_reads_b, 2.0
        if second_neuron:
            mlp.W_in[6, 1], mlp.W_out[1, 7], mlp.W_out[1, 9] = 1.0, 1.0, 1.0
        model.W_U[7, 4] = 1.0
    return model.eval()


def _ground_truth_check(tmp_path, reads: dict, mlp_reads_b: float = 0.0, **kw) -> tuple[dict, dict]:
    """(graph link weights, the check's record by (source, target) and "graph": the graph JSON) on the
    previous-token model through a hand-set
    transcoder whose feature 0 reads `reads` (direction -> weight) and writes 2 e7; kw: the model's second neuron
    and the set's second feature, the CheckConfig's fields."""
    from workbench.circuits.feature.attribution_graph import build_graph
    from workbench.circuits.feature.graph_config import GraphConfig
    from workbench.circuits.feature.graph_json import to_neuronpedia
    from workbench.circuits.feature.transcoders import open_set

    second, neuron = kw.pop("second", None), kw.pop("second_neuron", False)
    model = _previous_token_model(mlp_reads_b, neuron)
    folder = _shortcut_set(model, tmp_path, reads, second)
    graph = to_neuronpedia(
        build_graph(model, open_set(folder).load(0, "cpu", model), [0, 1, 2], 4, None, GraphConfig(heads=False))
    )
    weights = {(link["source"], link["target"]): link["weight"] for link in graph["links"]}
    r = check_graph(model, load_dictionary(folder, model), graph, CheckConfig(top_edges=10, **kw))
    rows = {(e["source"], e["target"]): e for e in r["edges"]} | {n["node_id"]: n for n in r["nodes"]}
    return weights, rows | {"graph": graph}


TRUE, SPURIOUS, OUT = ("E_1_1", "0_0_2"), ("E_2_2", "0_0_2"), ("0_0_2", "2_4_2")
POSITION = ("P_2_2", "0_0_2")  # position 2's own embedding -> the feature (the model has absolute positions)


def test_the_true_edges_of_a_faithful_transcoder_are_confirmed(tmp_path):
    """The transcoder reads what the MLP reads (the head's e6): A -> feature, feature -> OUT and the node are
    confirmed in both readings, and nothing goes through attention on the edge the head carries by its OV."""
    weights, r = _ground_truth_check(tmp_path, {6: 1.0})
    assert weights[TRUE] == pytest.approx(1.0) and SPURIOUS not in weights
    for key in (TRUE, OUT, "0_0_2"):
        assert (r[key]["verdict_frozen"], r[key]["verdict_live"], r[key]["confirmed"]) == ("confirmed",) * 2 + (True,)
    assert r[TRUE]["measured_frozen"] == pytest.approx(-1.0) and r[TRUE]["through_attention"] == pytest.approx(0.0)


def test_a_spurious_direct_edge_is_absent_and_its_live_effect_is_the_positions(tmp_path):
    """The issue's case: the transcoder gives 0.7 of the feature's input to B's own embedding (a same-position
    edge the model lacks) and 0.3 to A's. The model has absolute positions, so the graph splits B's embedding into
    its token (e1, which the transcoder reads) and its position (e8, which the head's query reads): the token's
    edge is absent in both readings, nothing of it going through attention. Zeroing the position with attention
    live moves the MLP (the query loses its position and attends to BOS), frozen it moves nothing: the spurious
    live influence a whole-embedding node showed (live reading -1) is the position node's, through attention."""
    from workbench.interventions.check import measure_edge

    weights, r = _ground_truth_check(tmp_path, {6: 0.3, 1: 0.7})
    assert weights[SPURIOUS] == pytest.approx(0.7) and weights[TRUE] == pytest.approx(0.3)
    assert not weights.get(POSITION)  # the transcoder reads no position
    e = r[SPURIOUS]
    assert e["measured_frozen"] == pytest.approx(0.0, abs=1e-4) and e["measured_live"] == pytest.approx(0.0, abs=1e-4)
    assert (e["verdict_frozen"], e["verdict_live"], e["confirmed"]) == ("absent", "absent", False)
    model = _previous_token_model()
    folder = _shortcut_set(model, tmp_path, {6: 0.3, 1: 0.7})
    sites, graph = load_dictionary(folder, model), r["graph"]
    g, link = GraphNodes(graph, "target"), {"source": POSITION[0], "target": POSITION[1], "weight": 0.0}
    live, frozen = (measure_edge(model, sites, g, link, CheckConfig(semantics=s)) for s in ("live", "frozen"))
    assert live == pytest.approx(-1.0, abs=1e-3) and frozen == pytest.approx(0.0, abs=1e-4)


def test_an_under_weighted_true_edge_is_under_predicted(tmp_path):
    """The same transcoder gives the true edge A -> feature 0.3 of an input that is all A's: measured -1 against
    -0.3 predicted, in both readings (the old check confirmed it: nothing flagged under-prediction)."""
    _, r = _ground_truth_check(tmp_path, {6: 0.3, 1: 0.7})
    e = r[TRUE]
    assert e["measured_frozen"] == pytest.approx(-1.0) and e["predicted"] == pytest.approx(-0.3)
    assert (e["verdict_frozen"], e["verdict_live"], e["confirmed"]) == ("under-predicted", "under-predicted", False)
    assert r[OUT]["verdict"] == "confirmed"


@pytest.mark.parametrize(
    "mlp_reads_b, measured, word",
    [(0.2, -0.2, "over-predicted"), (-0.3, 0.3, "sign-flipped")],
)
def test_a_mis_weighted_direct_edge_gets_its_word(tmp_path, mlp_reads_b, measured, word):
    """The MLP reads B's own embedding too, weakly (0.2: measured -0.2 against the graph's -0.7) or against it
    (-0.3: zeroing B raises the MLP's output): the direct reading names the fault."""
    _, r = _ground_truth_check(tmp_path, {6: 0.3, 1: 0.7}, mlp_reads_b)
    e = r[SPURIOUS]
    assert e["measured_frozen"] == pytest.approx(measured, abs=1e-4) and e["verdict_frozen"] == word


@pytest.mark.parametrize(
    "edge_target, measured",
    [("mlp", -1.5), ("mlp_active", -1.0), (None, -1.0)],
    ids=["mlp", "mlp_active", "default"],
)
def test_the_active_reading_does_not_count_an_overlapping_feature(tmp_path, edge_target, measured):
    """The MLP has two neurons reading the head's e6 (writing 2 e7, and e7 + e9), the transcoder one feature for
    each, both active. Zeroing A's embedding removes 3 e7 + e9: along feature 0's row that is 1.5 of its code (the
    other feature's write overlaps its row), fitted on both active rows exactly 1, the graph's weight. The default
    reading is the fitted one: the code the graph's edge predicts."""
    second = ({6: 1.0}, {7: 1.0, 9: 1.0})
    kw = {"edge_target": edge_target} if edge_target else {}
    _, r = _ground_truth_check(tmp_path, {6: 1.0}, second=second, second_neuron=True, **kw)
    e = r[TRUE]
    assert e["predicted"] == pytest.approx(-1.0) and e["measured_frozen"] == pytest.approx(measured)
