"""Head patterns and their previous-token and induction scores, on constructed patterns."""

import torch

from workbench.models.heads import induction_targets, pattern_scores


def test_induction_targets():
    assert induction_targets(torch.tensor([0, 5, 6, 7, 5, 6])) == {4: 2, 5: 3}


def test_pattern_scores_on_constructed_patterns():
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
    s = pattern_scores(pat, tokens)
    assert s["a0.h0"]["previous_token"] == 1.0 and s["a1.h1"]["induction"] == 1.0
    assert s["a0.h1"]["previous_token"] < 0.5 and s["a0.h0"]["induction"] == 0.0
