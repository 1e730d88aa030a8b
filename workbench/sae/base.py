"""What every SAE architecture shares: the training step, AuxK, unit-norm decoder, initialisation.

An architecture supplies how latents are chosen (`select`), what the chosen pre-activations
become (`activate`), and optionally its own weights (`weights`) and reconstruction loss. The rest
(input scaling, b_dec, the scaffold, AuxK, the regularisers, the sparse kernels) lives here once.

Layout: W_enc [n_latents, d_in] and W_dec [n_latents, d_out] (one row per latent) so both sparse
products gather rows; the SAELens export transposes W_enc.

A transcoder (cfg.transcoder, docs/methods.md §10) is the same machinery with a target: a training
batch is [x | y] (the input hook's row, then the target's), the encoder reads x centred by a fixed
b_in, everything else (b_dec, the decoder, the scaffold's U, the loss, AuxK, FVU) lives in y's space,
and a skip transcoder adds W_skip x (starting at zero) to the reconstruction. Inputs and targets each
get their own scale (input_scale, output_scale).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from workbench.errors import ConfigError
from workbench.sae.config import TOPK_FAMILY, SAEConfig
from workbench.sae.kernels import KERNELS, Support, topk
from workbench.sae.regularizers import topk_regularisers
from workbench.sae.scaffold import Scaffold

ENCODE_ROWS = 512  # CPU: rows of pre-activations per chunk, so each chunk of h is still in cache when selected
# AuxK runs dense over the dead latents' rows when there are at most this many per AuxK latent: six
# B x dead x d matmuls then cost less than the five gathers of B x aux_k rows the sparse kernels do
# (measured at d 768: dense wins up to about 6 dead latents per aux_k)
AUXK_DENSE_RATIO = 4


def geometric_median(x: torch.Tensor, iters: int = 100, eps: float = 1e-6) -> torch.Tensor:
    """Weiszfeld's algorithm: robust to the outlier tokens that drag the mean."""
    x = x.double()
    m = x.mean(0)
    for _ in range(iters):
        w = 1 / (x - m).norm(dim=-1).clamp_min(eps)
        new = (w[:, None] * x).sum(0) / w.sum()
        if (new - m).norm() < eps * (1 + m.norm()):
            m = new
            break
        m = new
    return m


