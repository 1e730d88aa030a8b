"""The circuit, compare, attention and run pages on a small real workspace (AppTest: the scripts run, no browser)."""

from __future__ import annotations

import json
import re
from urllib.parse import unquote

import pytest

from app import state
from app.figures import attention as fa
from app.figures import circuit as cg
from workbench import browse
from workbench.attention import claims


def ok(at):
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def plain(s: str) -> str:
    """Page text as the browser shows it: the app escapes file and user text for Markdown."""
    return re.sub(r"\\(.)", r"\1", s)


def text(at) -> str:
    return plain(" ".join([m.value for m in at.markdown] + [c.value for c in at.caption]))


def charts(at) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def svgs(at, name: str) -> list[str]:
    """The page's SVG charts called `name` (app/figures/svg.py: data-chart), as sent, their data URI decoded."""
    return [unquote(h.proto.body) for h in at.get("html") if f'data-chart="{name}"' in h.proto.body]


def view_data(at) -> dict:
    """What the page hands the graph view (app/graph_view): nodes, edges, hidden counts, annotations; the edges
    back from the wire's columns (layout.wire) into one dict each, as graph.js rebuilds them."""
    from tests.app.test_graph_view import edges_of

    sent = json.loads(at.get("bidi_component")[0].proto.bytes)
    return {**sent["graph"], **sent["view"], "edges": edges_of(sent["graph"])}


def saved(ws, name):
    return cg.from_record(browse.open_circuit(ws / "circuits" / name))


def test_circuit_page_draws_the_saved_circuit_and_its_curve(circuit_app, circuit_workspace):
    cd = saved(circuit_workspace, "ioi-0")
    at = ok(circuit_app("views/circuit.py", circuit="circuits/ioi-0"))
    assert at.metric[0].value == f"{cd.n_circuit_edges:,}"
    assert at.metric[0].label == f"edges in the circuit (of {cd.n_graph_edges:,})"
    assert "drawn: the saved circuit" in text(at)
    graph, [curve] = view_data(at), svgs(at, "curve")
    assert len(graph["edges"]) == len(cg.choose(cd).rows) and graph["hidden"] == cg.choose(cd).hidden
    assert "drawn: " in curve and "data-mark=" in curve and not charts(at)  # no Plotly chart on the page
    assert "| % edges | edges | NDF search | NDF top-k | NFS search | NFS top-k |" in text(at)  # a Markdown table
    assert len(at.get("download_button")) == 3


def test_budget_control_redraws_and_moves_the_point(circuit_app, circuit_workspace):
    cd = saved(circuit_workspace, "ioi-0")
    f = cd.curve["fractions"][6]
    at = ok(circuit_app("views/circuit.py", circuit="circuits/ioi-0", view="budget", budget=str(f), cap="2000"))
    k = int(f * cd.n_graph_edges)
    assert f"top {k} edges by |attribution|" in text(at)
    graph, [curve] = view_data(at), svgs(at, "curve")
    assert f'data-mark="{100 * f:.6g}"' in curve
    assert len(graph["edges"]) == len(cg.choose(cd, f, 2000).rows)
    at = ok(circuit_app("views/circuit.py", circuit="circuits/ioi-0", view="target", target="0.05"))
    assert "smallest grid budget" in text(at) or at.warning


