"""Gated SAE: its three loss terms and the gradients each path receives, against a hand computation."""

import pytest
import torch

from workbench.sae.architectures import build
from workbench.sae.config import SAEConfig

LAM = 0.3
X = torch.tensor([[0.4, -1.0, 0.2, 0.5], [0.9, 0.5, -0.3, 0.3], [-0.1, 0.2, 1.5, 0.45]], dtype=torch.float64)
B_GATE = torch.tensor([0.1, 0.2, -0.25, -0.35], dtype=torch.float64)
R_MAG = torch.tensor([0.0, 0.5, -0.5, 0.2], dtype=torch.float64)
B_MAG = torch.tensor([0.0, -0.2, 0.1, -0.5], dtype=torch.float64)


def _sae():
    cfg = SAEConfig(
        "gated",
        n_latents=4,
        input_norm="none",
        b_dec_init="zeros",
        encoder_init="transpose",
        kernel="dense",
        aux_alpha=0,
        l1_coef=LAM,
    ).resolve(4, 1000)
    sae = build(cfg).double()
    with torch.no_grad():
        sae.W_enc.copy_(torch.eye(4))
        sae.b_enc.copy_(B_GATE)
        sae.r_mag.copy_(R_MAG)
        sae.b_mag.copy_(B_MAG)
        W = torch.tensor([[1.0, 0, 0, 0], [0, 3.0, 4.0, 0], [0, 0, 1.0, 1.0], [0.5, 0, 0, 0.5]])
        sae.W_dec.copy_(W / W.norm(dim=-1, keepdim=True))
    return sae


def test_losses_and_gradients_match_a_hand_computation():
    sae = _sae()
    out = sae(X)
    W, B = sae.W_dec.detach(), X.shape[0]
    pi = X + B_GATE  # the gate pre-activation (W_enc = I, b_dec = 0)
    mag = torch.exp(R_MAG) * X + B_MAG
    z = (pi > 0) * mag.relu()
    x_hat = z @ W
    frozen = pi.relu() @ W
    assert out["losses"]["recon"].item() == pytest.approx((X - x_hat).pow(2).sum(-1).mean().item())
    assert out["losses"]["l1_penalty"].item() == pytest.approx(LAM * pi.relu().sum().item() / B)  # unit rows
    assert out["losses"]["gate_recon"].item() == pytest.approx((X - frozen).pow(2).sum(-1).mean().item())
    out["loss"].backward()
    g_z = -2 * (X - x_hat) @ W.T / B
    # the decoder learns from the main reconstruction only (the gate's is through a frozen copy)
    torch.testing.assert_close(sae.W_dec.grad, -2 * z.T @ (X - x_hat) / B)
    on = (pi > 0) & (mag > 0)
    torch.testing.assert_close(sae.r_mag.grad, (g_z * on * torch.exp(R_MAG) * X).sum(0))
    torch.testing.assert_close(sae.b_mag.grad, (g_z * on).sum(0))
    # the gate bias: the L1 and the frozen-decoder reconstruction, never the magnitude path
    g_gate = LAM / B + (-2 * (X - frozen) @ W.T / B)
    torch.testing.assert_close(sae.b_enc.grad, (g_gate * (pi > 0)).sum(0))


def test_inference_codes_and_the_equal_jumprelu():
    sae = _sae()
    pi, mag = X + B_GATE, torch.exp(R_MAG) * X + B_MAG
    torch.testing.assert_close(sae.encode(X), (pi > 0) * mag.relu())
    W_enc, b_enc, theta = sae.jumprelu_form()
    h = X @ W_enc.T + b_enc
    torch.testing.assert_close(sae.encode(X), h.relu() * (h > theta))