class SparseAutoencoder(nn.Module):
    signed = False  # codes keep their sign (block architectures) instead of passing a ReLU
    unit_norm_decoder = True  # rows (or blocks) of W_dec renormalised after every step

    def __init__(self, cfg: SAEConfig):
        super().__init__()
        if cfg.d_in is None or cfg.n_latents is None or cfg.name is None:
            raise ValueError("SAE configs must be resolved against the data first: cfg.resolve(d_in, n_tokens)")
        self.cfg = cfg
        self.kern = KERNELS[cfg.kernel]
        self.u = cfg.unit_size
        gen = torch.Generator().manual_seed(cfg.seed)
        self.d_out = cfg.out_width
        self.b_dec = nn.Parameter(torch.zeros(self.d_out))
        self.register_buffer("input_scale", torch.ones(()))
        self.register_buffer("encoder_init_scale", torch.ones(()))  # what encoder_init="fit" chose, for the record
        self.W_skip = nn.Parameter(torch.zeros(self.d_out, cfg.d_in)) if cfg.skip else None
        if cfg.transcoder:
            self.register_buffer("b_in", torch.zeros(cfg.d_in))  # the input's centre (b_dec's role in an SAE)
            self.register_buffer("output_scale", torch.ones(()))
        r = cfg.scaffold_rank
        self.scaffold = Scaffold(cfg.d_in, r, cfg.scaffold_trainable, self.d_out) if r else None
        self.init_dictionary(gen)
        self._gen = gen

    # ---- what an architecture provides -------------------------------------------------------
    def init_dictionary(self, gen: torch.Generator) -> None:
        n = self.cfg.n_latents
        w = self._unit_rows(torch.randn(n, self.d_out, generator=gen))
        self.W_dec = nn.Parameter(w)
        # an SAE's W_enc starts as W_dec^T; a transcoder's reads another space, so it starts as its own random rows
        enc = self._unit_rows(torch.randn(n, self.cfg.d_in, generator=gen)) if self.cfg.transcoder else w.clone()
        self.W_enc = nn.Parameter(enc)
        self.b_enc = nn.Parameter(torch.zeros(n))

    def _unit_rows(self, w: torch.Tensor) -> torch.Tensor:
        """Each unit (row, or block of rows) scaled to unit norm."""
        v = w.view(self.cfg.n_units, -1)
        return (v / v.norm(dim=-1, keepdim=True)).view_as(w)

    def weights(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.W_enc, self.b_enc, self.W_dec

    def select(self, h: torch.Tensor) -> Support:
        """The (token, latent) pairs that fire, from the no-grad pre-activations h [rows, n_latents]."""
        raise NotImplementedError

    def finish_select(self, sup: Support, enc_in, W_enc, b_enc) -> Support:
        """The batch's selection from the chunks' supports (BatchTopK: a batch-wide top-k of candidates)."""
        return sup

    def init_select(self, h: torch.Tensor) -> Support:
        """The selection used to fit the encoder scale at initialisation."""
        return self.select(h)

    def scale_encoder(self, c: float) -> None:
        self.W_enc.mul_(c)

    def activate(self, pre: torch.Tensor, sup: Support) -> tuple[torch.Tensor, dict]:
        """Code values of the selected pairs, plus any loss terms the activation adds."""
        return (pre if self.signed else pre.relu()), {}

    def reconstruction(self, xs, base, vals, W_dec, sup) -> tuple[dict, torch.Tensor]:
        """Loss terms and the full reconstruction; Matryoshka replaces this with prefix losses."""
        x_hat = base + self.kern.decode(vals, W_dec, sup)
        return {"recon": (xs - x_hat).pow(2).sum(-1).mean()}, x_hat

    # ---- shared machinery --------------------------------------------------------------------
    def unit_scores(self, h: torch.Tensor) -> torch.Tensor:
        """[B, n_units]: a latent's pre-activation, or a block's norm."""
        if self.u == 1:
            return h
        return h.view(h.shape[0], -1, self.u).norm(dim=-1)

    def expand_units(self, mask: torch.Tensor) -> torch.Tensor:
        return mask if self.u == 1 else mask.repeat_interleave(self.u, dim=1)

    def split(self, batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(input, target) of a training batch: [x | y] for a transcoder, x itself for an SAE."""
        if not self.cfg.transcoder:
            return batch, batch
        d = self.cfg.d_in
        if batch.shape[-1] != d + self.d_out:
            raise ConfigError(
                f"transcoder {self.cfg.name!r} expects rows of width d_in + d_out = {d} + {self.d_out}, "
                f"got {batch.shape[-1]}"
            )
        return batch[:, :d], batch[:, d:]

    def _centre(self) -> torch.Tensor:
        return self.b_in if self.cfg.transcoder else self.b_dec

    def _inputs(self, x: torch.Tensor):
        """(scaled input, centred input, scaffold output, encoder input) of an input batch x [B, d_in]."""
        xs = x * self.input_scale.to(x.dtype)
        xc = xs - self._centre().to(x.dtype)
        s = self.scaffold(xc) if self.scaffold is not None else None
        enc_in = xc - s if s is not None and self.cfg.scaffold_encoder_input == "residual" else xc
        return xs, xc, s, enc_in

    def _target(self, y: torch.Tensor, xs: torch.Tensor) -> torch.Tensor:
        """What the dictionary reconstructs, in training units."""
        return y * self.output_scale.to(y.dtype) if self.cfg.transcoder else xs

    def _base(self, xs: torch.Tensor, s: torch.Tensor | None) -> torch.Tensor:
        """The reconstruction before the sparse code: b_dec, the scaffold's output and the skip path."""
        base = self.b_dec.expand(xs.shape[0], -1)
        if s is not None:
            base = base + s
        if self.W_skip is not None:
            base = base + xs @ self.W_skip.to(xs.dtype).T
        return base

    def _preacts(self, enc_in, W_enc, b_enc, out: torch.Tensor | None = None) -> torch.Tensor:
        with torch.no_grad():
            return torch.addmm(
                b_enc.detach().to(enc_in.dtype), enc_in.detach(), W_enc.detach().T.to(enc_in.dtype), out=out
            )

    def _select(self, enc_in, W_enc, b_enc, dead_mask=None, select=None) -> tuple[Support, Support | None]:
        """The one dense product, in row chunks on the CPU: each chunk of h is selected from (and
        AuxK's dead units ranked) while still in cache, so the B x n matrix never goes to memory."""
        B, cpu = enc_in.shape[0], enc_in.device.type == "cpu"
        step = ENCODE_ROWS if cpu else B
        # CPU: one buffer for every chunk (no fresh pages per chunk). Not on a GPU: an op with out=
        # is exempt from autocast, so the matmul would stay fp32 there.
        buf = torch.empty(min(step, B), W_enc.shape[0], dtype=enc_in.dtype) if cpu else None
        dead = dead_mask.nonzero().squeeze(1) if dead_mask is not None else None
        n_aux = self.aux_rows(B)
        sups, auxs = [], []
        for start in range(0, B, step):
            chunk = enc_in[start : start + step]
            h = self._preacts(chunk, W_enc, b_enc, buf[: len(chunk)] if cpu else None)
            sups.append((select or self.select)(h))
            if dead is not None and start < n_aux:
                auxs.append(self._aux_select(h[: n_aux - start], dead))
        sup = self.finish_select(Support.cat(sups), enc_in, W_enc, b_enc)
        return sup, Support.cat(auxs) if auxs else None

    def forward(self, batch: torch.Tensor, dead_mask: torch.Tensor | None = None) -> dict:
        """One training step's losses and statistics for a batch [B, d_in] ([B, d_in + d_out] for a
        transcoder; original units)."""
        cfg = self.cfg
        x, y = self.split(batch)
        xs, xc, s, enc_in = self._inputs(x)
        ts = self._target(y, xs)
        W_enc, b_enc, W_dec = self.weights()
        use_aux = dead_mask is not None and cfg.aux_alpha and bool(dead_mask.any())
        sup, aux_sup = self._select(enc_in, W_enc, b_enc, dead_mask if use_aux else None)
        enc_in, b_enc = self._grad_operands(xs, xc, enc_in, W_enc, b_enc)
        pre = self.kern.encode(enc_in, W_enc, b_enc, sup)
        vals, losses = self.activate(pre, sup)
        recon_terms, x_hat = self.reconstruction(ts, self._base(xs, s), vals, W_dec, sup)
        losses.update(recon_terms)
        e = ts - x_hat
        if aux_sup is not None:
            losses["aux"] = cfg.aux_alpha * self._auxk(enc_in, e, aux_sup, W_enc, b_enc, W_dec, dead_mask)
        if cfg.architecture in TOPK_FAMILY and (cfg.reg_l1_off or cfg.reg_l1_l2):
            losses.update(self._regularisers(enc_in, W_enc, b_enc, sup))
        losses.update(self.dense_terms(enc_in, W_enc, b_enc, sup))
        loss = sum(losses.values())
        with torch.no_grad():
            fired = vals.detach() != 0
            stats = {
                "mse": e.detach().float().pow(2).sum(-1).mean(),
                "fvu": e.detach().float().pow(2).sum() / (ts - ts.mean(0)).float().pow(2).sum().clamp_min(1e-12),
                "l0": fired.sum().float() / x.shape[0],
                "unit_fires": self._unit_fires(sup, fired),
            }
            if self.u > 1:
                stats["block_l0"] = stats["unit_fires"].sum().float() / x.shape[0]
            stats.update(self.extra_stats(vals, sup))
        return {"loss": loss, "losses": {k: v.detach() for k, v in losses.items()}, "stats": stats}

    def _grad_operands(self, xs, xc, enc_in, W_enc, b_enc) -> tuple[torch.Tensor, torch.Tensor]:
        """The (input, bias) the encoder's gradients flow through once the support is chosen.

        When the input is just xc = xs - b_dec (`_inputs` chose no scaffold residual), b_dec moves into the
        bias: W(xs - b_dec) + b_enc = W xs + (b_enc - W b_dec) (a transcoder's fixed b_in likewise). The gradients are the same, but b_dec's is one
        n x d matvec instead of a B x d input gradient gathered from every selected encoder row (AuxK's 384
        a token)."""
        if enc_in is not xc or xs.requires_grad or self.kern.name != "sparse":  # dense: the plain reference
            return enc_in, b_enc
        return xs.to(enc_in.dtype), b_enc - W_enc @ self._centre().to(W_enc.dtype)

    def extra_stats(self, vals, sup) -> dict:
        return {}

    def inference_threshold(self) -> torch.Tensor:
        """[n_latents] the threshold of the JumpReLU this SAE saves as (0: ReLU; unused by a Top-k rule)."""
        return torch.zeros(self.cfg.n_latents, device=self.b_dec.device)

    def dense_terms(self, enc_in, W_enc, b_enc, sup: Support) -> dict:
        """Loss terms over every latent's pre-activation (JumpReLU's pre-activation penalty); none by default."""
        return {}

    def _unit_fires(self, sup: Support, fired: torch.Tensor) -> torch.Tensor:
        """[n_units] number of tokens on which each unit fired (a block counts once per token)."""
        n_units = self.cfg.n_units
        units = sup.idx[fired] // self.u
        if self.u > 1:
            units = torch.unique(sup.rows[fired] * n_units + units) % n_units
        return torch.bincount(units, minlength=n_units)

    def aux_rows(self, n_rows: int) -> int:
        """How many of a batch's first rows AuxK runs on: a shuffled batch's first rows are a random
        sample, and AuxK's loss is normalised over them, so a fraction keeps its expected size."""
        return min(n_rows, max(1, math.ceil(self.cfg.aux_rows * n_rows)))

    def _aux_select(self, h: torch.Tensor, dead: torch.Tensor) -> Support:
        """AuxK's support: the aux_k (in latents) highest-scoring dead units (indices `dead`) of each token."""
        k_units = min(max(1, self.cfg.aux_k // self.u), dead.numel())
        vals, top = topk(self.unit_scores(h).index_select(1, dead), k_units)
        keep = None if self.signed else vals > 0  # ReLU codes must be positive
        return Support.from_topk(h, dead[top], keep, self.u, sort=False)  # decoded in token bags only

    def _auxk(self, enc_in, e, sup: Support, W_enc, b_enc, W_dec, dead_mask) -> torch.Tensor:
        """AuxK: the top dead units reconstruct the detached residual; the gradient reaches W_enc.

        With few dead latents the products run dense over just their rows (same values and gradients).
        Only the support's rows, the batch's first `aux_rows`, take part."""
        kern, n = self.kern, sup.n_rows
        enc_in, e = enc_in[:n], e[:n]
        dead = self.expand_units(dead_mask[None])[0].nonzero().squeeze(1)
        if dead.numel() <= AUXK_DENSE_RATIO * self.cfg.aux_k:
            pos = torch.full((self.cfg.n_latents,), -1, dtype=torch.long, device=dead.device)
            pos[dead] = torch.arange(dead.numel(), device=dead.device)
            sup = Support(sup.rows, pos[sup.idx], sup.n_rows, sup.pre)
            W_enc, b_enc, W_dec, kern = W_enc[dead], b_enc[dead], W_dec[dead], KERNELS["dense"]
        pre = kern.encode(enc_in, W_enc, b_enc, sup)
        vals = pre if self.signed else pre.relu()
        e_hat = kern.decode(vals, W_dec, sup)
        target = e.detach()
        denom = (target - target.mean(0)).pow(2).sum().clamp_min(1e-12)
        return (target - e_hat).pow(2).sum() / denom

    def _regularisers(self, enc_in, W_enc, b_enc, sup: Support) -> dict:
        """Both regularisers act on the batch-active units A only: h is recomputed for those columns."""
        n = self.cfg.n_latents
        active = torch.zeros(n, dtype=torch.bool, device=enc_in.device)
        active[sup.idx] = True
        cols = active.nonzero().squeeze(1)
        if cols.numel() == 0:
            return {}
        # every (token, batch-active unit) pair is needed: one dense product over A's columns (a sparse-kernel
        # encode of B x |A| pairs would gather a d-row per pair, ~5x the cost of the whole step)
        h_active = enc_in.to(W_enc.dtype) @ W_enc[cols].T + b_enc[cols]
        pos = torch.full((n,), -1, dtype=torch.long, device=h_active.device)
        pos[cols] = torch.arange(cols.numel(), device=h_active.device)
        on = torch.zeros_like(h_active, dtype=torch.bool)
        on[sup.rows, pos[sup.idx]] = True
        return topk_regularisers(h_active, on, self.cfg.reg_l1_off, self.cfg.reg_l1_l2, self.cfg.reg_normalisation)

    # ---- inference ---------------------------------------------------------------------------
    @torch.no_grad()
    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Dense codes [B, n_latents] with the inference rule (what the saved SAELens SAE computes)."""
        was = self.training
        self.eval()
        try:
            _, _, _, enc_in = self._inputs(x)
            W_enc, b_enc, _ = self.weights()
            sup, _ = self._select(enc_in, W_enc, b_enc)
            vals, _ = self.activate(sup.pre, sup)
            z = torch.zeros(x.shape[0], self.cfg.n_latents, dtype=enc_in.dtype, device=enc_in.device)
            z[sup.rows, sup.idx] = vals.to(z.dtype)
            return z
        finally:
            self.train(was)

    @torch.no_grad()
    def decode(self, z: torch.Tensor, base: torch.Tensor | None = None) -> torch.Tensor:
        """Reconstruction in original units from dense codes; base: what `_base` adds (scaled units), or
        b_dec alone."""
        _, _, W_dec = self.weights()
        out = z @ W_dec + (self.b_dec if base is None else base)
        return out / (self.output_scale if self.cfg.transcoder else self.input_scale)

    @torch.no_grad()
    def reconstruct(self, x: torch.Tensor, drop_scaffold: bool = False) -> torch.Tensor:
        """The SAE's reconstruction of x, or a transcoder's prediction of its target from input x."""
        xs, _, s, _ = self._inputs(x)
        return self.decode(self.encode(x), self._base(xs, None if drop_scaffold else s))

    # ---- training support --------------------------------------------------------------------
    @torch.no_grad()
    def init_from_batch(self, batch: torch.Tensor) -> None:
        """Scales, b_dec (and a transcoder's b_in) and the scaffold from the first batch(es) of the stream."""
        cfg = self.cfg
        x, y = (t.double() for t in self.split(batch))
        if cfg.input_norm == "sqrt_d":
            self.input_scale.fill_(math.sqrt(cfg.d_in) / x.norm(dim=-1).mean().clamp_min(1e-12).item())
            if cfg.transcoder:
                self.output_scale.fill_(math.sqrt(self.d_out) / y.norm(dim=-1).mean().clamp_min(1e-12).item())
        xs = x * self.input_scale.double()
        ts = y * self.output_scale.double() if cfg.transcoder else xs
        for bias, t in ((self.b_dec, ts), (self.b_in, xs)) if cfg.transcoder else ((self.b_dec, ts),):
            if cfg.b_dec_init == "geometric_median":
                bias.copy_(geometric_median(t))
            elif cfg.b_dec_init == "mean":
                bias.copy_(t.mean(0))
        if self.scaffold is not None:
            if cfg.scaffold_init == "pca" and x.shape[0] < cfg.scaffold_rank:
                raise ConfigError(
                    f"scaffold_init='pca' needs at least scaffold_rank={cfg.scaffold_rank} "
                    f"tokens in the init batch, got {x.shape[0]}"
                )
            yc = (ts - self.b_dec.double()).float() if cfg.transcoder else None
            self.scaffold.init_from((xs - self._centre().double()).float(), cfg.scaffold_init, self._gen, yc)
        if cfg.encoder_init == "fit":
            self._fit_encoder_scale(x.float(), ts.float())

    @torch.no_grad()
    def _fit_encoder_scale(self, x: torch.Tensor, ts: torch.Tensor) -> None:
        """Scale the encoder so the first batch's reconstruction has the least-squares optimal size.

        With W_enc = W_dec^T and unit-norm rows, the k selected codes overshoot the input (their
        decoder rows overlap), so FVU starts above 1 and early steps undo that. The selection does
        not change with a positive scale (Top-k) or is re-made after it (thresholds), so one scalar
        c = <target, recon> / <recon, recon> fits it exactly.

        A transcoder's random decoder rows are unrelated to its target, so each unit's decoder first
        becomes the (unit-normalised) code-weighted mean of the target over the tokens it fires on in
        this batch: one least-squares-like step toward the target before the scale is fitted.
        """
        xs, _, s, enc_in = self._inputs(x)
        W_enc, b_enc, W_dec = self.weights()
        sup, _ = self._select(enc_in, W_enc, b_enc, select=self.init_select)
        vals, _ = self.activate(sup.pre, sup)
        target = ts - self._base(xs, s)
        if self.cfg.transcoder:
            fit = torch.zeros_like(self.W_dec).index_add_(0, sup.idx, vals[:, None] * target[sup.rows])
            fired = self._unit_view(fit).norm(dim=-1, keepdim=True) > 0
            self._unit_view(self.W_dec).copy_(
                torch.where(fired, self._unit_view(self._unit_rows(fit)), self._unit_view(self.W_dec))
            )
            W_dec = self.W_dec
        recon = self.kern.decode(vals, W_dec, sup, n_bags=x.shape[0])
        c = float((target * recon).sum() / (recon * recon).sum().clamp_min(1e-12))
        if not (math.isfinite(c) and c > 0):
            return  # nothing selected, or an anti-aligned start: keep the transpose
        self.scale_encoder(c)
        self.encoder_init_scale.fill_(c)

    def _unit_view(self, w: torch.Tensor) -> torch.Tensor:
        return w.view(self.cfg.n_units, -1)

    @torch.no_grad()
    def project_decoder_grad(self) -> None:
        """Remove each decoder unit's gradient component parallel to the unit (before the step)."""
        if not self.unit_norm_decoder or self.W_dec.grad is None:
            return
        w, g = self._unit_view(self.W_dec), self._unit_view(self.W_dec.grad)
        g -= (g * w).sum(-1, keepdim=True) * w

    @torch.no_grad()
    def normalise_decoder(self) -> None:
        """Back onto the unit sphere (rows, or blocks in Frobenius norm) after the step."""
        if self.unit_norm_decoder:
            w = self._unit_view(self.W_dec)
            w /= w.norm(dim=-1, keepdim=True).clamp_min(1e-12)

    def after_step(self, stats: dict) -> None:
        """Architecture state updated from (all-reduced) step statistics, e.g. BatchTopK's theta."""