def test_head_node_shows_its_pattern_logit_effect_and_layer_features(circuit_app, circuit_workspace):
    d = json.loads((circuit_workspace / "circuits" / "ioi-0" / "circuit.json").read_text())
    nodes = [n["name"] for n in d["nodes"] if n["in_circuit"]]
    head = next(n for n in nodes if n.startswith("a") and not n.startswith("a2."))
    at = ok(circuit_app("views/circuit.py", circuit="circuits/ioi-0", node=head, cap="2000"))
    assert at.selectbox(key="w_node").value == head
    [pattern] = svgs(at, "pattern")
    assert f"{head}: attention pattern" in pattern and not charts(at)
    assert any(m.label.startswith("answer") for m in at.metric)
    assert f"no SAE of this model on a layer-{head[1]} hook" in text(at)
    layer2 = [n for n in nodes if n.startswith(("a2.", "m2"))]
    if layer2:  # the SAEs sit on blocks.2.hook_resid_post of the same model: their top units, linked
        at = ok(circuit_app("views/circuit.py", circuit="circuits/ioi-0", node=layer2[0], cap="2000"))
        assert [p.proto.label for p in at.get("page_link") if p.proto.label.startswith("unit ")]


def test_mlp_node_and_a_node_on_a_layer_without_saes(circuit_app):
    at = ok(circuit_app("views/circuit.py", circuit="circuits/induction-0", cap="2000"))
    nodes = at.selectbox(key="w_node").options
    mlp = next((n for n in nodes if n.startswith("m") and not n.startswith("m2")), None)
    if mlp is None:
        pytest.skip("no MLP outside layer 2 in this circuit")
    at = ok(circuit_app("views/circuit.py", circuit="circuits/induction-0", cap="2000", node=mlp))
    assert "direct logit effect" in text(at) and f"no SAE of this model on a layer-{mlp[1:]} hook" in text(at)


@pytest.mark.parametrize(
    "params, message",
    [
        ({"circuit": "circuits/none"}, "does not exist"),
        ({"circuit": "../x"}, "'..' may not appear"),
        ({"view": "3d"}, "view='3d' is not valid"),
        ({"view": "budget", "budget": "0.3"}, "not a point of the curve"),
    ],
)
def test_bad_circuit_links_are_one_line_errors(circuit_app, params, message):
    at = circuit_app("views/circuit.py", **{"circuit": "circuits/ioi-0", **params})
    assert not at.exception and message in plain(at.error[0].value)


def test_compare_page_pairs_the_query_across_models(circuit_app, circuit_workspace):
    at = ok(circuit_app("views/compare.py", circuit="circuits/ioi-0"))
    table = at.dataframe[0].value
    b, s = saved(circuit_workspace, "ioi-0"), saved(circuit_workspace, "ioi-0-sparse")
    assert list(table["base edges"])[0] == b.n_circuit_edges and list(table["sparse edges"])[0] == s.n_circuit_edges
    diff = view_data(at)  # one graph of both circuits, what only one has marked and counted; nothing to pin
    assert diff["readonly"] and diff["names"] == ["base", "sparse"]
    edges = lambda cd: {(cd.src[i], cd.dst[i]) for i in cg.choose(cd, None, 150).rows}  # noqa: E731
    assert diff["counts"]["edges_both"] == sum(e["status"] == "both" for e in diff["edges"])
    assert diff["counts"]["edges_a"] + diff["counts"]["edges_both"] == len(cg.choose(b, None, 150).rows)
    assert diff["counts"]["edges_b"] + diff["counts"]["edges_both"] == len(cg.choose(s, None, 150).rows)
    assert len(edges(b) & edges(s)) <= diff["counts"]["edges_both"]
    heads = lambda cd: {n for i in cd.in_circuit.nonzero()[0] for n in (cd.src[i], cd.dst[i]) if n[0] == "a"}  # noqa: E731
    membership = at.dataframe[1].value  # the heads of the two saved circuits, what only one has first
    assert {h for h, w in zip(membership["head"], membership["in"]) if w != "only sparse"} == heads(b)
    assert {h for h, w in zip(membership["head"], membership["in"]) if w != "only base"} == heads(s)
    per_task = at.dataframe[2].value  # the stored comparison's paired claims, per target and measure
    assert "ioi" in text(at) and list(per_task["measure"])[:5] == list(claims.MEASURES)
    assert {"base ÷ sparse (mean counts)", "base − sparse [95%]"} <= set(per_task.columns)
    [(_, res)] = browse.compare_results(circuit_workspace / "models" / "random-sparse")
    row = per_task[(per_task["NDF"] == "0.9") & (per_task["measure"] == "component edges")].iloc[0]
    p = claims.paired(res, "component_edges", "0.9")
    assert (row["queries"], row["base"], row["sparse"]) == (p["n"], p["base"], p["sparse"]) and p["n"] == 1
    assert row["undecided"] == "difference includes 0; ratio includes 1"  # one query draws no interval
    assert "base ÷ sparse edges" in at.dataframe[0].value.columns
    only = at.dataframe[3].value  # per target and model, the heads only that model's circuits use
    assert list(only["heads only in"]) == ["base", "sparse", "base", "sparse"] and set(only["NDF"]) == {"0.8", "0.9"}
    assert "not renormalised (published gate)" in text(at)
    back = ok(circuit_app("views/compare.py", circuit="circuits/ioi-0-sparse"))  # Back from the sparse circuit
    assert back.query_params["circuit"] == "circuits/ioi-0" and at.dataframe[0].value.equals(back.dataframe[0].value)
    circuit = ok(circuit_app("views/circuit.py", circuit="circuits/ioi-0-sparse"))  # and the way there
    [link] = [p for p in circuit.get("page_link") if "compare with" in p.proto.label]
    assert "circuit=circuits%2Fioi-0&" in link.proto.query_string + "&" and link.proto.page.endswith("compare")


