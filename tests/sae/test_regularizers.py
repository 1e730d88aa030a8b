"""The Top-k regularisers are the formulas of docs/methods.md §1, on batch-active units, before the selection."""

import dataclasses

import pytest
import torch

from workbench.sae.architectures import build
from workbench.sae.config import SAEConfig

from .conftest import D_IN, feature_batches


def _sae(arch, **kw):
    cfg = SAEConfig(arch, k=4, n_latents=96, **kw).resolve(D_IN, 100_000)
    sae = build(cfg).double()
    x = next(feature_batches()).double()
    sae.init_from_batch(x)
    return sae, x


def _by_hand(sae, x):
    """(pre-activations h [B, n], support mask S, batch-active mask A) computed densely."""
    _, _, _, enc_in = sae._inputs(x)
    W_enc, b_enc, _ = sae.weights()
    h = enc_in @ W_enc.T + b_enc
    sup, _ = sae._select(enc_in, W_enc, b_enc)
    S = torch.zeros_like(h, dtype=torch.bool)
    S[sup.rows, sup.idx] = True
    return h, S, S.any(0)


@pytest.mark.parametrize("arch", ["topk", "batchtopk", "matryoshka"])
@pytest.mark.parametrize("kernel", ["sparse", "dense"])
def test_regulariser_values_are_the_documented_formulas(arch, kernel):
    sae, x = _sae(arch, reg_l1_off=0.3, reg_l1_l2=0.2, kernel=kernel)
    losses = sae(x)["losses"]
    h, S, A = _by_hand(sae, x)
    a, on = h.relu()[:, A], S[:, A]
    assert 0 < int(A.sum()) < sae.cfg.n_latents  # some latents are not batch-active: they must not count
    torch.testing.assert_close(losses["reg_l1_off"], 0.3 * (a * ~on).sum(-1).mean())
    torch.testing.assert_close(losses["reg_l1_l2"], 0.2 * (a.sum(-1) / a.norm(dim=-1)).mean())


def test_off_support_penalty_reaches_unselected_units_of_the_batch_active_set_only():
    """R1's gradient reaches the encoder rows of units that are active in the batch (including on tokens where
    they were not selected: before the selection) and never those of units no token selected."""
    sae, x = _sae("topk", reg_l1_off=1.0)
    plain = build(dataclasses.replace(sae.cfg, reg_l1_off=0.0)).double()
    plain.load_state_dict(sae.state_dict())
    grads = []
    for m in (sae, plain):
        m(x)["loss"].backward()
        grads.append(m.W_enc.grad.clone())
    h, S, A = _by_hand(sae, x)
    grad = (grads[0] - grads[1]).norm(dim=1)  # the penalty's own gradient
    off_and_positive = ((h > 0) & ~S)[:, A].any(0)
    assert (grad[A][off_and_positive] > 0).all()
    assert (grad[~A] == 0).all()


def test_batch_normalisation_divides_whole_batch_sums():
    sae, x = _sae("topk", reg_l1_off=0.3, reg_l1_l2=0.2, reg_normalisation="batch")
    losses = sae(x)["losses"]
    h, S, A = _by_hand(sae, x)
    a, on = h.relu()[:, A], S[:, A]
    torch.testing.assert_close(losses["reg_l1_off"], 0.3 * (a * ~on).sum() / a.numel())
    torch.testing.assert_close(losses["reg_l1_l2"], 0.2 * a.sum() / a.norm())
