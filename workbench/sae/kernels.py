"""Sparse encoder/decoder products: only the encoder forward is a dense B x d x n matmul.

The encoder forward ranks every latent (dense `h`, computed without autograd). Everything else
touches only the selected (token, latent) pairs of a `Support`:
  encode: the selected pre-activations, whose backward scatters into the selected encoder rows;
  decode: an embedding_bag over the selected decoder rows, whose backward gathers/scatters the same.
A dense implementation does about five B x d x n matmuls per step; this one does one.
`DENSE` computes the same values with dense matmuls and autograd: the reference the tests check
the sparse gradients against, and a config choice (`kernel="dense"`) for benchmarks.
"""

from __future__ import annotations

from dataclasses import dataclass

import warnings

import torch
import torch.nn.functional as F

warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")


@dataclass
class Support:
    """Selected (token, latent) pairs, sorted by token then latent."""

    rows: torch.Tensor  # int64 [N] token index
    idx: torch.Tensor  # int64 [N] latent index
    n_rows: int

    @classmethod
    def from_mask(cls, mask: torch.Tensor) -> "Support":
        rows, idx = mask.nonzero(as_tuple=True)
        return cls(rows, idx, mask.shape[0])

    @classmethod
    def from_topk(cls, idx: torch.Tensor, keep: torch.Tensor | None = None, unit: int = 1) -> "Support":
        """From per-row unit indices [B, k] (e.g. torch.topk's), optionally filtered by `keep` [B, k];
        unit > 1 expands each unit index u to latents u*unit ... u*unit + unit - 1."""
        B, k = idx.shape
        idx, order = idx.sort(dim=-1)
        if unit > 1:
            idx = (idx[..., None] * unit + torch.arange(unit, device=idx.device)).flatten(1)
        rows = torch.arange(B, device=idx.device).repeat_interleave(idx.shape[1])
        idx = idx.flatten()
        if keep is not None:
            keep = keep.gather(1, order)
            if unit > 1:
                keep = keep.repeat_interleave(unit, dim=1)
            keep = keep.flatten()
            rows, idx = rows[keep], idx[keep]
        return cls(rows, idx, B)

    def offsets(self, bags: torch.Tensor | None = None, n_bags: int | None = None) -> torch.Tensor:
        """Start of each bag in the (sorted) entry list, for embedding_bag."""
        bags = self.rows if bags is None else bags
        n_bags = self.n_rows if n_bags is None else n_bags
        return torch.searchsorted(bags, torch.arange(n_bags, device=bags.device))


def _sparse_outer(idx: torch.Tensor, rows: torch.Tensor, w: torch.Tensor, n: int, dense: torch.Tensor) -> torch.Tensor:
    """sum_e w_e * outer(onehot(idx_e), dense[rows_e]) -> [n, d] without a dense n x B operand."""
    m = torch.sparse_coo_tensor(torch.stack([idx, rows]), w, (n, dense.shape[0]),
                                is_coalesced=False, check_invariants=False)
    return torch.sparse.mm(m, dense)


class _Encode(torch.autograd.Function):
    """Pre-activations of the selected pairs; backward writes only the selected encoder rows."""

    @staticmethod
    def forward(ctx, x, W_enc, b_enc, rows, idx, offsets, pre):
        ctx.save_for_backward(x, W_enc, rows, idx, offsets)
        ctx.n = W_enc.shape[0]
        return pre.to(W_enc.dtype)

    @staticmethod
    def backward(ctx, g):
        x, W_enc, rows, idx, offsets = ctx.saved_tensors
        g = g.to(W_enc.dtype)
        gx = gW = gb = None
        if ctx.needs_input_grad[0]:
            gx = F.embedding_bag(idx, W_enc, offsets, mode="sum", per_sample_weights=g).to(x.dtype)
        if ctx.needs_input_grad[1]:
            gW = _sparse_outer(idx, rows, g, ctx.n, x.to(W_enc.dtype))
        if ctx.needs_input_grad[2]:
            gb = torch.zeros(ctx.n, dtype=g.dtype, device=g.device).index_add_(0, idx, g)
        return gx, gW, gb, None, None, None, None


class _Decode(torch.autograd.Function):
    """sum over each bag of vals * W_dec[idx]; backward touches only the selected decoder rows."""

    @staticmethod
    def forward(ctx, vals, W_dec, idx, bags, offsets):
        ctx.save_for_backward(vals, W_dec, idx, bags, offsets)
        return F.embedding_bag(idx, W_dec, offsets, mode="sum", per_sample_weights=vals.to(W_dec.dtype))

    @staticmethod
    def backward(ctx, g):
        vals, W_dec, idx, bags, offsets = ctx.saved_tensors
        g = g.to(W_dec.dtype)
        gv = gW = None
        if ctx.needs_input_grad[0]:  # <g[bag_e], W_dec[idx_e]> for each entry: a sampled dense-dense product
            crow = torch.cat([offsets, offsets.new_tensor([idx.numel()])])
            pattern = torch.sparse_csr_tensor(crow, idx, torch.zeros_like(vals, dtype=g.dtype),
                                              (g.shape[0], W_dec.shape[0]), check_invariants=False)
            gv = torch.sparse.sampled_addmm(pattern, g, W_dec.T, beta=0.0).values().to(vals.dtype)
        if ctx.needs_input_grad[1]:
            gW = _sparse_outer(idx, bags, vals.to(W_dec.dtype), W_dec.shape[0], g)
        return gv, gW, None, None, None


class SparseKernels:
    name = "sparse"

    @staticmethod
    def encode(x: torch.Tensor, W_enc: torch.Tensor, b_enc: torch.Tensor, sup: Support, h: torch.Tensor) -> torch.Tensor:
        """Selected pre-activations [N] with gradients to x, W_enc [n, d] and b_enc; h is the no-grad dense h."""
        pre = h[sup.rows, sup.idx]
        return _Encode.apply(x, W_enc, b_enc, sup.rows, sup.idx, sup.offsets(), pre)

    @staticmethod
    def decode(vals: torch.Tensor, W_dec: torch.Tensor, sup: Support, bags: torch.Tensor | None = None,
               n_bags: int | None = None) -> torch.Tensor:
        """[n_bags, d]: each bag's sum of vals * W_dec[idx]; bags default to tokens (must be sorted)."""
        bags = sup.rows if bags is None else bags
        return _Decode.apply(vals, W_dec, sup.idx, bags, sup.offsets(bags, n_bags))


class DenseKernels:
    name = "dense"

    @staticmethod
    def encode(x, W_enc, b_enc, sup: Support, h) -> torch.Tensor:
        return (x.to(W_enc.dtype) @ W_enc.T + b_enc)[sup.rows, sup.idx]

    @staticmethod
    def decode(vals, W_dec, sup: Support, bags=None, n_bags=None) -> torch.Tensor:
        bags = sup.rows if bags is None else bags
        n_bags = sup.n_rows if n_bags is None else n_bags
        z = torch.zeros(n_bags, W_dec.shape[0], dtype=W_dec.dtype, device=W_dec.device)
        z = z.index_put((bags, sup.idx), vals.to(W_dec.dtype), accumulate=True)
        return z @ W_dec


KERNELS = {"sparse": SparseKernels, "dense": DenseKernels}