def _array(v):
    """A Plotly JSON array: a list (None for NaN) or Plotly's typed-array encoding {dtype, bdata, shape}."""
    import base64

    import numpy as np

    if isinstance(v, dict):
        a = np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"])
        return a.reshape([int(x) for x in str(v.get("shape", len(a))).split(",")]).astype(float)
    return np.array([[np.nan if x is None else x for x in row] for row in v], dtype=float)


def _closed_cells(trace: dict) -> int:
    import numpy as np

    return int((~np.isnan(_array(trace["z"]))).sum())


def test_attention_page_draws_closed_gates_differences_and_masks(circuit_app, circuit_workspace):
    """On the embedded sparse model: closed gates in their own colour, base - sparse, every head's mask."""
    import numpy as np
    import torch

    from workbench.models import load

    report = json.loads((circuit_workspace / "models" / "tiny-sparse" / "attention_report.json").read_text())
    family = next(iter(report["examples"]["base"]))
    example = report["examples"]["base"][family][0]
    model, _ = load("tiny-sparse")
    with torch.no_grad():
        _, cache = model.run_with_cache(model.to_tokens(example["prompt"]), names_filter=lambda n: "hook_gate" in n)
    gates = cache["blocks.0.attn.hook_gate"][0].bool()
    n = gates.shape[-1]
    closed = (~gates & torch.ones(n, n, dtype=torch.bool).tril()).sum((-1, -2))  # per head of layer 0
    assert closed.sum() > 0  # the real model closes gates on its own example

    at = ok(circuit_app("views/attention.py", model="models/tiny-sparse"))
    sparse = next(c for c in charts(at) if json.dumps(c["layout"]["title"]).startswith('{"text": "sparse a0.h0'))
    assert sparse["data"][1]["name"] == "closed gate" and _closed_cells(sparse["data"][1]) == int(closed[0])
    assert "orange cells in the sparse model: closed gates" in text(at)

    at = ok(circuit_app("views/attention.py", model="models/tiny-sparse", view="difference"))
    (diff,) = [c for c in charts(at) if "base − sparse" in json.dumps(c["layout"]["title"], ensure_ascii=False)]
    z = _array(diff["data"][0]["z"])
    want = np.array(example["patterns"][0][0]) - np.array(report["examples"]["sparse"][family][0]["patterns"][0][0])
    assert np.allclose(np.tril(z), np.tril(want), equal_nan=True)

    at = ok(circuit_app("views/attention.py", model="models/tiny-sparse", view="mask"))
    (mask,) = [c for c in charts(at) if "open (blue) and closed (orange)" in json.dumps(c["layout"]["title"])]
    titles = [a["text"] for a in mask["layout"]["annotations"]]
    pairs = n * (n + 1) // 2
    assert titles == [f"a0.h{h}: {pairs - int(closed[h])} of {pairs} open" for h in range(len(closed))]

    at = circuit_app("views/attention.py", model="models/tiny-sparse", view="nope")
    assert not at.exception and "view='nope' is not valid; choose one of: side, difference, mask" in plain(
        at.error[0].value
    )


