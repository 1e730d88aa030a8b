"""Intervention scoring against a direct steered forward pass: the decoder row added at the SAE's hook."""

import numpy as np
import pytest
import torch

from workbench.errors import BadValueError
from workbench.features import FeatureStore
from workbench.features.explain import ExplainConfig
from workbench.features.steering import Steerer
from workbench.models import load
from workbench.sae.io import load_sae


def test_steering_scores_equal_a_direct_steered_run(feature_workspace):
    from workbench.cache import ActivationCache

    folder = next(p for p in (feature_workspace / "saes" / "run").iterdir() if p.name.startswith("topk"))
    store = FeatureStore(folder)
    model, _ = load(str(feature_workspace / "models" / "random"), device="cpu")
    cache = ActivationCache.open(store.manifest["cache"])
    cfg = ExplainConfig(steer_prompts=2, steer_scale=2.0)
    steer = Steerer(store, model, cache, cfg)
    u = int(store.units["count"].idxmax())
    promoted = [3, 17, 40]
    got = steer.score(u, promoted)
    w = load_sae(folder).W_dec.detach()[u] * cfg.steer_scale * float(store.units["max"].iat[u])
    hook = store.manifest["hook"]
    rise, pct = [], []
    with torch.no_grad():
        for seq in np.asarray(cache.sequences("heldout")[:2]):
            t = torch.as_tensor(seq)[None]
            clean = model(t)[0].log_softmax(-1)
            new = model.run_with_hooks(t, fwd_hooks=[(hook, lambda act, hook: act + w)])[0].log_softmax(-1)
            d = (new - clean).numpy()
            for row in d:
                rise.append(row[promoted].mean() - row.mean())
                pct.append(np.mean([1 - (row > row[i]).sum() / (len(row) - 1) for i in promoted]))
    assert got["n_positions"] == len(rise)
    assert got["rise"] == pytest.approx(np.mean(rise), abs=1e-4)
    assert got["percentile"] == pytest.approx(np.mean(pct), abs=1e-4)
    assert steer.score(u, []) == {"rise": None, "percentile": None, "n_positions": 0}
    tiny, _ = load("tiny", device="cpu")
    with pytest.raises(BadValueError, match="was built on .*; pass the store's model with --model"):
        Steerer(store, tiny, cache, cfg)
