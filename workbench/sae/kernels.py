"""Sparse encoder/decoder products: only the encoder forward is a dense B x d x n matmul.

The encoder forward ranks every latent (dense `h`, computed without autograd, in row chunks that
stay in cache; `topk` picks from each chunk). Everything else touches only the selected
(token, latent) pairs of a `Support`:
  encode: the selected pre-activations, whose backward scatters into the selected encoder rows;
  decode: an embedding_bag over the selected decoder rows, whose backward gathers/scatters the same.
A dense implementation does about five B x d x n matmuls per step; this one does one.
`DENSE` computes the same values with dense matmuls and autograd: the reference the tests check
the sparse gradients against, and a config choice (`kernel="dense"`) for benchmarks.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from workbench.errors import BadValueError

warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")


def topk(t: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-k along the last dim (unsorted), about 2x faster than torch.topk on wide CPU rows.

    The first g*w columns are split into w strided groups {j, j + w, ..., j + (g-1)w} of g each. The k
    largest entries lie in the k groups with the largest maxima or in the r = n - g*w tail columns, so
    torch.topk only sees the w group maxima (one vectorised max over g slices) and the k*g + r
    candidates: any width takes the fast path (a CLT's 585 latents, not only powers of two). Tied values
    may come back at other indices than torch.topk's (the values are the same).
    """
    n = t.shape[-1]
    if not 0 <= k <= n:
        raise BadValueError(f"top-k of k={k} from {n} columns: k must be in 0..{n}")
    g = topk_groups(n, k)
    if g == 1 or t.device.type != "cpu":  # GPU topk is a radix select already
        return t.topk(k, dim=-1, sorted=False)
    w = n // g
    gmax = t[..., : g * w].unflatten(-1, (g, w)).amax(-2)
    groups = _order_key(gmax).topk(k, dim=-1, sorted=False).indices
    cand = (groups.unsqueeze(-1) + torch.arange(0, g * w, w, device=t.device)).flatten(-2)
    if n > g * w:
        tail = torch.arange(g * w, n, device=t.device).expand(*cand.shape[:-1], n - g * w)
        cand = torch.cat([cand, tail], dim=-1)
    cand_vals = t.gather(-1, cand)
    pos = _order_key(cand_vals).topk(k, dim=-1, sorted=False).indices
    return cand_vals.gather(-1, pos), cand.gather(-1, pos)


def topk_groups(n: int, k: int) -> int:
    """Members per group of `topk` over n columns: the largest power of two g with g^2 k <= n (1: plain torch.topk)."""
    g = 1
    while k and (2 * g) ** 2 * k <= n:
        g *= 2
    return g


def _order_key(t: torch.Tensor) -> torch.Tensor:
    """float32 -> int32 with the same order (torch.topk is ~1.5x faster on integers on the CPU)."""
    if t.dtype != torch.float32:
        return t
    i = t.view(torch.int32)
    return i ^ ((i >> 31) & 0x7FFFFFFF)


