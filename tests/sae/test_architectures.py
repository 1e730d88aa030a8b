"""Every architecture trains, its sparse path matches the dense reference, and AuxK reaches W_enc."""

import pytest
import torch

from workbench.sae import base
from workbench.sae.architectures import build
from workbench.sae.config import ARCHITECTURES, THRESHOLD_BLOCK_ARCHITECTURES, SAEConfig, TrainConfig
from workbench.sae.trainer import Trainer, run_steps

from .conftest import D_IN, feature_batches


def _cfg(arch, **kw):
    kw = {"k": 4, "n_latents": 96, "block_size": 3, "n_active_blocks": 4, "block_l0_coef": 0.3, **kw}
    return SAEConfig(arch, **kw).resolve(D_IN, 100_000)


def _pair(arch, **kw):
    x = next(feature_batches())
    saes = []
    for kernel in ("sparse", "dense"):
        sae = build(_cfg(arch, kernel=kernel, **kw)).double()
        sae.init_from_batch(x)
        saes.append(sae)
    return x.double(), saes


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("extras", [{}, {"scaffold_rank": 4}])
def test_sparse_and_dense_kernels_agree(arch, extras):
    if arch in ("topk", "batchtopk", "matryoshka"):
        extras = {**extras, "reg_l1_off": 0.1, "reg_l1_l2": 0.2}
    x, (sparse, dense) = _pair(arch, **extras)
    dead = torch.zeros(sparse.cfg.n_units, dtype=torch.bool)
    dead[::3] = True  # AuxK on
    outs = [sae(x, dead) for sae in (sparse, dense)]
    torch.testing.assert_close(outs[0]["loss"], outs[1]["loss"])
    assert set(outs[0]["losses"]) >= {"aux"}
    for o in outs:
        o["loss"].backward()
    for (name, p), q in zip(sparse.named_parameters(), dense.parameters()):
        if p.requires_grad:
            torch.testing.assert_close(p.grad, q.grad, msg=f"{arch}: gradient of {name} differs")


