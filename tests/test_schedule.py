import pytest

from workbench.schedule import lr_factor


def test_warm_up_only_when_no_decay_is_asked_for():
    """Sparse-attention post-training's schedule: linear warm-up, then the full rate to the end."""
    f = [lr_factor(s, 4) for s in range(10)]
    assert f == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    assert lr_factor(0, 0) == 1.0 and lr_factor(10**6, 0, 100) == 1.0


def test_decay_reaches_zero_at_the_end():
    f = [lr_factor(s, 0, 10, 0.5) for s in range(11)]
    assert f[:5] == [1.0] * 5 and f[5:] == pytest.approx([1.0, 0.8, 0.6, 0.4, 0.2, 0.0])