def test_the_48_head_sparse_model_added_to_a_workspace_is_on_the_attention_and_compare_pages(tmp_path, monkeypatch):
    """`attention add small-sparse`: the Attention page draws its 6 layers x 8 heads; the Compare page finds it and
    shows the section-3 claims shipped with it, per family, as claims.paired reads them."""
    from tests.app.conftest import _runner
    from workbench.steps.attention import embedded_sparse_model
    from workbench.workspace import Workspace

    report, folder = embedded_sparse_model(Workspace(tmp_path / "ws"), "small-sparse")
    run = _runner(tmp_path / "ws", monkeypatch)
    at = ok(run("views/attention.py", model="models/small-sparse"))
    heads = at.dataframe[0].value
    assert len(heads) == 48 and list(heads["open keys / query"]) == [
        k for layer in report["mean_open_keys_per_query_per_head"] for k in layer
    ]
    assert f"{report['mean_open_keys_per_query']:.2f}" in [m.value for m in at.metric]
    titles = [json.dumps(c["layout"].get("title")) for c in charts(at)]
    assert any("base a0.h0" in t for t in titles) and any("sparse a0.h0" in t for t in titles)
    at = ok(run("views/compare.py", model="models/small-sparse"))
    assert report["model_id"] in text(at)
    shipped = browse.compare_results(folder)
    tables = [d.value for d in at.dataframe if "undecided" in d.value.columns]
    assert len(shipped) == 5 and len(tables) == len(shipped)
    for (_, res), table in zip(shipped, tables):
        row = table[(table["NDF"] == "0.8") & (table["measure"] == "component edges")].iloc[0]
        p = claims.paired(res, "component_edges", "0.8")
        assert (row["queries"], row["base"], row["sparse"]) == (p["n"], p["base"], p["sparse"]) and p["n"] >= 15
    flows = [
        d.value
        for d in at.dataframe
        if "entries per feature edge covering the share" in list(d.value.get("measure", []))
    ]
    heads = browse.head_flow_results(folder)
    shown = {task for task, _ in shipped}
    assert len(flows) == sum(task in shown for _, task, _ in heads) >= 8  # a set's and a CLT's per family shown
    [(_, ioi_set)] = [(k, r) for k, t, r in heads if (k, t) == ("set", "ioi")]
    first = flows[[t for t, _ in shipped].index("ioi") * 2 + [k for k, t, _ in heads if t == "ioi"].index("set")]
    row = first[first["measure"] == "heads carrying the share"].iloc[0]
    gap = ioi_set["base_minus_sparse"]["heads_needed"]
    assert (row["base"], row["sparse"]) == (
        ioi_set["summary"]["base"]["heads_needed"]["mean"],
        ioi_set["summary"]["sparse"]["heads_needed"]["mean"],
    )
    assert row["base − sparse [95%]"] == claims.format_gap(gap) and gap["lo"] > 0  # fewer heads, interval above 0
    assert "through cross-layer transcoders: the heads carrying 80% of the attention-mediated attribution" in text(at)


