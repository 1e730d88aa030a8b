"""On the embedded model itself (skipped where data/models/tiny has not been built)."""

import pytest
import torch

from workbench.circuits import find_circuit
from workbench.circuits.evidence import attention_patterns, head_scores
from workbench.corpus import tasks
from workbench.models import EMBEDDED

pytestmark = pytest.mark.skipif(not (EMBEDDED["tiny"] / "model.safetensors").is_file(),
                                reason="the embedded model is not built")


def test_ioi_query_circuit_beats_top_k(tiny):
    model, tokenizer = tiny
    q = tasks.queries("ioi", 1, seed=0, tokenizer=tokenizer)[0]
    c = find_circuit(model, q, budget=0.05, curve=False)
    assert c.faithfulness["gap"] > 1.0  # the trained model separates the names
    assert c.ndf >= c.faithfulness["baseline_topk_ndf"] and c.ndf > 0.5


def test_induction_heads_exist(tiny):
    model, tokenizer = tiny
    q = tasks.queries("induction", 1, seed=0, tokenizer=tokenizer)[0]
    tokens = model.to_tokens(q.prompt)[0]
    scores = head_scores(attention_patterns(model, tokens), tokens)
    assert max(s["induction"] for s in scores.values()) > 0.5
