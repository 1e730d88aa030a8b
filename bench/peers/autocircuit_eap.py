"""auto-circuit side: EAP-IG edge scores of one query (mask_gradient_prune_scores, integrated_grad_samples=m).

auto-circuit's EAP-IG interpolates the edge masks between the clean and the ablated (resample =
counterfactual) activations over m + 1 mask values 0, 1/m, ..., 1, one forward-backward each, after
one forward on the counterfactual; metric = logit difference at the last position, as the
workbench's. The model is made patchable once (timed separately); each query is a one-prompt
PromptDataLoader.

auto-circuit 1.0.1 imports TransformerLens 1.x/2.x names that TransformerLens 3 renamed; the shim
below maps them (the KV cache is never used here).
"""

from __future__ import annotations

import os
import sys
import time
import types

sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
import transformer_lens  # noqa: E402
from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache  # noqa: E402

_shim = types.ModuleType("transformer_lens.past_key_value_caching")
_shim.HookedTransformerKeyValueCache = TransformerLensKeyValueCache
sys.modules[_shim.__name__] = _shim
transformer_lens.HookedTransformerKeyValueCache = TransformerLensKeyValueCache

import common  # noqa: E402
from auto_circuit.data import PromptDataLoader, PromptDataset  # noqa: E402
from auto_circuit.prune_algos.mask_gradient import mask_gradient_prune_scores  # noqa: E402
from auto_circuit.types import AblationType  # noqa: E402
from auto_circuit.utils.graph_utils import patchable_model  # noqa: E402


def loader(p: dict) -> PromptDataLoader:
    t = lambda v: torch.tensor(v, dtype=torch.long)  # noqa: E731
    ds = PromptDataset(t(p["tokens"])[None], t(p["cf_tokens"])[None], [t([p["answer"]])], [t([p["wrong"]])])
    return PromptDataLoader(ds, seq_len=None, diverge_idx=0, batch_size=1, shuffle=False)


def main() -> None:
    cfg = common.load_config()
    model = common.load_model(cfg["model_dir"])
    model.cfg.use_attn_result = True
    model.cfg.use_split_qkv_input = True
    model.cfg.use_hook_mlp_in = True
    for p in model.parameters():
        p.requires_grad_(False)
    prompts = common.load_prompts(cfg["prompts"])
    base = common.reset_peak()
    t0 = time.perf_counter()
    pm = patchable_model(
        model, factorized=True, slice_output="last_seq", seq_len=None, separate_qkv=True, device=torch.device("cpu")
    )
    wrap_s = time.perf_counter() - t0
    per_query = []
    for p in prompts:
        dl = loader(p)

        def run():
            scores = mask_gradient_prune_scores(
                pm,
                dl,
                None,
                grad_function="logit",
                answer_function="avg_diff",
                integrated_grad_samples=cfg["steps"],
                ablation_type=AblationType.RESAMPLE,
                clean_corrupt="corrupt",
            )
            return sum(int(s.numel()) for s in scores.values())

        times, n_scores = common.timed(run, cfg["repeats"], cfg.get("warmup", 1))
        per_query.append(
            {
                "name": p["name"],
                "n_tokens": len(p["tokens"]),
                "seconds": times,
                "seconds_median": common.median(times),
                "n_scores": n_scores,
            }
        )
    peak = common.rss_mb()
    common.emit(
        {
            "side": "auto-circuit",
            "steps": cfg["steps"],
            "n_edges": pm.n_edges,
            "wrap_s": wrap_s,
            "queries": per_query,
            "rss_base_mb": base,
            "rss_peak_mb": peak,
            "rss_extra_mb": peak - base,
            "versions": common.versions("auto-circuit", "transformer-lens"),
        }
    )


if __name__ == "__main__":
    main()
