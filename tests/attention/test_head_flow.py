"""The heads carrying the attention-mediated attribution (head_flow.py): the measure on a constructed graph with a
known answer, the paired base - sparse interval on known differences, and `workbench attention compare
--transcoders` end to end on the embedded base and sparse-attention models with a set trained on each (both
query splits) and with a cross-layer transcoder trained on each, with its one-line refusals."""

from __future__ import annotations

import json
import re
import shutil
from types import SimpleNamespace

import pytest
import torch

from workbench.attention.claims import format_gap
from workbench.attention.head_flow import compare_heads, fewest_covering, head_mass, paired_gap
from workbench.circuits.feature.graph_config import HeadFlowConfig
from workbench.circuits.feature.transcoders import open_set
from workbench.cli import main
from workbench.corpus import tasks
from workbench.errors import BadValueError
from workbench.readback import write_sealed_json


def constructed_graph():
    """Features f0 (layer 0) and f1 (layer 1); rows f0, f1, answer, wrong; columns f0, f1, token. Kept edges and
    their splits over heads h0..h3 and the direct part:
      token -> f0 = 2 (all h0); f0 -> f1 = 1 (h1 0.2, direct 0.8); f1 -> answer = 3 (all h2);
      token -> answer = 1 (direct); f0 -> wrong = 5 (all h3: it reaches no answer)."""
    adj = torch.zeros(4, 3)
    parts = {(0, 2): [2, 0, 0, 0, 0], (1, 0): [0, 0.2, 0, 0, 0.8], (2, 1): [0, 0, 3, 0, 0], (2, 2): [0, 0, 0, 0, 1]}
    parts[(3, 0)] = [0, 0, 0, 5, 0]
    for (r, c), p in parts.items():
        adj[r, c] = sum(p)
    heads = {"edges": torch.tensor(list(parts)), "weights": torch.tensor(list(parts.values()))}
    return SimpleNamespace(adjacency=adj, pruned=SimpleNamespace(edge_mask=adj != 0), heads=heads, n_features=2)


def test_head_mass_on_a_constructed_graph():
    """By hand: influence on the answer I(f1) = 3/4 (its share of the answer row), I(f0) = I(f1) * 1; an edge's
    weight is I(target) / (sum of |edges into the target|): token -> f0 0.75 / 2, f0 -> f1 0.75 / 1,
    f1 -> answer 1 / 4, token -> answer 1 / 4. Head masses: h0 0.375 * 2, h1 0.75 * 0.2, h2 0.25 * 3, h3 0 (the
    wrong answer's edge does not count); direct 0.75 * 0.8 + 0.25 * 1."""
    mass, direct = head_mass(constructed_graph())
    torch.testing.assert_close(mass, torch.tensor([0.75, 0.15, 0.75, 0.0]))
    assert direct == pytest.approx(0.85)
    assert fewest_covering(mass, 0.8) == 2  # 0.8 * 1.65 = 1.32: 0.75 + 0.75
    assert fewest_covering(mass, 0.95) == 3
    assert fewest_covering(mass, 1.0) == 3
    assert fewest_covering(torch.zeros(3), 0.8) is None


def _row(heads, covering):
    return {"heads_needed": heads, "entries": {"covering": covering}}


def test_paired_gap_on_known_differences():
    """Differences base - sparse 1, 2, 3 (sd 1): mean 2, half-width t_0.975(2) / sqrt(3) = 4.30265 / 1.73205; the
    query where one model has no value (None) is left out of the pairs, not of the other model's mean."""
    rows = [{"base": _row(b, c), "sparse": _row(s, 1.0)} for b, s, c in ((6, 5, 2.5), (7, 5, None), (9, 6, 1.0))]
    rows.append({"base": _row(None, 3.0), "sparse": _row(4, 1.0)})
    gap = paired_gap(rows, "heads_needed")
    assert gap["n"] == 3 and gap["mean"] == pytest.approx(2.0)
    assert (gap["lo"], gap["hi"]) == pytest.approx((2.0 - 2.484138, 2.0 + 2.484138), abs=1e-5)
    assert format_gap(gap) == "2.00 [-0.48, 4.48] (n=3)"
    entries = paired_gap(rows, "entries_covering")  # pairs 0, 2, 3: differences 1.5, 0, 2
    assert entries["n"] == 3 and entries["mean"] == pytest.approx(3.5 / 3)
    one = paired_gap(rows[:1], "heads_needed")
    assert one == {"mean": 1.0, "lo": None, "hi": None, "n": 1, "confidence": 0.95}
    assert format_gap(one) == "1.00 (n=1)"
    assert paired_gap(rows[3:], "heads_needed")["mean"] is None and format_gap(paired_gap(rows[3:], "heads_needed"))


