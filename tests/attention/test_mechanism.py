"""The induction-mechanism measure: where single open keys point, on a constructed pattern and on the models."""

import pytest
import torch

from workbench.attention.mechanism import (
    MechanismConfig,
    chosen_heads,
    format_mechanism,
    induction_mechanism,
    key_destinations,
)
from workbench.errors import ConfigError


def _constructed():
    """One layer, four heads, BOS + a 3-token span twice (T = 7): rows 4-6, previous q - 1, target q - 2."""
    T, open_ = 7, torch.zeros(1, 4, 7, 7, dtype=torch.bool)
    weights = torch.zeros(1, 4, T, T)
    for q in (4, 5, 6):
        open_[0, 0, q, q - 1] = True  # head 0: only the previous token
        open_[0, 1, q, q - 2] = True  # head 1: only the induction target
        open_[0, 2, q, [q - 1, q - 2]] = True  # head 2: both, more weight on the target
        weights[0, 2, q, q - 1], weights[0, 2, q, q - 2] = 0.3, 0.6
    open_[0, 3, 4, 0] = True  # head 3: row 4 -> BOS only; row 5 empty; row 6 every causal key, most on q - 1
    open_[0, 3, 6, :7] = True
    weights[0, 3, 6] = torch.tensor([0.1, 0.1, 0.1, 0.1, 0.1, 0.4, 0.1])
    weights = torch.where(open_ & (weights == 0), torch.ones_like(weights), weights) * open_
    return open_, weights, {4: 2, 5: 3, 6: 4}


def test_key_destinations_on_a_constructed_pattern():
    c = key_destinations(*_constructed())
    col = lambda k: c[k][0].tolist()  # noqa: E731  per head 0..3
    assert col("rows") == [3, 3, 3, 3]
    assert col("single") == [3, 3, 0, 1] and col("empty") == [0, 0, 0, 1]
    assert col("single_previous") == [3, 0, 0, 0]
    assert col("single_induction") == [0, 3, 0, 0]
    assert col("single_other") == [0, 0, 0, 1]  # head 3's row 4 points at BOS
    assert col("top_induction") == [0, 3, 3, 0]
    assert col("top_previous") == [3, 0, 0, 1] and col("top_other") == [0, 0, 0, 1]
    assert col("written") == [3, 3, 3, 2]  # head 3's empty row writes nothing
    assert col("open_keys") == [3, 3, 6, 8]


def test_chosen_heads_take_either_models_heads_relative_to_its_top_score():
    base = {"previous_token_head": [[0.6, 0.2], [0.1, 0.0]], "induction_head": [[0.0, 0.0], [0.4, 0.1]]}
    sparse = {"previous_token_head": [[0.5, 0.1], [0.0, 0.3]], "induction_head": [[0.0, 0.0], [0.1, 0.4]]}
    heads = chosen_heads({"base": base, "sparse": sparse}, 0.5)
    assert heads == {"previous_token_head": ["a0.h0", "a1.h1"], "induction_head": ["a1.h0", "a1.h1"]}


def test_relative_threshold_must_be_a_share():
    with pytest.raises(ConfigError, match="relative_threshold=1.5"):
        MechanismConfig(relative_threshold=1.5)


def test_base_and_sparse_embedded_models(tiny):
    from workbench.models import load

    sparse, _ = load("tiny-sparse", device="cpu")
    r = induction_mechanism(tiny[0], sparse, MechanismConfig(sequences=2))
    assert r["ctx_len"] == 127 and r["heads"]["induction_head"] and r["heads"]["previous_token_head"]
    for h in r["per_head"].values():
        assert h["base"]["rows"] == h["sparse"]["rows"] == 2 * 63
        assert h["base"]["single"] == 0 and h["base"]["open_keys"] > 60  # every causal key of a row is open
        assert h["sparse"]["open_keys"] < h["base"]["open_keys"]
        for side in ("base", "sparse"):
            assert sum(h[side][f"top_{w}"] for w in ("previous", "induction", "other")) == pytest.approx(1)
    assert len(format_mechanism(r)) == 2 + len(r["per_head"])
