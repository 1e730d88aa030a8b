"""SAELens inference classes for the architectures SAELens lacks; `register()` (called by workbench.sae.io
when it saves or loads an SAE) makes sae_lens.SAE.load_from_disk know them.

`workbench_block_sparse`: signed block codes, kept by block Top-k, by a per-block threshold on
the block norm, or soft-thresholded (block Top-k, group lasso, block JumpReLU and Grassmannian
SAEs all save as this).
`workbench_scaffold`: a Top-k or JumpReLU SAE with a rank-r scaffold beside it.
`workbench_topk_transcoder`: a Top-k transcoder (sae-lens has transcoders with ReLU and JumpReLU codes
only); the same class as `workbench_scaffold`, optionally with a scaffold and a skip path.

Each may be a transcoder (d_out set: it reads hook_name and writes metadata.hook_name_out): its
encoder reads x - b_in (b_in the input's centre, d_in wide; b_dec is the output's bias), and a skip
transcoder adds x @ W_skip^T in `forward` (as sae-lens's skip transcoders do; `decode` leaves it out).

Either may carry a scaffold. SAELens decodes feature activations alone, so the scaffold's r dense
coordinates a = V^T (x - b_dec) are appended to the codes: d_sae = n_sparse + r, the last r rows of
W_dec are U^T, and x_hat = [z, a] @ W_dec + b_dec stays one linear map. Zeroing the last r
activations removes the scaffold's output.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from sae_lens import SAE, SAEConfig
from sae_lens.registry import SAE_CLASS_REGISTRY, register_sae_class
from torch import nn


@dataclass
class _WorkbenchSAEConfig(SAEConfig):
    scaffold_rank: int = 0
    scaffold_encoder_input: str = "residual"  # the sparse encoder reads x - S(x) ("residual") or x
    d_out: int | None = None  # a transcoder's output width; None: an SAE (output = input space)
    skip: bool = False  # a transcoder's linear skip path W_skip [d_out, d_in]

    @property
    def out_width(self) -> int:
        return self.d_out or self.d_in

    @property
    def n_sparse(self) -> int:
        return self.d_sae - self.scaffold_rank


class _WorkbenchSAE(SAE):
    """Scaffold handling shared by both architectures; subclasses choose the sparse codes."""

    def initialize_weights(self) -> None:
        c, kw = self.cfg, {"dtype": self.dtype, "device": self.device}
        n = c.d_sae - c.scaffold_rank
        self.W_enc = nn.Parameter(torch.zeros(c.d_in, n, **kw))
        self.b_enc = nn.Parameter(torch.zeros(n, **kw))
        self.W_dec = nn.Parameter(torch.zeros(c.d_sae, c.out_width, **kw))
        self.b_dec = nn.Parameter(torch.zeros(c.out_width, **kw))
        self.scaffold_V = nn.Parameter(torch.zeros(c.d_in, c.scaffold_rank, **kw))
        self.threshold = nn.Parameter(torch.zeros(self.n_threshold(), **kw))
        if c.d_out is not None:
            self.b_in = nn.Parameter(torch.zeros(c.d_in, **kw))
        if c.skip:
            self.W_skip = nn.Parameter(torch.zeros(c.d_out, c.d_in, **kw))

    def process_sae_in(self, sae_in: torch.Tensor) -> torch.Tensor:
        if self.cfg.d_out is None:
            return super().process_sae_in(sae_in)
        sae_in = self.hook_sae_input(sae_in.to(self.dtype))
        return self.run_time_activation_norm_fn_in(sae_in) - self.b_in

    def n_threshold(self) -> int:
        raise NotImplementedError

    def sparse_codes(self, h: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        sae_in = self.process_sae_in(x)
        a = sae_in @ self.scaffold_V
        enc_in = sae_in
        if self.cfg.scaffold_rank and self.cfg.scaffold_encoder_input == "residual":
            enc_in = sae_in - a @ self.W_dec[self.cfg.n_sparse :]
        h = self.hook_sae_acts_pre(enc_in @ self.W_enc + self.b_enc)
        return self.hook_sae_acts_post(torch.cat([self.sparse_codes(h), a], dim=-1))

    def decode(self, feature_acts: torch.Tensor) -> torch.Tensor:
        out = self.hook_sae_recons(feature_acts @ self.W_dec + self.b_dec)
        if self.cfg.d_out is not None:
            return out
        out = self.run_time_activation_norm_fn_out(out)
        return self.reshape_fn_out(out, self.d_head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)
        return out + x.to(self.dtype) @ self.W_skip.T if self.cfg.skip else out

    def fold_W_dec_norm(self):
        raise NotImplementedError("workbench SAEs keep their decoder norms; folding would change the codes")


@dataclass
class ScaffoldSAEConfig(_WorkbenchSAEConfig):
    base: str = "topk"  # "topk" (k per token) | "jumprelu" (the threshold vector)
    k: int = 32

    @classmethod
    def architecture(cls) -> str:
        return "workbench_scaffold"


class ScaffoldSAE(_WorkbenchSAE):
    def n_threshold(self) -> int:
        return self.cfg.n_sparse

    def sparse_codes(self, h: torch.Tensor) -> torch.Tensor:
        if self.cfg.base == "topk":
            top = h.topk(self.cfg.k, dim=-1)
            return torch.zeros_like(h).scatter(-1, top.indices, top.values.relu())
        return h.relu() * (h > self.threshold)


@dataclass
class BlockSparseSAEConfig(_WorkbenchSAEConfig):
    block_size: int = 3
    rule: str = "topk"  # "topk" (n_active_blocks largest block norms) | "threshold" (norm > threshold[g])
    # | "soft" (blocks shrunk by max(1 - threshold[g] / norm, 0))
    n_active_blocks: int = 4

    @classmethod
    def architecture(cls) -> str:
        return "workbench_block_sparse"


@dataclass
class TopKTranscoderConfig(ScaffoldSAEConfig):
    @classmethod
    def architecture(cls) -> str:
        return "workbench_topk_transcoder"


class BlockSparseSAE(_WorkbenchSAE):
    def n_threshold(self) -> int:
        return self.cfg.n_sparse // self.cfg.block_size

    def sparse_codes(self, h: torch.Tensor) -> torch.Tensor:
        b = self.cfg.block_size
        blocks = h.unflatten(-1, (-1, b))
        norms = blocks.norm(dim=-1)
        if self.cfg.rule == "topk":
            idx = norms.topk(self.cfg.n_active_blocks, dim=-1).indices
            keep = torch.zeros_like(norms, dtype=torch.bool).scatter(-1, idx, True).to(h.dtype)
        elif self.cfg.rule == "soft":
            keep = (1 - self.threshold / norms.clamp_min(1e-12)).clamp_min(0)
        else:
            keep = (norms > self.threshold).to(h.dtype)
        return (blocks * keep.unsqueeze(-1)).flatten(-2)


def register() -> None:
    """Make SAE.load_from_disk know the workbench's architectures (idempotent)."""
    for cls, cfg_cls in (
        (ScaffoldSAE, ScaffoldSAEConfig),
        (BlockSparseSAE, BlockSparseSAEConfig),
        (ScaffoldSAE, TopKTranscoderConfig),
    ):
        if cfg_cls.architecture() not in SAE_CLASS_REGISTRY:
            register_sae_class(cfg_cls.architecture(), cls, cfg_cls)


register()  # importing this module imports sae_lens, whose import hook (workbench.sae) leaves the call to here
