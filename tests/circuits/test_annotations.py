"""Pins, groups and notes: the URL form and a Neuronpedia graph JSON both read back what was written."""

import json
from pathlib import Path

import pytest

from workbench.circuits import annotations as an
from workbench.circuits import neuronpedia, schema
from workbench.errors import BadValueError, DamagedFileError

NP = Path(__file__).parent / "old_files" / "neuronpedia.json"  # a component graph of a 2-head model
MARKS = an.Annotations(
    ["a0.h0", "input"], [["movers", "a1.h0", "a1.h1"]], {"a1.h1": "copies | the name, 'quoted'", "logits": "answer"}
)


def test_url_round_trip_and_bad_values():
    q = an.to_query(MARKS)
    assert q["pinned"] == "a0.h0,input"
    assert an.from_query(q) == MARKS
    assert an.from_query({}) == an.Annotations()
    assert an.to_query(an.Annotations()) == {"pinned": "", "groups": "", "notes": ""}
    with pytest.raises(BadValueError, match="groups="):
        an.from_query({"groups": "[not json"})
    with pytest.raises(BadValueError, match=r"\[name, node"):
        an.from_query({"groups": '[["lonely"]]'})
    with pytest.raises(BadValueError, match="notes must map"):
        an.from_query({"notes": '{"a0.h0": 3}'})


def test_restrict_names_what_it_drops():
    kept, dropped = MARKS.restrict({"a0.h0", "a1.h0", "logits"})
    assert kept.pinned == ["a0.h0"] and kept.groups == [["movers", "a1.h0"]] and kept.notes == {"logits": "answer"}
    assert dropped == ["a1.h1", "input"]


def test_neuronpedia_round_trip():
    """Written into qParams and clerps, still a valid graph the upload reader accepts, and read back equal."""
    d = json.loads(NP.read_text())
    out = an.apply_neuronpedia(d, MARKS, n_heads=2)
    neuronpedia.validate(out)
    assert out["qParams"]["pinnedIds"] == ["0_0_0", "E_1_0", "E_5_1", "E_7_2", "E_5_3"]  # input: every embedding
    assert out["qParams"]["supernodes"] == [["movers", "1_0_3", "1_1_0"]]
    clerps = {n["node_id"]: n["clerp"] for n in out["nodes"]}
    assert clerps["1_1_0"] == "a1.h1 (attention head, whole output)" + an.NOTE_MARK + "copies | the name, 'quoted'"
    assert clerps["3_7_3"].startswith('Output "c" (p=0.500)')
    back = an.read_neuronpedia(json.loads(json.dumps(out)), n_heads=2)
    assert back == MARKS
    rec = schema.read(out, shape=schema.GraphShape(2, 2, 2, 8))  # the upload path still reads the graph
    assert rec.n_circuit_edges == len(schema.read(d, shape=schema.GraphShape(2, 2, 2, 8)).edges)
    again = an.apply_neuronpedia(out, an.Annotations(), n_heads=2)  # clearing marks clears the clerps too
    assert an.read_neuronpedia(again, n_heads=2) == an.Annotations()


def test_neuronpedia_edited_label_and_foreign_ids():
    d = json.loads(NP.read_text())
    d["nodes"][1]["clerp"] = "previous-token head"  # relabelled in Neuronpedia: read back as the note
    assert an.read_neuronpedia(d, n_heads=2).notes == {"a0.h0": "previous-token head"}
    d["qParams"]["pinnedIds"] = ["9_9_9"]
    with pytest.raises(DamagedFileError, match="9_9_9"):
        an.read_neuronpedia(d, n_heads=2)


@pytest.mark.parametrize("name", ["circuit.json", "mib.json", "neuronpedia.json"])
def test_every_format_carries_the_marks_and_still_reads(name):
    """A download of any format carries the marks (workbench and MIB under FILE_KEY, Neuronpedia in qParams and
    clerps); the marked file still reads as the same circuit, gives the marks back, and unmarked loses them."""
    d = json.loads((NP.parent / name).read_text())
    shape = schema.GraphShape(2, 2, 2, 8) if schema.detect(d) == "neuronpedia" else None  # the others name theirs
    out = json.loads(json.dumps(an.apply(d, MARKS, n_heads=2)))
    assert (an.FILE_KEY in out) == (schema.detect(d) != "neuronpedia")
    assert an.read(out, n_heads=2) == MARKS
    before, after = schema.read(d, shape=shape), schema.read(out, shape=shape)
    assert after.edges == before.edges and (after.in_circuit == before.in_circuit).all()
    assert an.read(d, n_heads=2) == an.Annotations()
    assert an.read(an.apply(out, an.Annotations(), n_heads=2), n_heads=2) == an.Annotations()
    assert an.read_selected(out, n_heads=2) is None
    chosen = json.loads(json.dumps(an.apply(d, MARKS, n_heads=2, selected="a1.h1")))  # and the selected node
    assert an.read_selected(chosen, n_heads=2) == "a1.h1" and an.read(chosen, n_heads=2) == MARKS
    assert an.read_view(chosen) == an.View()  # and how the view was left: defaults write nothing, read as defaults
    view = an.View(40, 0.7, 0.95, ["pair"])
    left = json.loads(json.dumps(an.apply(d, an.Annotations(), n_heads=2, view=view)))
    assert an.read_view(left) == view and an.read(left, n_heads=2) == an.Annotations()
    assert schema.read(left, shape=shape).edges == before.edges
    bad = {**left, an.FILE_KEY: {"view": {"node_threshold": 2}}} if an.FILE_KEY in left else None
    if bad is not None:
        with pytest.raises(DamagedFileError, match=r"annotations.view: node_threshold must be a number in \(0, 1\]"):
            an.read_view(bad)


