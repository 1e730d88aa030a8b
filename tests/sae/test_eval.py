import pytest

from workbench.sae import evaluate


def test_zero_tokens_is_refused_before_any_work(tmp_path):
    with pytest.raises(ValueError, match=r"max_tokens=0 must be >= 1 .*--tokens"):
        evaluate(tmp_path / "no-sae", tmp_path / "no-cache", None, max_tokens=0)