@dataclass
class Support:
    """Selected (token, latent) pairs, sorted by token then latent, with their pre-activations.

    Bags finer than a token (Matryoshka's (token, prefix group)) need the latent order; token bags
    do not, so AuxK's support skips it (sorting its 384 latents a token costs ~2% of a d 768 step)."""

    rows: torch.Tensor  # int64 [N] token index
    idx: torch.Tensor  # int64 [N] latent index
    n_rows: int
    pre: torch.Tensor  # [N] the no-grad pre-activations h at the pairs
    _by_latent: tuple | None = field(default=None, repr=False)

    @classmethod
    def from_mask(cls, mask: torch.Tensor, h: torch.Tensor) -> Support:
        rows, idx = mask.nonzero(as_tuple=True)
        return cls(rows, idx, mask.shape[0], h[rows, idx])

    @classmethod
    def from_flat(cls, flat: torch.Tensor, h: torch.Tensor) -> Support:
        """From indices into h.flatten() (any order), e.g. a batch-wide top-k."""
        flat = flat.sort().values
        n = h.shape[1]
        return cls(flat // n, flat % n, h.shape[0], h.flatten()[flat])

    @classmethod
    def from_topk(
        cls, h: torch.Tensor, idx: torch.Tensor, keep: torch.Tensor | None = None, unit: int = 1, sort: bool = True
    ) -> Support:
        """From per-row unit indices [B, k] into h's columns (unit > 1: unit u covers latents
        u*unit ... u*unit + unit - 1), optionally filtered by `keep` [B, k]; `sort=False` leaves
        each row's latents in the given order."""
        B = idx.shape[0]
        if sort:
            idx, order = idx.sort(dim=-1)
            keep = keep.gather(1, order) if keep is not None else None
        if unit > 1:
            idx = (idx[..., None] * unit + torch.arange(unit, device=idx.device)).flatten(1)
        pre = h.gather(1, idx).flatten()
        rows = torch.arange(B, device=idx.device).repeat_interleave(idx.shape[1])
        idx = idx.flatten()
        if keep is not None and not bool(keep.all()):  # (boolean indexing syncs a GPU anyway)
            if unit > 1:
                keep = keep.repeat_interleave(unit, dim=1)
            keep = keep.flatten()
            rows, idx, pre = rows[keep], idx[keep], pre[keep]
        return cls(rows, idx, B, pre)

    @classmethod
    def cat(cls, parts: list[Support]) -> Support:
        """Concatenate the supports of consecutive row chunks."""
        if len(parts) == 1:
            return parts[0]
        starts, n = [], 0
        for p in parts:
            starts.append(n)
            n += p.n_rows
        return cls(
            torch.cat([p.rows + s for p, s in zip(parts, starts)]),
            torch.cat([p.idx for p in parts]),
            n,
            torch.cat([p.pre for p in parts]),
        )

    def offsets(self, bags: torch.Tensor | None = None, n_bags: int | None = None) -> torch.Tensor:
        """Start of each bag in the (sorted) entry list, for embedding_bag."""
        bags = self.rows if bags is None else bags
        n_bags = self.n_rows if n_bags is None else n_bags
        return torch.searchsorted(bags, torch.arange(n_bags, device=bags.device))

    def by_latent(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(order, offsets) grouping the entries by latent; computed once, shared by both weight gradients."""
        if self._by_latent is None:
            # stable keeps each latent's entries in token order; int32 keys sort 2x faster than int64
            keys = self.idx.to(torch.int32) if n < 2**31 else self.idx
            order = torch.argsort(keys, stable=True)
            counts = torch.bincount(self.idx, minlength=n)
            self._by_latent = order, counts.cumsum(0) - counts
        return self._by_latent


def _weight_grad(src: torch.Tensor, w: torch.Tensor, dense: torch.Tensor, by_latent) -> torch.Tensor:
    """Row j of the [n, d] gradient is sum over entries e of latent j of w_e * dense[src_e]: an
    embedding_bag over the entries grouped by latent (no dense n x B operand, no scatter)."""
    order, offsets = by_latent
    return F.embedding_bag(src[order], dense, offsets, mode="sum", per_sample_weights=w[order])


class _Encode(torch.autograd.Function):
    """Pre-activations of the selected pairs; backward writes only the selected encoder rows."""

    @staticmethod
    def forward(ctx, x, W_enc, b_enc, sup):
        ctx.save_for_backward(x, W_enc)
        ctx.sup = sup
        # a copy: returning sup.pre itself would give it this node as grad_fn, and the cycle
        # tensor -> node -> ctx.sup -> tensor lives in C++ where Python's GC cannot free it
        return sup.pre.to(W_enc.dtype, copy=True)

    @staticmethod
    def backward(ctx, g):
        x, W_enc = ctx.saved_tensors
        sup, n = ctx.sup, W_enc.shape[0]
        g = g.to(W_enc.dtype)
        gx = gW = gb = None
        if ctx.needs_input_grad[0]:
            gx = F.embedding_bag(sup.idx, W_enc, sup.offsets(), mode="sum", per_sample_weights=g).to(x.dtype)
        if ctx.needs_input_grad[1]:
            gW = _weight_grad(sup.rows, g, x.to(W_enc.dtype), sup.by_latent(n))
        if ctx.needs_input_grad[2]:
            gb = torch.zeros(n, dtype=g.dtype, device=g.device).index_add_(0, sup.idx, g)
        return gx, gW, gb, None


class _Decode(torch.autograd.Function):
    """sum over each bag of vals * W_dec[idx]; backward touches only the selected decoder rows."""

    @staticmethod
    def forward(ctx, vals, W_dec, sup, bags, offsets):
        ctx.save_for_backward(vals, W_dec, bags, offsets)
        ctx.sup = sup
        return F.embedding_bag(sup.idx, W_dec, offsets, mode="sum", per_sample_weights=vals.to(W_dec.dtype))

    @staticmethod
    def backward(ctx, g):
        vals, W_dec, bags, offsets = ctx.saved_tensors
        sup, idx = ctx.sup, ctx.sup.idx
        g = g.to(W_dec.dtype)
        gv = gW = None
        if ctx.needs_input_grad[0]:  # <g[bag_e], W_dec[idx_e]> for each entry: a sampled dense-dense product
            crow = torch.cat([offsets, offsets.new_tensor([idx.numel()])])
            pattern = torch.sparse_csr_tensor(
                crow, idx, torch.zeros_like(vals, dtype=g.dtype), (g.shape[0], W_dec.shape[0]), check_invariants=False
            )
            gv = torch.sparse.sampled_addmm(pattern, g, W_dec.T, beta=0.0).values().to(vals.dtype)
        if ctx.needs_input_grad[1]:
            gW = _weight_grad(bags, vals.to(W_dec.dtype), g, sup.by_latent(W_dec.shape[0]))
        return gv, gW, None, None, None


class SparseKernels:
    name = "sparse"

    @staticmethod
    def encode(x: torch.Tensor, W_enc: torch.Tensor, b_enc: torch.Tensor, sup: Support) -> torch.Tensor:
        """Selected pre-activations [N] (sup.pre) with gradients to x, W_enc [n, d] and b_enc."""
        return _Encode.apply(x, W_enc, b_enc, sup)

    @staticmethod
    def decode(
        vals: torch.Tensor,
        W_dec: torch.Tensor,
        sup: Support,
        bags: torch.Tensor | None = None,
        n_bags: int | None = None,
    ) -> torch.Tensor:
        """[n_bags, d]: each bag's sum of vals * W_dec[idx]; bags default to tokens (must be sorted)."""
        bags = sup.rows if bags is None else bags
        return _Decode.apply(vals, W_dec, sup, bags, sup.offsets(bags, n_bags))


class DenseKernels:
    name = "dense"

    @staticmethod
    def encode(x, W_enc, b_enc, sup: Support) -> torch.Tensor:
        return (x.to(W_enc.dtype) @ W_enc.T + b_enc)[sup.rows, sup.idx]

    @staticmethod
    def decode(vals, W_dec, sup: Support, bags=None, n_bags=None) -> torch.Tensor:
        bags = sup.rows if bags is None else bags
        n_bags = sup.n_rows if n_bags is None else n_bags
        z = torch.zeros(n_bags, W_dec.shape[0], dtype=W_dec.dtype, device=W_dec.device)
        z = z.index_put((bags, sup.idx), vals.to(W_dec.dtype), accumulate=True)
        return z @ W_dec


KERNELS = {"sparse": SparseKernels, "dense": DenseKernels}
