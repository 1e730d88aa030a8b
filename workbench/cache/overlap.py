"""Whether a prompt occurs in the tokens a dictionary was trained on: what makes a query held out from a
transcoder set's data, checked per query (the set's manifest names the cache it was trained on)."""

from __future__ import annotations


def seen_in_training(cache: str | None):
    """A test of whether a token sequence occurs in the train split of `cache` (None: no cache to check
    against, every answer None). The cache holds no special tokens, so pass the ids without BOS."""
    if cache is None:
        return lambda ids: None
    import numpy as np

    from workbench.cache.reader import ActivationCache

    text = " " + " ".join(map(str, np.asarray(ActivationCache.open(cache).token_ids("train")).tolist())) + " "
    return lambda ids: (" " + " ".join(map(str, ids)) + " ") in text
