import pytest

from workbench.errors import ConfigError
from workbench.sae import evaluate


def test_zero_tokens_is_refused_before_any_work(tmp_path):
    """Not 'the cache has no held-out rows': the value is named before the SAE or cache is read."""
    with pytest.raises(ConfigError, match=r"max_tokens=0 must be >= 1"):
        evaluate(tmp_path / "no-sae", tmp_path / "no-cache", None, max_tokens=0)