def test_attention_page_examples_and_a_typed_prompt(circuit_app, circuit_workspace):
    at = ok(circuit_app("views/attention.py"))
    titles = [json.dumps(c["layout"].get("title")) for c in charts(at)]
    assert any("open attention edges per head" in t for t in titles)
    assert any("base a0.h0" in t for t in titles) and any("sparse a0.h0" in t for t in titles)
    at = ok(circuit_app("views/attention.py", source="prompt", prompt="Mary and John went to the market"))
    assert sum("a0.h0" in json.dumps(c["layout"].get("title")) for c in charts(at)) == 2


def test_run_page_finds_and_records_a_circuit(circuit_app, circuit_workspace, tiny):
    from workbench.corpus import tasks
    from workbench.workspace import Workspace

    q = tasks.queries("ioi", 1, seed=0, tokenizer=tiny[1])[0]  # the embedded model solves generated IOI queries
    at = ok(circuit_app("views/run.py"))
    at.text_input[0].input(q.prompt)
    at.text_input[1].input(q.answer)
    at.text_input[2].input(q.counterfactual)
    assert at.selectbox[0].value == "tiny"
    at.text_input[3].input("from-the-ui")
    at.number_input[1].set_value(1)
    at.number_input[2].set_value(0)
    at.button[0].click()
    at = ok(at.run())
    art = next(a for a in Workspace(circuit_workspace).artifacts("circuits") if a.name == "from-the-ui")
    assert art.manifest["inputs"]["model_spec"] == "tiny" and art.manifest["inputs"]["answer"] == q.answer
    assert any(plain(p.proto.label) == "open from-the-ui" for p in at.get("page_link"))
    at = circuit_app("views/run.py")
    at.text_input[0].input("Mary and John")
    at.text_input[1].input("Zyzzyva")
    at.button[0].click()
    at = at.run()
    assert not at.exception and "Zyzzyva" in plain(at.error[0].value)  # a word outside the vocabulary: one line


def test_run_page_offers_every_kind_of_dictionary_that_replaces_the_mlps(circuit_app):
    """One choice per kind of the dictionary table that a feature circuit reads; a kind the workspace lacks says
    how to train one."""
    from workbench.dictionaries.kinds import CLT, GRAPH_KINDS

    at = ok(circuit_app("views/run.py"))
    level = at.radio(key="w_run_level")
    assert level.options[1:] == [f"features (a {kind.label})" for kind in GRAPH_KINDS] and len(GRAPH_KINDS) == 2
    at = level.set_value(f"features (a {CLT.label})").run()
    assert not at.exception and plain(at.error[0].value) == (
        "no cross-layer transcoders in this workspace: train one with `workbench sae train --cache DIR --clt --layers all`"
    )


def test_circuit_pages_open_on_ioi_and_a_node_worth_seeing(circuit_app):
    at = ok(circuit_app("views/circuit.py"))
    assert at.selectbox(key="w_circuit_circuit").value == "circuits/ioi-0"  # not the first by name (induction-0)
    assert at.selectbox(key="w_node").value not in ("input", "logits")
    assert "direct logit effect" in text(at)  # the model ran when the circuit opened, before any click
    at = ok(circuit_app("views/compare.py"))
    assert at.selectbox(key="w_circuit_compare").value == "circuits/ioi-0"


@pytest.mark.parametrize("cap, used", [("999999", 2000), ("-5", 1)])
def test_an_out_of_range_cap_is_clamped_with_a_notice(circuit_app, cap, used):
    at = ok(circuit_app("views/circuit.py", circuit="circuits/ioi-0", cap=cap))
    assert at.number_input(key="w_cap").value == used
    assert any(f"cap={cap} is outside 1..2000: using {used}" in plain(w.value) for w in at.warning)


def test_circuit_uploaded_without_an_upload_is_refused(circuit_app):
    at = circuit_app("views/circuit.py", circuit="uploaded")
    assert not at.exception and "none has been made" in plain(at.error[0].value)


