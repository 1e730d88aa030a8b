import torch

from workbench.circuits.component.evidence import induction_evidence
from workbench.circuits.component.graph import Graph
from workbench.circuits.component.types import Circuit


def test_induction_evidence_lists_head_to_key_edges(small):
    g = Graph.from_model(small)
    tokens = small.to_tokens("cat dog tree cat dog")[0]
    mask = torch.tensor([e in ("a0.h0->a1.h1<k>", "input->a0.h0<v>", "a1.h1->logits") for e in g.edges])
    c = Circuit(g, mask, torch.ones(g.n_edges), query={"tokens": tokens.tolist()})
    ev = induction_evidence(small, c)
    assert [p["path"] for p in ev["pairs"]] == ["a0.h0 -> a1.h1<k>"]
    pair = ev["pairs"][0]
    assert 0 <= pair["previous_token_score"] <= 1 and len(pair["key_reader_attends_from_last"]) == 3
