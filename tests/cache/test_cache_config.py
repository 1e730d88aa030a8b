"""The harvest config checks the fractions it is given when it is made, with the same checks the cache's
recorded config runs when a manifest is read."""

import pytest

from workbench.cache.config import CacheConfig, HarvestConfig
from workbench.errors import BadValueError

RECORDED = dict(
    model="tiny@abc",
    corpus="synthetic",
    hooks=("blocks.0.hook_resid_post",),
    n_tokens=100,
    ctx_len=16,
    batch_size=4,
    dtype="float16",
    shard_tokens=50,
    heldout_fraction=0.1,
    exclude_special=True,
    special_ids=(0, 1),
    outlier_factor=10.0,
)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"heldout_fraction": 1.0}, r"heldout_fraction=1.0 must be a finite number in \[0, 1\)"),
        ({"outlier_factor": 0.5}, "outlier_factor=0.5 must be a finite number > 1"),
        ({"max_unknown_fraction": 2.0}, r"max_unknown_fraction=2.0 must be a finite number in \[0, 1\]"),
        ({"n_tokens": 1, "heldout_fraction": 0.9}, "leaves no train rows"),
        ({"dtype": "int8"}, r"dtype='int8' is not valid; choose one of \['float32', 'float16', 'bfloat16'\]"),
    ],
)
def test_a_harvest_config_is_refused_when_made(kw, match):
    with pytest.raises(BadValueError, match=match):
        HarvestConfig(**kw)
    recorded = {k: v for k, v in kw.items() if k != "dtype"}
    if recorded:
        with pytest.raises(BadValueError, match=match):
            CacheConfig(**{**RECORDED, **recorded})


def test_a_manifest_from_another_version_loads_without_its_unknown_keys():
    saved = {**CacheConfig(**RECORDED).to_dict(), "written_by_a_later_version": 1}
    back = CacheConfig.from_dict(saved)
    assert back == CacheConfig(**RECORDED) and isinstance(back.hooks, tuple)