def test_a_bad_annotations_key_is_a_damaged_file():
    d = json.loads((NP.parent / "circuit.json").read_text())
    with pytest.raises(DamagedFileError, match=r"annotations: .*\[name, node"):
        an.read({**d, an.FILE_KEY: {"groups": [["lonely"]]}}, n_heads=2)


def test_feature_graph_round_trip_with_the_selected_node():
    """A feature graph names its nodes by id: pins, groups, notes and the selected node (qParams.clickedId) are
    written, still read as a circuit-tracer graph, and read back equal; the clerps lose the notes on reading."""
    from bench.app.app_bench import feature_graph

    d = feature_graph(40, n_layers=2, n_pos=4)
    ids = [n["node_id"] for n in d["nodes"]]
    marks = an.Annotations([ids[3], ids[0]], [["pair", ids[3], ids[5]]], {ids[5]: "fires on | names"})
    out = an.apply_feature_graph(d, marks, ids[5])
    fg = neuronpedia.read_feature_graph(out)
    assert fg.pinned == [ids[3], ids[0]] and out["qParams"]["supernodes"] == [["pair", ids[3], ids[5]]]
    assert an.read_feature_graph(out) == (marks, ids[5])
    assert an.without_notes(out)["nodes"] == d["nodes"]
    assert an.read_feature_graph(d) == (an.Annotations(), None)  # a graph without marks reads as none
    with pytest.raises(DamagedFileError, match="pinnedIds names 'nope'"):
        an.read_feature_graph({**out, "qParams": {**out["qParams"], "pinnedIds": ["nope"]}})


def test_view_settings_in_the_url_and_a_feature_graph():
    """How the view was left (link cap, node and edge influence thresholds, collapsed groups) reads back from the
    URL and from a feature graph: the node threshold as circuit-tracer's own qParams.pruningThreshold (which its
    frontend keeps as text), the rest under the workbench's field; defaults write nothing."""
    from bench.app.app_bench import feature_graph

    view = an.View(300, 0.8, 0.9, ["pair", "a, b"])
    q = an.view_to_query(view)
    assert q["links"] == "300" and q["node_threshold"] == "0.8" and json.loads(q["collapsed"]) == ["pair", "a, b"]
    assert an.view_from_query(q) == view and an.view_from_query({}) == an.View()
    assert set(an.view_to_query(an.View()).values()) == {""}  # a plain link stays plain
    for params, match in [
        ({"node_threshold": "1.5"}, r"node_threshold must be a number in \(0, 1\], got 1.5"),
        ({"links": "many"}, "links='many' is malformed"),
        ({"collapsed": '["ok", 3]'}, "collapsed must be a list of group names"),
    ]:
        with pytest.raises(BadValueError, match=match):
            an.view_from_query(params)
    d = feature_graph(40, n_layers=2, n_pos=4)
    ids = [n["node_id"] for n in d["nodes"]]
    marks = an.Annotations([ids[3], ids[5]], [["pair", ids[3], ids[5]]], {})
    out = an.apply_feature_graph(d, marks, None, an.View(300, 0.8, None, ["pair"]))
    assert out["qParams"]["pruningThreshold"] == 0.8
    assert out["qParams"][an.VIEW_KEY] == {"link_cap": 300, "collapsed": ["pair"]}
    neuronpedia.read_feature_graph(out)  # still a circuit-tracer graph
    assert an.read_feature_view(out) == an.View(300, 0.8, None, ["pair"])
    assert an.read_feature_view({**out, "qParams": {**out["qParams"], "pruningThreshold": "0.5"}}).node_threshold == 0.5
    plain = an.apply_feature_graph(out, marks, None, an.View())  # a later download at the defaults drops them
    assert "pruningThreshold" not in plain["qParams"] and an.VIEW_KEY not in plain["qParams"]
    assert an.read_feature_view(d) == an.View()
    with pytest.raises(DamagedFileError, match=r"qParams: edge_threshold must be a number in \(0, 1\]"):
        an.read_feature_view({**out, "qParams": {**out["qParams"], an.VIEW_KEY: {"edge_threshold": 0}}})


def test_marks_that_do_not_fit_a_link_are_refused_saying_how_big_they_are():
    """5,000 notes (149 KB) made a link the app's server answered with a bare HTTP 400: the view keeps a change only
    while the marks fit MAX_LINK, and a longer parameter in a link is refused by name."""
    many = an.Annotations(notes={f"m{i}": f"note number {i} on this node" for i in range(5000)})
    assert an.link_size(many) > an.MAX_LINK
    with pytest.raises(BadValueError, match=r"5000 notes\) would take \d+ KB of the page's link, over the 64 KB"):
        an.check_link(many)
    an.check_link(MARKS)  # the usual few fit
    with pytest.raises(BadValueError, match="notes= is .* KB, over the 64 KB of marks a link holds"):
        an.from_param("notes", an.to_query(many)["notes"])
