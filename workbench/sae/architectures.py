"""architecture name -> class; `build(cfg)` makes an untrained SAE from a resolved config."""

from __future__ import annotations

from workbench.sae.base import SparseAutoencoder
from workbench.sae.batchtopk import BatchTopKSAE
from workbench.sae.blocksparse import BlockJumpReLUSAE, BlockTopKSAE, GrassmannianSAE, GroupLassoSAE
from workbench.sae.config import SAEConfig
from workbench.sae.matryoshka import MatryoshkaSAE
from workbench.sae.topk import TopKSAE

CLASSES: dict[str, type[SparseAutoencoder]] = {
    "topk": TopKSAE,
    "batchtopk": BatchTopKSAE,
    "matryoshka": MatryoshkaSAE,
    "block_topk": BlockTopKSAE,
    "group_lasso": GroupLassoSAE,
    "block_jumprelu": BlockJumpReLUSAE,
    "grassmannian": GrassmannianSAE,
}


def build(cfg: SAEConfig) -> SparseAutoencoder:
    return CLASSES[cfg.architecture](cfg)
