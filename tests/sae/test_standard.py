"""Standard SAE (ReLU + L1): both decoder-norm choices' losses and gradients against a hand computation."""

import pytest
import torch

from workbench.sae.architectures import build
from workbench.sae.config import SAEConfig

LAM = 0.3
X = torch.tensor([[0.4, -1.0, 0.2, 0.5], [0.9, 0.5, -0.3, 0.3], [-0.1, 0.2, 1.5, 0.45]], dtype=torch.float64)
B_ENC = torch.tensor([0.1, 0.2, -0.25, -0.35], dtype=torch.float64)
W_DEC = torch.tensor([[1.0, 0, 0, 0], [0, 3.0, 4.0, 0], [0, 0, 1.0, 1.0], [0.5, 0, 0, 0.5]], dtype=torch.float64)


def _sae(l1_decoder):
    cfg = SAEConfig(
        "standard",
        n_latents=4,
        input_norm="none",
        b_dec_init="zeros",
        encoder_init="transpose",
        kernel="dense",
        aux_alpha=0,
        l1_coef=LAM,
        l1_decoder=l1_decoder,
    ).resolve(4, 1000)
    sae = build(cfg).double()
    with torch.no_grad():
        sae.W_enc.copy_(torch.eye(4))
        sae.b_enc.copy_(B_ENC)
        sae.W_dec.copy_(W_DEC if l1_decoder == "weighted" else W_DEC / W_DEC.norm(dim=-1, keepdim=True))
    return sae


@pytest.mark.parametrize("l1_decoder", ["weighted", "unit"])
def test_loss_and_gradients_match_a_hand_computation(l1_decoder):
    sae = _sae(l1_decoder)
    assert sae.unit_norm_decoder == (l1_decoder == "unit")
    out = sae(X)
    W, B = sae.W_dec.detach(), X.shape[0]
    norms = W.norm(dim=-1) if l1_decoder == "weighted" else torch.ones(4, dtype=torch.float64)
    z = (X + B_ENC).relu()
    x_hat = z @ W
    assert set(out["losses"]) == {"recon", "l1_penalty"}
    assert out["losses"]["recon"].item() == pytest.approx((X - x_hat).pow(2).sum(-1).mean().item())
    assert out["losses"]["l1_penalty"].item() == pytest.approx(LAM * (z * norms).sum().item() / B)
    out["loss"].backward()
    want_W = -2 * z.T @ (X - x_hat) / B
    if l1_decoder == "weighted":  # the penalty's gradient to each row's norm: lambda/B sum_b z_bi w_i/||w_i||
        want_W = want_W + LAM / B * z.sum(0)[:, None] * W / norms[:, None]
    torch.testing.assert_close(sae.W_dec.grad, want_W)
    g_z = -2 * (X - x_hat) @ W.T / B + LAM / B * norms
    torch.testing.assert_close(sae.b_enc.grad, (g_z * (z > 0)).sum(0))
