import torch

from workbench.circuits.component.evidence import head_scores, induction_evidence, induction_targets
from workbench.circuits.component.graph import Graph
from workbench.circuits.component.types import Circuit


def test_induction_targets():
    assert induction_targets(torch.tensor([0, 5, 6, 7, 5, 6])) == {4: 2, 5: 3}


def test_head_scores_on_constructed_patterns():
    tokens = torch.tensor([0, 5, 6, 7, 5, 6])
    pos = len(tokens)
    pat = torch.zeros(2, 2, pos, pos)
    pat[..., 0] = 1.0  # default: attend to BOS
    prev = torch.zeros(pos, pos)
    prev[0, 0] = 1
    prev[torch.arange(1, pos), torch.arange(0, pos - 1)] = 1
    pat[0, 0] = prev
    pat[1, 1, 4] = 0
    pat[1, 1, 4, 2] = 1
    pat[1, 1, 5] = 0
    pat[1, 1, 5, 3] = 1
    s = head_scores(pat, tokens)
    assert s["a0.h0"]["previous_token"] == 1.0 and s["a1.h1"]["induction"] == 1.0
    assert s["a0.h1"]["previous_token"] < 0.5 and s["a0.h0"]["induction"] == 0.0


def test_induction_evidence_lists_head_to_key_edges(small):
    g = Graph.from_model(small)
    tokens = small.to_tokens("cat dog tree cat dog")[0]
    mask = torch.tensor([e in ("a0.h0->a1.h1<k>", "input->a0.h0<v>", "a1.h1->logits") for e in g.edges])
    c = Circuit(g, mask, torch.ones(g.n_edges), query={"tokens": tokens.tolist()})
    ev = induction_evidence(small, c)
    assert [p["path"] for p in ev["pairs"]] == ["a0.h0 -> a1.h1<k>"]
    pair = ev["pairs"][0]
    assert 0 <= pair["previous_token_score"] <= 1 and len(pair["key_reader_attends_from_last"]) == 3