def _upload(circuit_workspace, name: str, d) -> None:
    from app import live

    raw = d.encode() if isinstance(d, str) else json.dumps(d).encode()
    return live.check_upload(name, raw, "tiny")


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d["edges"][0].update(score=float("nan")), "edges[0] (input->a0.h0<q>).score is nan"),
        (lambda d: d["edges"][1].update(score=float("inf")), "edges[1] (input->a0.h1<q>).score is inf"),
        (
            lambda d: d["query"].update(tokens=[1, 10**9]),
            "query.tokens[1]=1000000000 is outside the model's vocabulary",
        ),
        (lambda d: d["query"].update(tokens=[-5]), "query.tokens[0]=-5 is outside"),
    ],
)
def test_uploads_are_validated_once_naming_the_field(circuit_workspace, monkeypatch, change, message):
    from workbench.errors import UserError

    monkeypatch.setenv("WORKBENCH_WORKSPACE", str(circuit_workspace))
    d = json.loads((circuit_workspace / "circuits" / "ioi-0" / "circuit.json").read_text())
    entry = _upload(circuit_workspace, "ok.json", d)
    assert (
        entry["format"] == "workbench"
        and entry["data"].n_circuit_edges == saved(circuit_workspace, "ioi-0").n_circuit_edges
    )
    change(d)
    with pytest.raises(UserError, match=re.escape(message)):
        _upload(circuit_workspace, "bad.json", d)
    changed = _upload(
        circuit_workspace,
        "ok.json",
        json.loads((circuit_workspace / "circuits" / "ioi-0" / "circuit.json").read_text()) | {"seed": 99},
    )
    assert changed["stamp"] != entry["stamp"]  # same name, other content: a new upload


def test_hostile_upload_shapes_are_one_line_errors(circuit_workspace, monkeypatch):
    from workbench.errors import UserError

    monkeypatch.setenv("WORKBENCH_WORKSPACE", str(circuit_workspace))
    mib = json.loads((circuit_workspace / "circuits" / "ioi-0" / "mib.json").read_text())
    for raw, message in (
        ("[" * 200_000 + "]" * 200_000, "nests JSON arrays or objects too deeply"),
        (json.dumps({**mib, "edges": list(mib["edges"])}), "edges is a list, expected an object"),
        ('{"schema": "someone.else"}', "not a circuit file"),
    ):
        with pytest.raises(UserError, match=message):
            _upload(circuit_workspace, "x.json", raw)


