"""On the embedded model itself (skipped where data/models/tiny has not been built)."""

import pytest
import torch

from workbench.circuits import find_circuit
from workbench.corpus import tasks
from workbench.models import EMBEDDED
from workbench.models.heads import attention_patterns, pattern_scores

pytestmark = pytest.mark.skipif(
    not (EMBEDDED["tiny"] / "model.safetensors").is_file(), reason="the embedded model is not built"
)


def _solves(model, q) -> bool:
    """The model ranks the answer first, at least one logit above the wrong answer (a query worth explaining)."""
    logits = model(q.prompt)[0, -1]
    answer, wrong = (model.to_single_token(t) for t in (q.answer, q.wrong))
    return int(logits.argmax()) == answer and float(logits[answer] - logits[wrong]) > 1.0


def test_ioi_query_circuit_beats_top_k(tiny):
    model, tokenizer = tiny
    q = next(q for q in tasks.queries("ioi", 20, seed=0, tokenizer=tokenizer) if _solves(model, q))
    c = find_circuit(model, q, budget=0.05, curve=False)
    assert c.faithfulness["gap"] > 1.0  # the trained model separates the names
    assert c.ndf >= c.faithfulness["baseline_topk_ndf"] and c.ndf > 0.5


def test_induction_heads_exist(tiny):
    model, tokenizer = tiny
    q = tasks.queries("induction", 1, seed=0, tokenizer=tokenizer)[0]
    tokens = model.to_tokens(q.prompt)[0]
    scores = pattern_scores(attention_patterns(model, tokens), tokens)
    assert max(s["induction"] for s in scores.values()) > 0.5


def _best_heads(model) -> dict[str, str]:
    """The head TransformerLens's detect_head scores highest for each pattern, as a circuit node name."""
    from workbench.models.card import head_scores

    out = {}
    for pattern, scores in head_scores(model, n_seqs=5).items():
        s = torch.tensor(scores)
        layer, head = divmod(int(s.argmax()), s.shape[1])
        out[pattern] = (f"a{layer}.h{head}", float(s.max()))
    return out


def test_detect_head_finds_general_induction_and_previous_token_heads(tiny):
    """On random tokens repeated twice (context 128), not on the corpus's word pool."""
    model, _ = tiny
    best = _best_heads(model)
    assert best["induction_head"][1] >= 0.3 and best["previous_token_head"][1] >= 0.5, best


def test_induction_query_circuit_holds_the_detected_heads(tiny):
    model, tokenizer = tiny
    best = _best_heads(model)
    q = tasks.queries("induction", 1, seed=0, tokenizer=tokenizer)[0]
    c = find_circuit(model, q, budget=0.05, curve=False)
    nodes = {n for e in c.edges for n in (e.split("->")[0], e.split("->")[1].split("<")[0])}
    assert {best["induction_head"][0], best["previous_token_head"][0]} <= nodes, (best, sorted(nodes))
