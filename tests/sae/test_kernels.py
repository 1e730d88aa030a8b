"""The sparse kernels give the dense reference's values and gradients."""

import pytest
import torch

from workbench.errors import BadValueError
from workbench.sae.kernels import DenseKernels, SparseKernels, Support, topk, topk_groups


def _problem(seed=0, B=16, d=8, n=24, k=5, sort=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, d, generator=g, dtype=torch.float64)
    W_enc = torch.randn(n, d, generator=g, dtype=torch.float64)
    b_enc = torch.randn(n, generator=g, dtype=torch.float64)
    W_dec = torch.randn(n, d, generator=g, dtype=torch.float64)
    h = x @ W_enc.T + b_enc
    sup = Support.from_topk(h, h.topk(k).indices, sort=sort)
    return x, W_enc, b_enc, W_dec, h, sup


def _grads(kern, bags=None, n_bags=None, sort=True):
    x, W_enc, b_enc, W_dec, h, sup = _problem(sort=sort)
    leaves = [t.requires_grad_() for t in (x, W_enc, b_enc, W_dec)]
    pre = kern.encode(x, W_enc, b_enc, sup)
    out = kern.decode(pre.relu() * 1.5, W_dec, sup, bags(sup) if bags else None, n_bags)
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)
    (out * w).sum().backward()
    return out.detach(), [t.grad for t in leaves]