def test_two_searches_at_once_on_one_shared_model(circuit_workspace, monkeypatch, tiny):
    """Two sessions searching on the same cached model at once (two tabs on one server) both finish."""
    import threading

    from app import live
    from workbench.corpus import tasks

    monkeypatch.setenv("WORKBENCH_WORKSPACE", str(circuit_workspace))
    q = tasks.queries("ioi", 1, seed=0, tokenizer=tiny[1])[0]
    out, errors = {}, []

    def search(name):
        try:
            out[name] = live.find_circuit(
                "tiny", q.prompt, q.answer, q.counterfactual, name=name, budget=0.05, steps=1, n_samples=0
            )
        except Exception as e:  # noqa: BLE001 - the test reports whatever a thread raised
            errors.append(e)

    threads = [threading.Thread(target=search, args=(f"both-{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and set(out) == {"both-0", "both-1"}
    assert out["both-0"][0].n_edges == out["both-1"][0].n_edges  # the same search on the same model
    assert not [n for _, _, notes in out.values() for n in notes if "requires_grad" in n]


def test_pins_groups_notes_from_the_url_reach_the_view_and_the_download(circuit_app):
    at = ok(
        circuit_app(
            "views/circuit.py",
            circuit="circuits/ioi-0",
            pinned="a0.h0,m1",
            groups='[["g","a0.h0","m1"]]',
            links="40",
            node_threshold="0.7",
        )
    )
    assert not view_data(at)["readonly"]
    assert view_data(at)["annotations"] == {"pinned": ["a0.h0", "m1"], "groups": [["g", "a0.h0", "m1"]], "notes": {}}
    labels = [b.proto.label for b in at.get("download_button")]
    assert any(lab.startswith("download Neuronpedia") and lab.endswith(state.MARKED) for lab in labels), labels
    assert len(labels) == 3 and all(lab.endswith(state.MARKED) for lab in labels), labels  # workbench, MIB too
    from app import graph_view
    from workbench.circuits import annotations as an

    marks = an.Annotations(["a0.h0", "m1"], [["g", "a0.h0", "m1"]])  # what the downloads read when clicked
    assert at.session_state[graph_view.MARKS]["marks"] == marks
    assert at.session_state[graph_view.MARKS]["view"] == an.View(40, 0.7)  # and the view's settings


DEEP = "[" * 3000 + "]" * 3000  # nested past the JSON parser's depth: a RecursionError without the limit


@pytest.mark.parametrize(
    "param, value, message",
    [
        ("groups", "[oops", "query parameter groups='[oops' is not valid JSON"),
        ("groups", DEEP, "nests JSON arrays or objects too deeply to be read"),
        ("notes", '{"m1": 3}', "notes must map node names to text"),
        ("target", "nan", "'nan' is not a finite number"),
        ("cap", "many", "'many' is not an integer"),
    ],
)
def test_a_bad_url_parameter_is_a_notice_and_the_circuit_still_draws(circuit_app, param, value, message):
    """Every parsed URL parameter goes through state.url_param: a warning naming it, the page drawn without it."""
    view = {"view": "target"} if param == "target" else {}  # the NDF target is read in its own view
    at = ok(circuit_app("views/circuit.py", circuit="circuits/ioi-0", pinned="m1", **view, **{param: value}))
    [warning] = [plain(w.value) for w in at.warning if f"{param}=" in plain(w.value)]
    assert f"ignored the link's {param}=" in warning and message in warning, warning
    assert view_data(at)["annotations"]["pinned"] == ["m1"]  # the good parameters still apply


def test_the_finders_warnings_are_shown_with_the_circuit(circuit_workspace):
    """A circuit file's faithfulness warnings (budget too small, attribution estimates that vanish) reach the
    page's header; files without them show none."""
    import dataclasses

    cd = saved(circuit_workspace, "ioi-0")
    assert cd.warnings == []
    note = "the stored scores are attribution estimates; each kept edge's measured effect is in 'effect'"
    warned = dataclasses.replace(cd, faithfulness={**cd.faithfulness, "warnings": [note]})
    assert warned.warnings == [note]


def test_compare_page_shows_the_control_beside_base_and_sparse(feature_workspace, tmp_path, monkeypatch):
    """A run with a fine-tuned control (`attention train --control finetune`): `attention compare` measures the
    control saved beside the sparse model too, and the Compare page shows its column and base − sparse split into
    training (base − control) and the gates (control − sparse), as claims.paired reads the stored result."""
    import shutil

    from tests.app.conftest import _runner
    from workbench.attention.config import SparsifyConfig
    from workbench.models import load
    from workbench.provenance import model_id
    from workbench.steps.attention import compare_attention, train_attention
    from workbench.workspace import Workspace

    root = tmp_path / "ws"
    shutil.copytree(feature_workspace, root, symlinks=True)
    ws = Workspace(root)
    base_dir = str(root / "models" / "random")
    cfg = SparsifyConfig(steps=2, eval_every=2, eval_sequences=4, batch_size=2, ctx_len=32, control="finetune")
    _, sparse_dir = train_attention(ws, base_dir, cfg, name="random-fair", report_queries=2)
    base, sparse = load(base_dir, device="cpu")[0], load(str(sparse_dir), device="cpu")[0]
    res = compare_attention(ws, base, sparse, sparse_dir, "ioi", 2, n_samples=1, progress=False)
    control = load(str(sparse_dir / "control"), device="cpu")[0]
    assert res["control_model"] == model_id(control) and all("control" in q for q in res["queries"])
    at = ok(_runner(root, monkeypatch)("views/compare.py", model="models/random-fair"))
    assert res["control_model"] in text(at) and "queries with a gap on all three models" in text(at)
    [table] = [d.value for d in at.dataframe if "undecided" in d.value.columns]
    assert list(table.columns[3:6]) == ["base", "control", "sparse"]
    split = ["from training: base − control [95%]", "from the gates: control − sparse [95%]"]
    assert set(split) <= set(table.columns)
    row = table[(table["NDF"] == "0.9") & (table["measure"] == "component edges")].iloc[0]
    p, training = claims.paired(res, "component_edges", "0.9"), claims.paired(res, "heads", "0.9", "base", "control")
    gates = claims.paired(res, "component_edges", "0.9", "control", "sparse")
    assert (row["queries"], row["base"], row["sparse"], row["control"]) == (
        p["n"],
        p["base"],
        p["sparse"],
        gates["control"],
    )
    assert row[split[1]] == gates["difference"].format("{:.1f}") and training["n"] == p["n"]
    [only] = [d.value for d in at.dataframe if "heads only in" in d.value.columns]  # each pair of the split
    pairs = set(zip(only["heads only in"], only["not in"]))
    assert pairs == {
        (a, b) for x, y in (("base", "sparse"), ("base", "control"), ("control", "sparse")) for a, b in ((x, y), (y, x))
    }
    assert only.to_dict("records") == fa.heads_only_in_one(res)


def test_compare_page_shows_the_control_shipped_with_tiny_sparse(circuit_app, circuit_workspace):
    """The embedded tiny-sparse ships the control fine-tuned after its run (finetune_control.py --write) and the
    three-way claims measured with it: the workspace's copy carries both, and its Compare page shows, per family,
    the control's column and base − sparse split into training and the gates, as claims.paired reads them."""
    folder = circuit_workspace / "models" / "tiny-sparse"
    control = json.loads((folder / "attention_report.json").read_text())["fine_tuned_control"]["model"]
    shipped = browse.compare_results(folder)
    assert len(shipped) == 5 and all(res["control_model"] == control for _, res in shipped)
    at = ok(circuit_app("views/compare.py", model="models/tiny-sparse"))
    assert control in text(at) and "queries with a gap on all three models" in text(at)
    tables = [d.value for d in at.dataframe if "undecided" in d.value.columns]
    assert len(tables) == len(shipped)
    for (_, res), table in zip(shipped, tables):
        assert list(table.columns[3:6]) == ["base", "control", "sparse"]
        row = table[(table["NDF"] == "0.8") & (table["measure"] == "heads")].iloc[0]
        gates = claims.paired(res, "heads", "0.8", "control", "sparse")
        assert (row["queries"], row["control"], row["sparse"]) == (gates["n"], gates["control"], gates["sparse"])
        assert row["from the gates: control − sparse [95%]"] == gates["difference"].format("{:.1f}")


def _logit_table() -> None:
    from app import state

    state.table([{"promotes": "\r\r             ", "logit": 0.797}, {"promotes": "a\r\nb", "logit": 0.5}])


def test_a_token_with_line_breaks_stays_in_its_table_row():
    """SmolLM2's "\\r\\r" + spaces token among a node's top logits ended the Markdown table's row and opened an
    indented code block, whose highlighter (1.5 MB of JS) every load of the circuit page then ran."""
    from streamlit.testing.v1 import AppTest

    for s in ("\r\r   x", "a\r\nb", "a\nb"):
        assert "\r" not in state.text(s) + state.code(s) and "\n" not in state.text(s) + state.code(s)
    at = ok(AppTest.from_function(_logit_table).run())
    assert not at.code and len(at.markdown) == 1
    assert at.markdown[0].value.count("\n") == 3  # header, rule, two rows
