"""Cross-layer transcoders (docs/methods.md §11, CLTs): one encoder per layer reading that layer's MLP input, and
for each feature at layer l one decoder into the MLP output of every layer l' >= l.

A gated CLT is not offered: its auxiliary loss reconstructs the target through a frozen copy of the member's own
decoder, which in a CLT is only a share of each target layer's reconstruction (the sum of every member's writes).

A CLT is built from the workbench's transcoders, one member per layer: member i is a transcoder of its
architecture (Top-k, BatchTopK, Matryoshka, block Top-k, JumpReLU, standard) from layer i's input to the concatenation of the targets of layers
i..L-1, so its selection, activation, sparse kernels, AuxK and unit-norm decoder (a feature's whole cross-layer
decoder has norm 1) are the per-layer code's. What the CLT adds: layer t's MLP output is reconstructed as the sum
of every member's write into it (its bias too), the loss is every layer's reconstruction (`clt_loss`: summed or
averaged over layers), each target layer has its own scale (mean norm sqrt(d)), a skip path is per layer (W_skip
x_t into layer t only, circuit-tracer's convention), and the sparsity budget is per layer or one budget shared
by all layers (`clt_sparsity`). A Matryoshka CLT's loss is its members' prefix losses across layers: for each
prefix width m_g (`prefixes`, the same for every layer), every target layer is reconstructed from only the latents
below m_g of every layer, the layers' losses combined by `clt_loss` and the prefixes' by `prefix_weighting`; like
the per-layer Matryoshka SAE it selects by BatchTopK and infers with its threshold.

Initialisation: each member is fitted as a per-layer transcoder of its own layer (the decoder fit of
`encoder_init='fit'` sees layer i's target and zeros for the later layers), so training starts from a per-layer
set (every feature's cross-layer decoders zero), and learns the cross-layer writes.

The trainer (workbench.sae.trainer) steps a CLT like an SAE: it reads a whole stream row, [x_0 | y_0 | x_1 | y_1
| ...] for the CLT's layers in order, the same rows a transcoder set reads.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from workbench.errors import ConfigError
from workbench.sae.base import geometric_median
from workbench.sae.config import BATCH_RANKED, CLTConfig
from workbench.sae.kernels import Support, topk
from workbench.sae.matryoshka import combine_prefixes, prefix_writes


class CrossLayerTranscoder(nn.Module):
    signed = False

    def __init__(self, cfg: CLTConfig, build):
        """build: the architecture registry's (workbench.sae.architectures.build), which makes each member."""
        super().__init__()
        if cfg.n_layers is None or cfg.d_in is None or cfg.d_out is None or cfg.name is None:
            raise ValueError("CLT configs must be resolved first: cfg.resolve(d_in, n_tokens, d_out, n_layers)")
        self.cfg = cfg
        self.members = nn.ModuleList([build(cfg.member(i)) for i in range(cfg.n_layers)])
        if cfg.threshold_per_latent:  # an imported circuit-tracer CLT's JumpReLU thresholds (BatchTopK members)
            for m in self.members:
                m.threshold = torch.zeros(cfg.n_latents, dtype=torch.float64)
        self.register_buffer("output_scale", torch.ones(cfg.n_layers))
        self.W_skip = nn.Parameter(torch.zeros(cfg.n_layers, cfg.d_out, cfg.d_in)) if cfg.skip else None

    @property
    def n_layers(self) -> int:
        return self.cfg.n_layers

    def split(self, batch: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """A stream row [x_0 | y_0 | x_1 | y_1 | ...] -> (inputs, targets), one per layer."""
        d_in, d_out, L = self.cfg.d_in, self.cfg.d_out, self.n_layers
        if batch.shape[-1] != L * (d_in + d_out):
            raise ConfigError(
                f"CLT {self.cfg.name!r} expects rows of {L} x (d_in + d_out) = {L * (d_in + d_out)}, got {batch.shape[-1]}"
            )
        parts = batch.view(batch.shape[0], L, d_in + d_out)
        return [parts[:, i, :d_in] for i in range(L)], [parts[:, i, d_in:] for i in range(L)]

    # ---- training ------------------------------------------------------------------------------
    @torch.no_grad()
    def init_from_batch(self, batch: torch.Tensor) -> None:
        """Per layer: the input and target scales, b_in and b_dec of its own layer, the scaffold, then each member's
        decoder and encoder fitted as a per-layer transcoder (zeros as the later layers' targets)."""
        cfg = self.cfg
        xs_, ys_ = self.split(batch)
        for i, (m, x, y) in enumerate(zip(self.members, xs_, ys_)):
            x, y = x.double(), y.double()
            if cfg.input_norm == "sqrt_d":
                m.input_scale.fill_(math.sqrt(cfg.d_in) / x.norm(dim=-1).mean().clamp_min(1e-12).item())
                self.output_scale[i] = math.sqrt(cfg.d_out) / y.norm(dim=-1).mean().clamp_min(1e-12).item()
            xs, ts = x * m.input_scale.double(), y * self.output_scale[i].double()
            for bias, t in ((m.b_dec[: cfg.d_out], ts), (m.b_in, xs)):
                if cfg.b_dec_init == "geometric_median":
                    bias.copy_(geometric_median(t))
                elif cfg.b_dec_init == "mean":
                    bias.copy_(t.mean(0))
            padded = torch.cat([ts, ts.new_zeros(ts.shape[0], m.d_out - cfg.d_out)], 1)
            m.W_dec[:, cfg.d_out :] = 0  # every feature starts as a per-layer one: its cross-layer decoders zero
            m.normalise_decoder()
            if m.scaffold is not None:
                if cfg.scaffold_init == "pca" and x.shape[0] < cfg.scaffold_rank:
                    raise ConfigError(f"scaffold_init='pca' needs at least scaffold_rank={cfg.scaffold_rank} tokens")
                yc = (padded - m.b_dec.double()).float()
                m.scaffold.init_from((xs - m.b_in.double()).float(), cfg.scaffold_init, m._gen, yc)
            if cfg.encoder_init == "fit":
                m._fit_encoder_scale(x.float(), padded.float())
            if hasattr(m, "init_thresholds"):  # JumpReLU members: theta from this batch, after the encoder scale
                m.init_thresholds(x.float())

    def forward(self, batch: torch.Tensor, dead_mask: torch.Tensor | None = None) -> dict:
        """One training step's losses and statistics for stream rows (original units)."""
        cfg, L, d = self.cfg, self.n_layers, self.cfg.d_out
        xs_, ys_ = self.split(batch)
        ts = torch.cat([y * self.output_scale[i].to(y.dtype) for i, y in enumerate(ys_)], 1)  # [B, L*d]
        per_unit = self.members[0].cfg.n_units
        dead = list(dead_mask.view(L, per_unit)) if dead_mask is not None else [None] * L
        use_aux = dead_mask is not None and bool(cfg.aux_alpha) and bool(dead_mask.any())
        parts = [
            self._select(m, x, dead[i] if use_aux and bool(dead[i].any()) else None)
            for i, (m, x) in enumerate(zip(self.members, xs_))
        ]
        if cfg.clt_sparsity == "shared":
            parts = _share_budget(parts, cfg, self.training)
        codes, losses = [], {}
        for i, (m, p) in enumerate(zip(self.members, parts)):
            vals, extra = self._write(m, p)
            losses.update({f"{k}_{i}": v for k, v in extra.items()})
            codes.append(vals)
        base, writes = self._decode(xs_, parts, codes)
        err_g = (ts - base)[:, None] - writes  # [B, G, L*d]: G = 1, or a Matryoshka CLT's prefixes
        per = err_g.view(ts.shape[0], -1, L, d).pow(2).sum(-1).mean(0)  # [G, L]
        if cfg.architecture == "matryoshka":
            bias_only = self._over_layers((ts - base).view(-1, L, d).pow(2).sum(-1).mean(0))
            losses["matryoshka_mse"] = combine_prefixes(self._over_layers(per), bias_only, cfg.prefix_weighting)
        else:
            losses["recon"] = self._over_layers(per[0])
        err, per_layer = err_g[:, -1].view(-1, L, d), per[-1]
        e = err_g[:, -1].detach()
        for i, (m, p) in enumerate(zip(self.members, parts)):
            if p["aux"] is not None:
                losses[f"aux_{i}"] = cfg.aux_alpha * m._auxk(
                    p["enc_in"], e[:, i * d :], p["aux"], p["W_enc"], p["b_enc"], p["W_dec"], dead[i]
                )
        loss = sum(losses.values())
        losses.update({f"mse_{t}": v for t, v in enumerate(per_layer)})  # logged per target layer, not in the loss
        return {
            "loss": loss,
            "losses": {k: v.detach() for k, v in losses.items()},
            "stats": self._stats(ts, err, parts, codes),
        }

    def _over_layers(self, per_layer: torch.Tensor) -> torch.Tensor:
        """The target layers' losses (last dim) summed or averaged (`clt_loss`)."""
        return per_layer.sum(-1) if self.cfg.clt_loss == "sum" else per_layer.mean(-1)

    def _decode(self, xs_, parts, codes) -> tuple[torch.Tensor, torch.Tensor]:
        """(base, writes): what every target layer gets besides the features (biases, scaffolds, skip path) [B, L*d],
        and the features' writes [B, G, L*d]: G = 1, or per Matryoshka prefix m_g the writes of only the latents
        below m_g at every layer (each layer's prefix)."""
        d = self.cfg.d_out
        base, writes = 0, 0
        for i, (m, p, vals) in enumerate(zip(self.members, parts, codes)):
            if self.cfg.architecture == "matryoshka":
                w = prefix_writes(m.kern, vals, p["W_dec"], p["sup"], m.prefix_ends)
            else:
                w = m.kern.decode(vals, p["W_dec"], p["sup"])[:, None]
            base = base + nn.functional.pad(p["base"], (i * d, 0))
            writes = writes + nn.functional.pad(w, (i * d, 0))
        if self.W_skip is not None:
            base = base + torch.cat(
                [(x * m.input_scale) @ self.W_skip[i].T for i, (m, x) in enumerate(zip(self.members, xs_))], 1
            )
        return base, writes

    def _select(self, m, x: torch.Tensor, dead: torch.Tensor | None) -> dict:
        xs, xc, s, enc_in = m._inputs(x)
        W_enc, b_enc, W_dec = m.weights()
        sup, aux = m._select(enc_in, W_enc, b_enc, dead)
        enc_in, b_enc = m._grad_operands(xs, xc, enc_in, W_enc, b_enc)
        return {
            "sup": sup,
            "aux": aux,
            "enc_in": enc_in,
            "W_enc": W_enc,
            "b_enc": b_enc,
            "W_dec": W_dec,
            "base": m._base(xs, s),
        }

    @staticmethod
    def _write(m, p: dict):
        pre = m.kern.encode(p["enc_in"], p["W_enc"], p["b_enc"], p["sup"])
        vals, losses = m.activate(pre, p["sup"])
        return vals, {**losses, **m.dense_terms(p["enc_in"], p["W_enc"], p["b_enc"], p["sup"])}

    @torch.no_grad()
    def _stats(self, ts, err, parts, codes) -> dict:
        B, L = ts.shape[0], self.n_layers
        tv = ts.view(B, L, -1).float()
        var = (tv - tv.mean(0)).pow(2).sum((0, 2)).clamp_min(1e-12)
        sq = err.detach().float().pow(2).sum((0, 2))
        fires = [m._unit_fires(p["sup"], v.detach() != 0) for m, p, v in zip(self.members, parts, codes)]
        l0 = torch.stack([(v.detach() != 0).sum().float() / B for v in codes])
        stats = {
            "mse": sq.sum() / B,
            "fvu": sq.sum() / var.sum(),
            "l0": l0.sum(),
            "unit_fires": torch.cat(fires),
            **{f"fvu_{i}": sq[i] / var[i] for i in range(L)},
            **{f"l0_{i}": l0[i] for i in range(L)},
        }
        kept = [m.extra_stats(v, p["sup"]).get("min_kept") for m, p, v in zip(self.members, parts, codes)]
        if all(k is not None for k in kept):
            kept = torch.stack(kept)
            stats["min_kept"] = kept.min().expand(L).clone() if self.cfg.clt_sparsity == "shared" else kept
        return stats

    @torch.no_grad()
    def after_step(self, stats: dict) -> None:
        for i, m in enumerate(self.members):  # each member's target_l0 is per layer: it sees its own layer's L0
            m.after_step({k: (v[i] if k == "min_kept" else v) for k, v in stats.items()} | {"l0": stats[f"l0_{i}"]})

    def project_decoder_grad(self) -> None:
        for m in self.members:
            m.project_decoder_grad()

    def normalise_decoder(self) -> None:
        for m in self.members:
            m.normalise_decoder()

    # ---- inference ------------------------------------------------------------------------------
    @torch.no_grad()
    def encode(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """Dense codes [B, n_latents] of layer `layer`'s features from that layer's MLP input. A Top-k CLT with a
        shared budget ranks every layer's latents together, so its codes come only from `encode_all`."""
        if self.cfg.clt_sparsity == "shared" and self.cfg.architecture == "topk":
            raise ConfigError(
                f"CLT {self.cfg.name!r} shares its Top-k budget across layers: encode every layer at once"
            )
        return self.members[layer].encode(x)

    @torch.no_grad()
    def encode_all(self, xs: list[torch.Tensor]) -> list[torch.Tensor]:
        """Every layer's dense codes from every layer's MLP input (the shared Top-k budget applied across layers)."""
        if not (self.cfg.clt_sparsity == "shared" and self.cfg.architecture == "topk"):
            return [self.encode(i, x) for i, x in enumerate(xs)]
        was = self.training
        self.eval()
        try:
            parts = _share_budget([self._select(m, x, None) for m, x in zip(self.members, xs)], self.cfg, True)
            out = []
            for m, p, x in zip(self.members, parts, xs):
                vals, _ = m.activate(p["sup"].pre, p["sup"])
                z = x.new_zeros(x.shape[0], m.cfg.n_latents)
                z[p["sup"].rows, p["sup"].idx] = vals.to(z.dtype)
                out.append(z)
            return out
        finally:
            self.train(was)

    @torch.no_grad()
    def decoder(self, source: int, target: int) -> torch.Tensor:
        """[n_latents, d_out]: the writes of layer `source`'s features into layer `target`'s MLP output (original
        units); zeros below the source."""
        m, d = self.members[source], self.cfg.d_out
        if target < source:
            return m.W_dec.new_zeros(m.cfg.n_latents, d)
        return m.W_dec[:, (target - source) * d : (target - source + 1) * d] / self.output_scale[target]

    @torch.no_grad()
    def bias(self, target: int, xs: torch.Tensor | None = None) -> torch.Tensor:
        """What layer `target` gets besides the features: the members' biases (and scaffolds, from their inputs xs)
        and the skip path; original units. xs: every layer's input [L] x [B, d_in] (None: biases only)."""
        d, t = self.cfg.d_out, target
        out = sum(m.b_dec[(t - i) * d : (t - i + 1) * d] for i, m in enumerate(self.members[: t + 1]))
        if xs is not None:
            out = out.expand(xs[t].shape[0], -1).clone()
            for i, m in enumerate(self.members[: t + 1]):
                if m.scaffold is not None:
                    out += m.scaffold((xs[i] * m.input_scale) - m.b_in)[:, (t - i) * d : (t - i + 1) * d]
            if self.W_skip is not None:
                out += (xs[t] * self.members[t].input_scale) @ self.W_skip[t].T
        return out / self.output_scale[t]

    @torch.no_grad()
    def reconstruct(self, xs: list[torch.Tensor]) -> list[torch.Tensor]:
        """Every layer's predicted MLP output from every layer's MLP input (original units)."""
        codes = self.encode_all(xs)
        return [
            self.bias(t, xs) + sum(codes[i] @ self.decoder(i, t) for i in range(t + 1)) for t in range(self.n_layers)
        ]


def _share_budget(parts: list[dict], cfg: CLTConfig, training: bool) -> list[dict]:
    """One budget across layers: each member proposed its own best k x n_layers (per token, Top-k) or k x n_layers
    x B (per batch, BatchTopK); the best of all layers' proposals are kept, per token or per batch."""
    if cfg.architecture in BATCH_RANKED and not training:
        return parts  # inference: every member applies the shared threshold
    sups = [p["sup"] for p in parts]
    pre = torch.cat([s.pre for s in sups])
    layer = torch.cat([torch.full_like(s.rows, i) for i, s in enumerate(sups)])
    rows = torch.cat([s.rows for s in sups])
    B, K = sups[0].n_rows, cfg.k * cfg.n_layers
    if cfg.architecture in BATCH_RANKED:
        vals, pos = topk(pre, min(K * B, pre.numel()))
        keep = torch.zeros_like(pre, dtype=torch.bool)
        keep[pos[vals > 0]] = True
    else:  # per token: rank each row's candidates (at most K per layer) in a [B, L*K] table
        order = torch.argsort(rows * (len(sups) + 1) + layer, stable=True)
        r = rows[order]
        starts = torch.searchsorted(r, r, right=False)
        slot = torch.arange(r.numel(), device=r.device) - starts
        table = torch.full((B, int(slot.max()) + 1 if r.numel() else 1), -math.inf, device=pre.device)
        table[r, slot] = pre[order]
        vals, top = topk(table, min(K, table.shape[1]))
        keep_sorted = torch.zeros_like(table, dtype=torch.bool)
        keep_sorted.scatter_(1, top, vals > 0)
        keep = torch.zeros_like(pre, dtype=torch.bool)
        keep[order] = keep_sorted[r, slot]
    out, start = [], 0
    for p, s in zip(parts, sups):
        k = keep[start : start + s.pre.numel()]
        start += s.pre.numel()
        out.append({**p, "sup": Support(s.rows[k], s.idx[k], s.n_rows, s.pre[k])})
    return out