@pytest.mark.parametrize("bags", [None, "groups"])
def test_sparse_matches_dense_values_and_gradients(bags):
    # bags "groups": (token, latent-group) bags, as Matryoshka uses for prefix reconstructions
    fn = (lambda s: s.rows * 3 + s.idx // 8) if bags else None
    n_bags = 16 * 3 if bags else None
    out_s, g_s = _grads(SparseKernels, fn, n_bags)
    out_d, g_d = _grads(DenseKernels, fn, n_bags)
    torch.testing.assert_close(out_s, out_d)
    for name, a, b in zip(("x", "W_enc", "b_enc", "W_dec"), g_s, g_d):
        torch.testing.assert_close(a, b, msg=f"gradient of {name} differs")


def test_token_bags_need_no_latent_order():
    """AuxK's support keeps each token's latents unsorted (topk's order): same values and gradients."""
    assert not torch.equal(_problem(sort=False)[-1].idx, _problem()[-1].idx)
    out_u, g_u = _grads(SparseKernels, sort=False)
    out_d, g_d = _grads(DenseKernels)
    torch.testing.assert_close(out_u, out_d)
    for name, a, b in zip(("x", "W_enc", "b_enc", "W_dec"), g_u, g_d):
        torch.testing.assert_close(a, b, msg=f"gradient of {name} differs")


def test_sparse_gradcheck():
    x, W_enc, b_enc, W_dec, h, sup = _problem(B=4, d=3, n=6, k=2)

    def f(x, W_enc, b_enc, W_dec):
        sup.pre = (x @ W_enc.T + b_enc).detach()[sup.rows, sup.idx]
        return SparseKernels.decode(SparseKernels.encode(x, W_enc, b_enc, sup), W_dec, sup)

    assert torch.autograd.gradcheck(f, [t.requires_grad_() for t in (x, W_enc, b_enc, W_dec)])


def test_sparse_backward_touches_only_selected_rows():
    x, W_enc, b_enc, W_dec, h, sup = _problem()
    for t in (W_enc, W_dec):
        t.requires_grad_()
    SparseKernels.decode(SparseKernels.encode(x, W_enc, b_enc, sup), W_dec, sup).sum().backward()
    untouched = torch.ones(W_enc.shape[0], dtype=torch.bool)
    untouched[sup.idx] = False
    assert untouched.any()
    assert (W_enc.grad[untouched] == 0).all() and (W_dec.grad[untouched] == 0).all()


def test_support_from_topk_matches_from_mask_and_expands_blocks():
    h = torch.randn(6, 12, generator=torch.Generator().manual_seed(3))
    top = h.topk(4, dim=-1, sorted=False)
    a = Support.from_topk(h, top.indices, top.values > 0)
    mask = torch.zeros_like(h, dtype=torch.bool).scatter(1, top.indices, True) & (h > 0)
    b = Support.from_mask(mask, h)
    flat = Support.from_flat(mask.flatten().nonzero().squeeze(1).flip(0), h)
    for s in (b, flat):
        assert torch.equal(a.rows, s.rows) and torch.equal(a.idx, s.idx) and torch.equal(a.pre, s.pre)
    assert torch.equal(a.pre, h[a.rows, a.idx])
    blocks = Support.from_topk(h[:1], torch.tensor([[2, 0]]), unit=3)
    assert blocks.idx.tolist() == [0, 1, 2, 6, 7, 8] and blocks.rows.tolist() == [0] * 6


def test_support_cat_offsets_rows():
    h = torch.randn(5, 8, generator=torch.Generator().manual_seed(4))
    whole = Support.from_topk(h, h.topk(3).indices)
    parts = Support.cat(
        [Support.from_topk(h[:2], h[:2].topk(3).indices), Support.from_topk(h[2:], h[2:].topk(3).indices)]
    )
    for f in ("rows", "idx", "pre"):
        assert torch.equal(getattr(whole, f), getattr(parts, f))
    assert parts.n_rows == 5


@pytest.mark.parametrize(
    "shape,k", [((64, 2048), 32), ((7, 12288), 32), ((1, 4096 * 64), 4096), ((3, 96), 5), ((5, 100), 3)]
)
def test_grouped_topk_is_exact(shape, k):
    g = torch.Generator().manual_seed(shape[1])
    t = torch.randn(shape, generator=g)
    vals, idx = topk(t, k)
    assert torch.equal(t.gather(-1, idx), vals)
    assert torch.equal(vals.sort(-1).values, t.topk(k, dim=-1).values.sort(-1).values)
    # ties (small integers) and one-dimensional input (BatchTopK ranks the flattened batch)
    t = torch.randint(0, 4, shape, generator=g).float()
    vals, idx = topk(t.flatten(), k)
    assert torch.equal(vals.sort().values, t.flatten().topk(k).values.sort().values)
    assert idx.unique().numel() == k


@pytest.mark.parametrize("n", [576, 585, 587, 600, 1000, 1023, 1025, 3 * 4096 + 7, 64, 65, 17])
@pytest.mark.parametrize("k", [1, 4, 16])
def test_grouped_topk_takes_the_fast_path_at_any_width_and_matches_torch_topk(n, k):
    """A width that is not a multiple of the group size (a parameter-matched CLT's 585 latents) used to
    fall back to torch.topk: 2x slower per step than 576. Values and indices equal torch.topk's (no ties)."""
    g = topk_groups(n, k)
    assert g == 1 or g**2 * k <= n < (2 * g) ** 2 * k
    t = torch.randn(9, n, generator=torch.Generator().manual_seed(n * 31 + k))
    vals, idx = topk(t, k)
    ref_vals, ref_idx = t.topk(k, dim=-1)
    order = vals.argsort(-1, descending=True)
    assert torch.equal(vals.gather(-1, order), ref_vals)
    assert torch.equal(idx.gather(-1, order), ref_idx)


def test_a_parameter_matched_clt_width_is_grouped_like_its_power_of_two_neighbour():
    assert topk_groups(585, 16) == topk_groups(576, 16) == 4
    t = torch.full((2, 585), -1.0)
    t[0, 584], t[1, 583] = 5.0, 7.0  # the largest entries in the tail beyond the groups
    vals, idx = topk(t, 1)
    assert idx.flatten().tolist() == [584, 583] and vals.flatten().tolist() == [5.0, 7.0]


@pytest.mark.parametrize("shape", [(3, 0), (0,), (0, 0)])
def test_topk_of_zero_columns_is_empty_and_k_beyond_the_columns_is_refused(shape):
    """Zero columns used to loop forever (every group size divides 0); k = 0 gives an empty result."""
    vals, idx = topk(torch.zeros(shape), 0)
    assert vals.shape == idx.shape == (*shape[:-1], 0)
    with pytest.raises(BadValueError, match=r"k=1 from 0 columns: k must be in 0..0"):
        topk(torch.zeros(shape), 1)
    with pytest.raises(BadValueError, match=r"k=5 from 4 columns"):
        topk(torch.zeros(2, 4), 5)


def test_encode_output_does_not_tie_the_support_into_the_graph():
    """Returning sup.pre itself made a C++ reference cycle (tensor -> node -> ctx -> support -> tensor)
    that leaked every training step's graph."""
    x, W_enc, b_enc, W_dec, h, sup = _problem()
    W_enc.requires_grad_()
    pre = SparseKernels.encode(x, W_enc, b_enc, sup)
    assert pre.grad_fn is not None and sup.pre.grad_fn is None and pre.data_ptr() != sup.pre.data_ptr()
