"""Sparse-attention post-training (docs/methods.md §7): gated attention on any HookedTransformer, trained to
keep as few query-key edges as possible at the base model's held-out loss, and its circuits compared.

    from workbench.attention import SparsifyConfig, GateConfig
    from workbench.attention.train import sparsify
    report = sparsify("tiny", "sparse-tiny", SparsifyConfig(steps=1000))
    model, tok = workbench.models.load("sparse-tiny")   # gated, deterministic

Only the configs are imported here (no torch); gates, train, report and compare import torch.
"""

from workbench.attention.config import GateConfig, SparsifyConfig

__all__ = ["GateConfig", "SparsifyConfig"]
