"""JumpReLU SAE: both recipes' losses and threshold gradients against a hand computation."""

import pytest
import torch
import torch.nn.functional as F

from workbench.sae.architectures import build
from workbench.sae.config import SAEConfig

EPS, LAM, THETA = 0.2, 0.5, 0.5


def _sae(recipe, **kw):
    """d = n = 4, W_enc = I and no bias or centring, so the pre-activations are x itself."""
    cfg = SAEConfig(
        "jumprelu",
        k=2,
        n_latents=4,
        input_norm="none",
        b_dec_init="zeros",
        encoder_init="transpose",
        kernel="dense",
        aux_alpha=0,
        l0_coef=LAM,
        jumprelu_bandwidth=EPS,
        jumprelu_recipe=recipe,
        pre_act_coef=0.1,
        **kw,
    ).resolve(4, 1000)
    sae = build(cfg).double()
    with torch.no_grad():
        sae.W_enc.copy_(torch.eye(4))
        sae.W_dec.copy_(torch.tensor([[1.0, 0, 0, 0], [0, 2.0, 0, 0], [0, 0, 1.0, 1.0], [0.5, 0, 0, 0]]))
        sae.raw_theta.fill_(THETA + torch.log(-torch.expm1(torch.tensor(-THETA))).item())  # softplus^-1
    return sae


# 0.45 and 0.55 lie inside the rectangle |h - theta| < eps/2; 0.45 is below theta (code 0), 0.55 above
X = torch.tensor([[0.45, 1.0, 0.2, 0.55], [0.9, 0.55, 0.0, 0.3], [0.1, 0.2, 1.5, 0.45]], dtype=torch.float64)


def _hand(sae):
    """(z, x_hat, window K, dloss_recon/dz) by hand."""
    W = sae.W_dec.detach()
    z = X * (X > THETA)
    x_hat = z @ W
    K = ((X - THETA).abs() < EPS / 2).double()
    g_z = -2 * (X - x_hat) @ W.T / X.shape[0]
    return z, x_hat, K, g_z


def test_rajamanoharan2024_loss_and_threshold_gradient():
    sae = _sae("rajamanoharan2024")
    out = sae(X)
    z, x_hat, K, g_z = _hand(sae)
    B = X.shape[0]
    assert out["losses"]["recon"].item() == pytest.approx((X - x_hat).pow(2).sum(-1).mean().item())
    assert out["losses"]["l0_penalty"].item() == pytest.approx(LAM * (X > THETA).sum().item() / B)
    assert set(out["losses"]) == {"recon", "l0_penalty"}
    out["loss"].backward()
    # JumpReLU: -(theta/eps) K per entry; the L0 step: -(1/eps) K per entry, times lambda / B
    d_theta = (g_z * -(THETA / EPS) * K).sum(0) + LAM / B * (-K / EPS).sum(0)
    sig = torch.sigmoid(sae.raw_theta.detach())  # d softplus / d raw
    torch.testing.assert_close(sae.raw_theta.grad, d_theta * sig)
    # the encoder sees only H(h - theta): no rectangle term reaches the pre-activation
    torch.testing.assert_close(sae.b_enc.grad, (g_z * (X > THETA)).sum(0))


def test_anthropic2025_loss_and_gradients():
    c = 4.0
    sae = _sae("anthropic2025", tanh_c=c)
    assert not sae.unit_norm_decoder
    out = sae(X)
    z, x_hat, K, g_z = _hand(sae)
    B = X.shape[0]
    norms = sae.W_dec.detach().norm(dim=-1)
    t = torch.tanh(c * z * norms)
    assert out["losses"]["l0_penalty"].item() == pytest.approx(LAM * t.sum().item() / B)
    below = (THETA - X).relu() * norms
    assert out["losses"]["pre_act_penalty"].item() == pytest.approx(0.1 * below.sum().item() / B)
    out["loss"].backward()
    g_vals = g_z + LAM / B * c * norms * (1 - t**2)  # through the codes: reconstruction and tanh penalty
    # the pseudo-derivative reaches the pre-activation: H + (theta/eps) K; the pre-activation penalty pulls h up
    want_b = (g_vals * ((X > THETA) + THETA / EPS * K)).sum(0) - 0.1 / B * (norms * (X < THETA)).sum(0)
    torch.testing.assert_close(sae.b_enc.grad, want_b)
    want_theta = (g_vals * -(THETA / EPS) * K).sum(0) + 0.1 / B * (norms * (X < THETA)).sum(0)
    torch.testing.assert_close(sae.raw_theta.grad, want_theta * torch.sigmoid(sae.raw_theta.detach()))


def test_inference_codes_are_the_jumprelu_and_theta_starts_at_the_target_l0():
    sae = _sae("rajamanoharan2024")
    torch.testing.assert_close(sae.encode(X), X * (X > THETA))
    cfg = SAEConfig("jumprelu", n_latents=64, target_l0=5.0).resolve(16, 1000)
    x = torch.randn(400, 16, generator=torch.Generator().manual_seed(0))
    sae = build(cfg)
    sae.init_from_batch(x)
    l0 = (sae.encode(x) != 0).sum(-1).double().mean().item()
    assert l0 == pytest.approx(5.0, abs=0.05)
    assert torch.equal(sae.theta, F.softplus(sae.raw_theta))