@pytest.mark.parametrize("arch", ["topk", "block_topk"])
@pytest.mark.parametrize("n_dead", [5, 90])  # 90 dead latents: all selected by AuxK / a few of them
def test_auxk_dense_over_dead_rows_matches_the_sparse_kernels(arch, n_dead, monkeypatch):
    x, (sae, _) = _pair(arch, aux_k=6)
    dead = torch.zeros(sae.cfg.n_units, dtype=torch.bool)
    dead[torch.randperm(sae.cfg.n_units, generator=torch.Generator().manual_seed(0))[: n_dead // sae.u]] = True
    runs = []
    for ratio in (0, 10**9):  # always sparse, always dense
        monkeypatch.setattr(base, "AUXK_DENSE_RATIO", ratio)
        sae.zero_grad()
        out = sae(x, dead)
        out["loss"].backward()
        runs.append([out["losses"]["aux"]] + [p.grad.clone() for p in sae.parameters() if p.grad is not None])
    for i, (a, b) in enumerate(zip(*runs)):
        torch.testing.assert_close(a, b, msg=f"item {i}")


@pytest.mark.parametrize("arch", ["topk", "block_topk"])
def test_auxk_gradient_reaches_the_encoder(arch):
    x, (sae, _) = _pair(arch)
    dead = torch.zeros(sae.cfg.n_units, dtype=torch.bool)
    dead[: sae.cfg.n_units // 2] = True
    aux = sae(x, dead)["loss"] - sae(x, None)["loss"]  # the AuxK term alone
    aux.backward()
    dead_rows = sae.expand_units(dead[None])[0]
    g = sae.W_enc.grad.abs()
    assert g[dead_rows].max() > 0
    # only dead latents take part in AuxK; live rows keep the rounding of the two passes' difference
    assert g[~dead_rows].max() <= 1e-12 * g[dead_rows].max()


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_each_architecture_learns_and_inference_matches_training_rule(arch):
    tr = Trainer(
        [_cfg(arch, scaffold_rank=2)],
        TrainConfig(n_tokens=128 * 100, batch_size=128, lr=3e-3, warmup_steps=5, progress=False),
    )
    run_steps(tr, feature_batches(), 100)
    tr.log_point()
    sae, row = tr.saes[0], tr.curves[0][-1]
    assert row["fvu"] < 0.5, row
    x = next(feature_batches(500))
    z = sae.encode(x)
    if sae.cfg.is_block:  # whole blocks are active or not
        active = z.view(z.shape[0], -1, sae.cfg.block_size).ne(0).any(-1)
        if arch not in THRESHOLD_BLOCK_ARCHITECTURES:
            assert (active.sum(-1) == sae.cfg.n_active_blocks).all()
    elif arch == "topk":
        assert (z.ne(0).sum(-1) <= sae.cfg.k).all()
    elif arch == "jumprelu":  # each latent fires above its own threshold
        theta = sae.theta.detach().expand_as(z)
        assert (z[z != 0] > theta[z != 0]).all()
    elif arch in ("gated", "standard"):  # ReLU codes
        assert (z >= 0).all() and z.ne(0).any()
    else:  # BatchTopK at inference: a JumpReLU at theta
        assert float(sae.threshold) > 0 and (z[z != 0] > float(sae.threshold)).all()
    recon = sae.reconstruct(x)
    fvu = (x - recon).pow(2).sum() / (x - x.mean(0)).pow(2).sum()
    assert fvu < 0.6


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_row_chunked_selection_matches_one_pass(arch, monkeypatch):
    """On the CPU the encoder runs in row chunks; the losses and gradients must not depend on it."""
    x, (sae, _) = _pair(arch)
    if hasattr(sae, "raw_theta"):  # theta starts exactly at a block norm (a pre-activation): move it off that tie
        sae.raw_theta.data += 1e-3
    dead = torch.zeros(sae.cfg.n_units, dtype=torch.bool)
    dead[1::4] = True
    runs = []
    for rows in (10_000, 7):
        monkeypatch.setattr(base, "ENCODE_ROWS", rows)
        sae.zero_grad()
        out = sae(x, dead)
        out["loss"].backward()
        runs.append(
            [out["loss"].detach(), sae.encode(x)] + [p.grad.clone() for p in sae.parameters() if p.grad is not None]
        )
    assert len(runs[0]) == len(runs[1]) > 3
    for i, (a, b) in enumerate(zip(*runs)):
        torch.testing.assert_close(a, b, msg=f"item {i}")


@pytest.mark.parametrize("theta", [0.05, 1e6])  # enough chunk candidates / too few (whole-batch fallback)
def test_batchtopk_chunk_candidates_give_the_exact_batch_top_k(theta, monkeypatch):
    x, (sae, _) = _pair("batchtopk")
    monkeypatch.setattr(base, "ENCODE_ROWS", 7)
    sae.threshold.fill_(theta)
    _, _, _, enc_in = sae._inputs(x)
    sup, _ = sae._select(enc_in, sae.W_enc, sae.b_enc)
    with torch.no_grad():
        h = enc_in @ sae.W_enc.T + sae.b_enc
    K = sae.cfg.k * x.shape[0]
    kept = torch.zeros_like(h, dtype=torch.bool).flatten()
    kept[h.flatten().topk(K).indices] = True
    rows, idx = (kept.view_as(h) & (h > 0)).nonzero(as_tuple=True)
    n_candidates = int((h > theta * sae.candidate_fraction).sum())
    assert (n_candidates >= K) == (theta < 1)  # theta 0.05 takes the candidate path, 1e6 the fallback
    assert torch.equal(sup.rows, rows) and torch.equal(sup.idx, idx)
    torch.testing.assert_close(sup.pre, h[rows, idx])


def test_encoder_init_fit_gives_the_least_squares_scale():
    x = next(feature_batches())
    fit, plain = build(_cfg("topk")), build(_cfg("topk", encoder_init="transpose"))
    for sae in (fit, plain):
        sae.init_from_batch(x)
    c = float(fit.encoder_init_scale)
    assert float(plain.encoder_init_scale) == 1.0 and c != 1.0
    torch.testing.assert_close(fit.W_enc, plain.W_enc * c)

    def mse(scale):
        with torch.no_grad():
            plain.W_enc.mul_(scale)
            out = float(plain(x)["stats"]["mse"])
            plain.W_enc.div_(scale)
        return out

    assert mse(c) < mse(1.0) and mse(c) < mse(c * 1.1) and mse(c) < mse(c * 0.9)


def test_group_lasso_codes_are_block_soft_thresholded():
    x = next(feature_batches())
    sae = build(_cfg("group_lasso"))
    sae.init_from_batch(x)
    sae.eval()
    z = sae.encode(x).view(x.shape[0], -1, 3)
    with torch.no_grad():
        xs = x * sae.input_scale
        a = ((xs - sae.b_dec) @ sae.W_enc.T + sae.b_enc).view(x.shape[0], -1, 3)
        expected = a * (1 - sae.theta / a.norm(dim=-1)).clamp_min(0).unsqueeze(-1)
    torch.testing.assert_close(z, expected)
    assert 0 < int(z.norm(dim=-1).gt(0).sum(-1).float().mean()) < z.shape[1]
    sae.train()
    assert set(sae(x)["losses"]) == {"recon", "group_lasso_penalty"}


def test_decoder_units_stay_unit_norm():
    tr = Trainer([_cfg("topk"), _cfg("block_topk")], TrainConfig(n_tokens=128 * 20, batch_size=128, progress=False))
    run_steps(tr, feature_batches(), 20)
    torch.testing.assert_close(tr.saes[0].W_dec.norm(dim=-1), torch.ones(96))
    torch.testing.assert_close(tr.saes[1].W_dec.view(32, -1).norm(dim=-1), torch.ones(32))


def test_grassmannian_frames_are_orthonormal():
    sae = build(_cfg("grassmannian"))
    _, _, W_dec = sae.weights()
    frames = W_dec.view(32, 3, D_IN)
    torch.testing.assert_close(frames @ frames.transpose(1, 2), torch.eye(3).expand(32, 3, 3), atol=1e-5, rtol=0)


def test_matryoshka_prefix_losses_match_a_manual_computation():
    x = next(feature_batches())
    prefixes = [12, 24, 48, 96]
    losses = {}
    for w in ("sum", "mean", "mean_with_bias"):
        sae = build(_cfg("matryoshka", prefixes=prefixes, prefix_weighting=w))
        sae.init_from_batch(x)
        losses[w] = float(sae(x)["losses"]["matryoshka_mse"])
    with torch.no_grad():  # the training rule: one global top-(k*B) over the batch
        xs = x * sae.input_scale
        h = (xs - sae.b_dec) @ sae.W_enc.T + sae.b_enc
        flat = h.relu().flatten()
        z = torch.zeros_like(flat).scatter(0, flat.topk(4 * x.shape[0]).indices, flat.topk(4 * x.shape[0]).values)
        z = z.view_as(h)
        per = [((xs - (z[:, :m] @ sae.W_dec[:m] + sae.b_dec)) ** 2).sum(-1).mean() for m in prefixes]
        bias_only = ((xs - sae.b_dec) ** 2).sum(-1).mean()
    assert losses["sum"] == pytest.approx(float(sum(per)), rel=1e-4)
    assert losses["mean"] == pytest.approx(float(sum(per)) / 4, rel=1e-4)
    assert losses["mean_with_bias"] == pytest.approx(float(sum(per) + bias_only) / 5, rel=1e-4)


def test_geometric_median_init_is_robust_to_outliers():
    x = torch.randn(200, D_IN) + 1.0
    x[:5] += 1000.0
    gm = build(_cfg("topk", input_norm="none", b_dec_init="geometric_median"))
    mean = build(_cfg("topk", input_norm="none", b_dec_init="mean"))
    gm.init_from_batch(x)
    mean.init_from_batch(x)
    assert (gm.b_dec - 1.0).abs().max() < 0.5 < (mean.b_dec - 1.0).abs().max()


def test_input_scaling_makes_mean_norm_sqrt_d():
    x = next(feature_batches()) * 50
    sae = build(_cfg("topk"))
    sae.init_from_batch(x)
    assert abs(float((x * sae.input_scale).norm(dim=-1).mean()) - D_IN**0.5) < 1e-3


def test_scaffold_pca_init_spans_top_components():
    x = next(feature_batches())
    sae = build(_cfg("topk", scaffold_rank=3, scaffold_init="pca"))
    sae.init_from_batch(x)
    xc = (x * sae.input_scale - sae.b_dec).detach()
    _, _, vh = torch.linalg.svd(xc - xc.mean(0), full_matrices=False)
    U = sae.scaffold.U.detach()
    torch.testing.assert_close(U @ U.T, vh[:3].T @ vh[:3], atol=1e-4, rtol=0)


def _curve_400_steps(cfg) -> list[dict]:
    """The logged rows (every 50 steps) of 400 steps at a constant learning rate."""
    tr = Trainer(
        [cfg],
        TrainConfig(
            n_tokens=128 * 400, batch_size=128, lr=3e-3, warmup_steps=5, decay_frac=0, log_every=50, progress=False
        ),
    )
    for _ in range(8):
        run_steps(tr, feature_batches(tr.step), 50)
        tr.log_point()
    return tr.curves[0]


@pytest.mark.parametrize("arch", THRESHOLD_BLOCK_ARCHITECTURES)
def test_target_l0_controller_holds_the_l0_where_a_fixed_coefficient_drifts(arch):
    """Both start at 4 blocks = 12 latents per token; the target is 6. With a fixed lambda the L0 ends
    wherever the loss balance puts it; each architecture's default controller (group lasso: lambda;
    block JumpReLU: the thresholds) brings the batch L0 to the target."""
    target, coef = 6.0, {"group_lasso": {"group_lasso_coef": 0.01}, "block_jumprelu": {"block_l0_coef": 1.0}}[arch]
    runs = {
        name: _curve_400_steps(_cfg(arch, **coef, **extra))
        for name, extra in (("fixed", {}), ("controlled", {"target_l0": target, "l0_control_rate": 0.05}))
    }
    last = [r["l0"] for r in runs["controlled"][-2:]]
    assert all(abs(v - target) < 0.15 * target for v in last), runs["controlled"]
    assert abs(runs["fixed"][-1]["l0"] - target) > 0.5 * target, runs["fixed"]
    (start,) = coef.values()
    if arch == "group_lasso":  # the log controller's moving coefficient is recorded
        assert runs["controlled"][-1]["sparsity_coef"] != start
    assert all(r["sparsity_coef"] == start for r in runs["fixed"])


def test_threshold_controller_lifts_block_jumprelu_l0_where_a_lambda_controller_cannot():
    """From 12 latents a token to a target of 24: the log controller drives lambda toward zero, but Adam moves
    the thresholds too slowly and L0 stays short; scaling the thresholds reaches the target, lambda fixed."""
    target = 24.0
    last = {
        ctl: _curve_400_steps(
            _cfg("block_jumprelu", block_l0_coef=1.0, target_l0=target, l0_control=ctl, l0_control_rate=0.05)
        )[-1]
        for ctl in ("log", "threshold")
    }
    assert last["log"]["l0"] < 0.8 * target and last["log"]["sparsity_coef"] < 0.1, last
    assert abs(last["threshold"]["l0"] - target) < 0.15 * target and last["threshold"]["sparsity_coef"] == 1.0, last


@pytest.mark.parametrize("arch", ["topk", "block_topk"])
def test_auxk_on_a_row_fraction_equals_the_hand_computation(arch):
    """aux_rows=0.25: AuxK is the normalised residual fit of the top aux_k dead units over the batch's first
    quarter of rows only, and the sparse kernels' gradients match the dense reference's."""
    x, saes = _pair(arch, aux_k=6, aux_rows=0.25)
    n = saes[0].aux_rows(x.shape[0])
    assert n == 32
    dead = torch.zeros(saes[0].cfg.n_units, dtype=torch.bool)
    dead[::2] = True
    for sae in saes:
        out = sae(x, dead)
        out["loss"].backward()
        aux = out["losses"]["aux"] / sae.cfg.aux_alpha
        with torch.no_grad():  # by hand: dense pre-activations, the top dead units per row, their decode
            xs, _, s, enc_in = sae._inputs(x)
            W_enc, b_enc, W_dec = sae.weights()
            h = enc_in[:n] @ W_enc.T + b_enc
            scores = sae.unit_scores(h).masked_fill(~dead, -float("inf"))
            top = scores.topk(6 // sae.u, dim=1).indices
            on = sae.expand_units(torch.zeros_like(scores, dtype=torch.bool).scatter_(1, top, True))
            sup, _ = sae._select(enc_in, W_enc, b_enc)  # the main code, as the step builds it
            vals, _ = sae.activate(sup.pre, sup)
            e = (sae._target(x, xs) - sae._base(xs, s) - sae.kern.decode(vals, W_dec, sup))[:n]
            e_hat = ((h if sae.signed else h.relu()) * on) @ W_dec
            want = (e - e_hat).pow(2).sum() / (e - e.mean(0)).pow(2).sum()
        torch.testing.assert_close(aux, want)
    for (name, p), q in zip(saes[0].named_parameters(), saes[1].parameters()):
        if p.requires_grad:
            torch.testing.assert_close(p.grad, q.grad, msg=f"{arch}: gradient of {name} differs")
