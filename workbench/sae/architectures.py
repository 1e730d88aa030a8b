"""architecture name -> class; `build(cfg)` makes an untrained SAE (or CLT) from a resolved config."""

from __future__ import annotations

from workbench.sae.base import SparseAutoencoder
from workbench.sae.batchtopk import BatchTopKSAE
from workbench.sae.blocksparse import BlockJumpReLUSAE, BlockTopKSAE, GrassmannianSAE, GroupLassoSAE
from workbench.sae.clt import CrossLayerTranscoder
from workbench.sae.config import CLTConfig, SAEConfig
from workbench.sae.gated import GatedSAE
from workbench.sae.jumprelu import JumpReLUSAE
from workbench.sae.matryoshka import MatryoshkaSAE
from workbench.sae.standard import StandardSAE
from workbench.sae.topk import TopKSAE

CLASSES: dict[str, type[SparseAutoencoder]] = {
    "topk": TopKSAE,
    "batchtopk": BatchTopKSAE,
    "matryoshka": MatryoshkaSAE,
    "block_topk": BlockTopKSAE,
    "group_lasso": GroupLassoSAE,
    "block_jumprelu": BlockJumpReLUSAE,
    "grassmannian": GrassmannianSAE,
    "jumprelu": JumpReLUSAE,
    "gated": GatedSAE,
    "standard": StandardSAE,
}


def build(cfg: SAEConfig) -> SparseAutoencoder:
    """An SAE or transcoder of cfg's architecture; a CLTConfig builds a cross-layer transcoder of its members."""
    if isinstance(cfg, CLTConfig):
        return CrossLayerTranscoder(cfg, build)
    return CLASSES[cfg.architecture](cfg)