def test_head_flow_config_refuses_a_bad_split_naming_the_choices():
    with pytest.raises(BadValueError, match=r"split='test' is not valid; choose one of \['train', 'heldout'\]"):
        HeadFlowConfig(split="test")
    assert HeadFlowConfig().split == "heldout"


def test_set_cache_is_the_cache_the_set_was_trained_on(tiny_set):
    assert open_set(tiny_set).cache == str((tiny_set.parent / "cache").resolve())  # conftest: root/cache -> root/set


def _err(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_attention_compare_with_transcoders_end_to_end(tiny, tiny_sparse, tiny_set, sparse_set, tmp_path, capsys):
    out = tmp_path / "heads.json"
    argv = ["attention", "compare", "--sparse", "tiny-sparse", "--task", "ioi", "--transcoders", str(tiny_set)]
    argv.append(str(sparse_set))
    assert main([*argv, "--n", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "heads carrying 80% of the attention-mediated part" in printed and "of the heldout split" in printed
    assert re.search(r"base - sparse, heads covering 80% \[paired t 95%\]: -?\d+\.\d\d \[-?\d", printed)
    res = json.loads(out.read_text())
    assert res["sparse_model"] != res["base_model"] and len(res["queries"]) == 2
    assert res["split"] == res["config"]["split"] == "heldout"
    assert [q["prompt"] for q in res["queries"]] == [q.prompt for q in tasks.queries("ioi", 2, split="heldout")]
    # held-out combinations never occur in the train split the sets were trained on
    assert res["in_training_cache"] == {"base": 0, "sparse": 0}
    assert all(q["in_training_cache"] == {"base": False, "sparse": False} for q in res["queries"])
    gap = res["base_minus_sparse"]["heads_needed"]
    assert gap["n"] == 2 and gap["lo"] <= gap["mean"] <= gap["hi"]
    for q in res["queries"]:
        for side in ("base", "sparse"):
            r = q[side]
            assert 1 <= r["heads_needed"] <= r["heads"] == 16
            assert sum(r["head_share"].values()) == pytest.approx(1.0)
            assert r["entries"]["edges"] > 0 and 1 <= r["entries"]["covering"] <= r["entries"]["nonzero"]
    # the sparse model's closed entries carry exactly nothing: fewer nonzero entries per edge than the dense base
    s = res["summary"]
    assert s["sparse"]["entries_nonzero"]["mean"] < s["base"]["entries_nonzero"]["mean"]
    train = tmp_path / "train.json"
    assert main([*argv, "--n", "1", "--out", str(train), "--split", "train"]) == 0
    res = json.loads(train.read_text())
    assert res["split"] == res["config"]["split"] == "train"
    assert [q["prompt"] for q in res["queries"]] == [tasks.queries("ioi", 1, split="train")[0].prompt]


def test_attention_compare_refuses_a_set_of_another_model_or_missing_layers(tiny_set, sparse_set, tmp_path, capsys):
    argv = ["attention", "compare", "--sparse", "tiny-sparse", "--task", "ioi", "--n", "1", "--transcoders"]
    assert main([*argv, str(tiny_set), str(tiny_set)]) == 2
    err = _err(capsys)
    assert re.search(rf"transcoder set '{re.escape(str(tiny_set))}' was trained on 'workbench-tiny@\w+'", err)
    assert "belongs to another model" in err
    partial = tmp_path / "partial"
    shutil.copytree(tiny_set, partial)
    manifest = json.loads((partial / "transcoders.json").read_text())
    manifest["layers"] = [e for e in manifest["layers"] if e["layer"] != 2]
    write_sealed_json(partial / "transcoders.json", manifest)  # a set written without layer 2, not a damaged file
    assert main([*argv, str(partial), str(sparse_set)]) == 2
    assert re.search(r"lacks layer\(s\) \[2\]", _err(capsys))
    with pytest.raises(SystemExit) as e:  # refused as the flag is parsed, by its config field's bounds
        main([*argv, str(tiny_set), str(sparse_set), "--share", "1.5"])
    assert e.value.code == 2
    assert re.search(r"share=1.5 must be a finite number in \(0, 1\]", capsys.readouterr().err)
    with pytest.raises(SystemExit) as e:  # refused as the flag is parsed, before any model loads
        main([*argv, str(tiny_set), str(sparse_set), "--split", "test"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--split: invalid choice: 'test' (choose from 'train', 'heldout')" in err


def test_attention_compare_through_clts(tiny_clt, tiny_sparse_clt, tmp_path, capsys):
    """`attention compare --transcoders BASE_CLT SPARSE_CLT`: each model read through its own CLT (a CLT feature's
    edges split over heads from its writes at every layer below the target); a CLT of the other model refused."""
    out = tmp_path / "heads.json"
    argv = ["attention", "compare", "--sparse", "tiny-sparse", "--task", "ioi", "--n", "1", "--transcoders"]
    assert main([*argv, str(tiny_clt), str(tiny_sparse_clt), "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["transcoders"] == {"base": str(tiny_clt), "sparse": str(tiny_sparse_clt)}
    assert res["in_training_cache"] == {"base": 0, "sparse": 0}  # the CLTs' own caches were checked
    for side in ("base", "sparse"):
        r = res["queries"][0][side]
        assert 1 <= r["heads_needed"] <= r["heads"] == 16
        assert sum(r["head_share"].values()) == pytest.approx(1.0)
        assert r["entries"]["edges"] > 0 and 1 <= r["entries"]["covering"] <= r["entries"]["nonzero"]
    capsys.readouterr()
    assert main([*argv, str(tiny_sparse_clt), str(tiny_sparse_clt)]) == 2
    assert re.search(
        rf"CLT '{re.escape(str(tiny_sparse_clt))}' was trained on 'workbench-tiny@\w+', not on", _err(capsys)
    )


def test_compare_heads_with_a_control_splits_base_minus_sparse(tiny, tiny_sparse, tiny_set, sparse_set):
    """A control measured beside both through its own set: with the base itself as the control (same weights, same
    set), base - control is exactly 0 and control - sparse equals base - sparse, query for query."""
    (base, _), (sparse, _) = tiny, tiny_sparse
    res = compare_heads(base, sparse, tiny_set, sparse_set, "ioi", 1, control=base, control_set=tiny_set)
    assert res["control_model"] == res["base_model"] and set(res["transcoders"]) == {"base", "control", "sparse"}
    assert all(g["mean"] == 0 for g in res["base_minus_control"].values() if g["n"])
    assert res["control_minus_sparse"] == res["base_minus_sparse"]
    assert [q["control"] for q in res["queries"]] == [q["base"] for q in res["queries"]]
    with pytest.raises(BadValueError, match="pass both control and control_set"):
        compare_heads(base, sparse, tiny_set, sparse_set, "ioi", 1, control=base)


def test_attention_compare_with_a_control_prints_the_split(tiny_set, sparse_set, tmp_path, capsys):
    """`--control DIR --transcoders BASE CONTROL SPARSE`: the control read through its own set beside both; with
    the base as its own control, from training is exactly 0 and from the gates is base - sparse."""
    out = tmp_path / "heads.json"
    argv = ["attention", "compare", "--sparse", "tiny-sparse", "--control", "tiny", "--task", "ioi", "--n", "2"]
    assert main([*argv, "--transcoders", str(tiny_set), str(tiny_set), str(sparse_set), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    res = json.loads(out.read_text())
    assert res["transcoders"] == {"base": str(tiny_set), "control": str(tiny_set), "sparse": str(sparse_set)}
    assert re.search(
        r"from training: base - control, heads covering 80% \[paired t 95%\]: 0\.00 \[0\.00, 0\.00\]", printed
    )
    gates = format_gap(res["control_minus_sparse"]["heads_needed"])
    assert gates == format_gap(res["base_minus_sparse"]["heads_needed"])
    assert f"from the gates: control - sparse, heads covering 80% [paired t 95%]: {gates}" in printed
    assert re.search(r"measure \(mean / median over queries\)\s+base\s+control\s+sparse", printed)
