"""The heads carrying the attention-mediated attribution (head_flow.py): the measure on a constructed graph with a
known answer, the entry split against the head split, and `workbench attention compare --transcoders` end to end
on the embedded base and sparse-attention models with a set trained on each, with its one-line refusals."""

from __future__ import annotations

import json
import re
import shutil
from types import SimpleNamespace

import pytest
import torch

from workbench.circuits.head_flow import fewest_covering, head_mass
from workbench.cli import main


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


def _err(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_attention_compare_with_transcoders_end_to_end(tiny, tiny_sparse, tiny_set, sparse_set, tmp_path, capsys):
    out = tmp_path / "heads.json"
    argv = ["attention", "compare", "--sparse", "tiny-sparse", "--task", "ioi", "--n", "2", "--out", str(out)]
    assert main([*argv, "--transcoders", str(tiny_set), str(sparse_set)]) == 0
    printed = capsys.readouterr().out
    assert "heads carrying 80% of the attention-mediated part" in printed
    res = json.loads(out.read_text())
    assert res["sparse_model"] != res["base_model"] and len(res["queries"]) == 2
    for q in res["queries"]:
        for side in ("base", "sparse"):
            r = q[side]
            assert 1 <= r["heads_needed"] <= r["heads"] == 16
            assert sum(r["head_share"].values()) == pytest.approx(1.0)
            assert r["entries"]["edges"] > 0 and 1 <= r["entries"]["covering"] <= r["entries"]["nonzero"]
    # the sparse model's closed entries carry exactly nothing: fewer nonzero entries per edge than the dense base
    s = res["summary"]
    assert s["sparse"]["entries_nonzero"]["mean"] < s["base"]["entries_nonzero"]["mean"]


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
    (partial / "transcoders.json").write_text(json.dumps(manifest))
    assert main([*argv, str(partial), str(sparse_set)]) == 2
    assert re.search(r"lacks layer\(s\) \[2\]", _err(capsys))
    assert main([*argv, str(tiny_set), str(sparse_set), "--share", "1.5"]) == 2
    assert re.search(r"share=1.5 is outside \(0, 1\]", _err(capsys))
