"""Exact evaluation of feature-level circuits in the real model (docs/methods.md §11).

A feature circuit is a set of nodes: transcoder features (layer, pos, latent), error nodes (layer, pos) and token
embeddings (pos). Its run is the real model (attention live, every nonlinearity real) with each MLP output
rebuilt from its transcoder: features in the circuit take the value the transcoder's encoder gives on this run's
input, every other latent its ablated (counterfactual) value; an error node in the circuit carries this run's
own error (the real MLP output minus the transcoder's on this input), one outside its ablated error; an
embedding outside the circuit is the counterfactual's. With every node kept the run is the clean model exactly,
with none it is the counterfactual model; several circuits run at once, one per batch row.

The nodes are the latents active in the clean or the counterfactual run (a latent inactive in both is 0 in both
and stays 0), every error node and every embedding. Positions are aligned as the component circuits align them
(inputs.align); an unmatched clean position's ablated values are its clean ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.cache.hooks import mlp_in_hooks
from workbench.circuits.feature.replacement import EMBED
from workbench.circuits.feature.transcoders import Transcoders, output_hook, resolve
from workbench.circuits.inputs import QueryInput, align
from workbench.errors import BadValueError

FEATURE_ABLATIONS = ("counterfactual", "zero")


@dataclass
class Run:
    """One run's values at the node sites: codes[l] [pos, d_sae], errors[l] [pos, d], embed [pos, d]."""

    codes: list[torch.Tensor]
    errors: list[torch.Tensor]
    embed: torch.Tensor
    logits: torch.Tensor  # [d_vocab] at the last position


@torch.no_grad()
def record_run(model, tcs: Transcoders, tokens: torch.Tensor) -> Run:
    """The node values of one real forward pass on tokens [pos]."""
    layers = range(tcs.n_layers)
    names = [tcs.input_hook(layer) for layer in layers] + [EMBED] + [output_hook(layer) for layer in layers]
    with mlp_in_hooks(model, names):
        logits, cache = model.run_with_cache(tokens[None].to(model.cfg.device), names_filter=names)
    codes, errors = [], []
    for layer in layers:
        x = cache[tcs.input_hook(layer)][0]
        codes.append(tcs.encode(layer, x))
        errors.append(tcs.error(layer, codes, x, cache[output_hook(layer)][0]))
    return Run(codes, errors, cache[EMBED][0], logits[0, -1])


def _ablated(clean: Run, cf: Run | None, idx: torch.Tensor | None) -> Run:
    """The ablated values on the clean positions: the counterfactual's where aligned, else the clean ones
    (zero ablation: cf is None, every value 0)."""
    if cf is None:
        zero = [torch.zeros_like(c) for c in clean.codes]
        return Run(zero, [torch.zeros_like(e) for e in clean.errors], torch.zeros_like(clean.embed), clean.logits)
    keep = idx >= 0

    def put(a, b):
        out = a.clone()
        out[keep] = b[idx[keep]]
        return out

    return Run(
        [put(a, b) for a, b in zip(clean.codes, cf.codes)],
        [put(a, b) for a, b in zip(clean.errors, cf.errors)],
        put(clean.embed, cf.embed),
        cf.logits,
    )


class FeatureSetup:
    """The node set of one query and everything its exact evaluation needs.

    Node index order: features (sorted by layer, pos, latent), then error nodes (layer * n_pos + pos), then
    embeddings (pos). `features` [n_f, 3] (layer, pos, latent); `clean_values` / `ablated_values` [n_f]."""

    def __init__(self, model, transcoders: Transcoders, q: QueryInput, ablation: str = "counterfactual"):
        if ablation not in FEATURE_ABLATIONS:
            raise BadValueError(
                f"ablation {ablation!r} is not available for feature circuits; valid: {', '.join(FEATURE_ABLATIONS)}"
            )
        if ablation == "counterfactual" and q.cf_tokens is None:
            raise BadValueError("a feature circuit with counterfactual ablation needs --counterfactual (or zero)")
        self.model, self.tcs, self.query, self.ablation = model, resolve(transcoders, model), q, ablation
        self.L, self.P = model.cfg.n_layers, q.tokens.numel()
        self.clean = record_run(model, self.tcs, q.tokens)
        self.clean_logits = self.clean.logits
        self.alignment = None
        cf = None
        if ablation == "counterfactual":
            cf = record_run(model, self.tcs, q.cf_tokens)
            self.alignment = align(self.P, q.cf_tokens.numel(), anchor_first=bool(q.tokens[0] == q.cf_tokens[0]))
        self.abl = _ablated(self.clean, cf, self.alignment)
        parts = []
        for layer, (c, a) in enumerate(zip(self.clean.codes, self.abl.codes)):
            pos, latent = ((c != 0) | (a != 0)).nonzero(as_tuple=True)
            parts.append(torch.stack([torch.full_like(pos, layer), pos, latent], 1))
        self.features = torch.cat(parts)
        self.n_features = self.features.shape[0]
        self.n_errors = self.L * self.P
        self.n_nodes = self.n_features + self.n_errors + self.P
        f = self.features
        self.clean_values = torch.stack([self.clean.codes[int(la)][p, i] for la, p, i in f.tolist()] or [])
        self.ablated_values = torch.stack([self.abl.codes[int(la)][p, i] for la, p, i in f.tolist()] or [])

    def node_name(self, node: int) -> str:
        """'f{layer}.{latent}@{pos}', 'err{layer}@{pos}' or 'emb@{pos}' (attribution_graph's names)."""
        if node < self.n_features:
            layer, pos, latent = self.features[node].tolist()
            return f"f{layer}.{latent}@{pos}"
        if node < self.n_features + self.n_errors:
            layer, pos = divmod(node - self.n_features, self.P)
            return f"err{layer}@{pos}"
        return f"emb@{node - self.n_features - self.n_errors}"

    def _dense_masks(self, masks: torch.Tensor):
        """Per layer [b, pos, d_sae] feature masks, [b, L, pos] error masks, [b, pos] embedding masks."""
        b = masks.shape[0]
        f = self.features
        feats = []
        for layer in range(self.L):
            m = torch.zeros(b, self.P, self.tcs.d_sae(layer), dtype=torch.bool)
            sel = (f[:, 0] == layer).nonzero().flatten()
            m[:, f[sel, 1], f[sel, 2]] = masks[:, sel]
            feats.append(m)
        err = masks[:, self.n_features : self.n_features + self.n_errors].reshape(b, self.L, self.P)
        return feats, err, masks[:, self.n_features + self.n_errors :]

    @property
    def _inputs(self) -> list[str]:
        return [self.tcs.input_hook(layer) for layer in range(self.L)]

    def _hooks(self, embed, record, mlp_out) -> list:
        """The run's hooks: embed at the embeddings, record at every layer's input, mlp_out(act, hook, layer)
        replacing every MLP output."""
        hooks = [(EMBED, embed)] + [(hook, record) for hook in self._inputs]
        return hooks + [
            (output_hook(layer), lambda a, hook, layer=layer: mlp_out(a, hook, layer)) for layer in range(self.L)
        ]

    @torch.inference_mode()
    def evaluate(self, masks: torch.Tensor, max_batch: int = 64) -> torch.Tensor:
        """Last-position logits [n_circuits, d_vocab] of circuits given as bool node masks [n_circuits, n_nodes]."""
        masks = torch.as_tensor(masks, dtype=torch.bool).reshape(-1, self.n_nodes)
        return torch.cat([self._evaluate(masks[i : i + max_batch]) for i in range(0, len(masks), max_batch)])

    def _evaluate(self, masks: torch.Tensor) -> torch.Tensor:
        feats, err, emb = self._dense_masks(masks)
        dev = self.model.cfg.device
        live = {}

        def record(act, hook):
            live[hook.name] = act
            return act

        def embed(act, hook):
            return torch.where(emb[..., None].to(dev), act, self.abl.embed)

        real, kept = [], []  # per layer: this run's codes, and the circuit's (ablated outside it)

        def mlp_out(act, hook, layer: int):
            x = live[self.tcs.input_hook(layer)]
            real.append(self.tcs.encode(layer, x))
            kept.append(torch.where(feats[layer].to(dev), real[layer], self.abl.codes[layer]))
            keep = err[:, layer, :, None].to(dev)
            error = self.tcs.error(layer, real, x, act)
            return self.tcs.reconstruct(layer, kept, x) + torch.where(keep, error, self.abl.errors[layer])

        hooks = self._hooks(embed, record, mlp_out)
        tokens = self.query.tokens.to(dev)[None].expand(masks.shape[0], -1)
        with mlp_in_hooks(self.model, self._inputs):
            logits = self.model.run_with_hooks(tokens, fwd_hooks=hooks)
        return logits[:, -1]

    def node_gradients(self, metric) -> torch.Tensor:
        """[n_nodes]: attribution patching, d metric / d node at the clean run (the real model, attention live)
        times (ablated - clean value): the first-order estimate of each node's effect when it is ablated."""
        dev, taps, live = self.model.cfg.device, {}, {}

        def tap(act, name):
            taps[name] = torch.zeros_like(act, requires_grad=True)
            return act + taps[name]

        def record(act, hook):
            live[hook.name] = act
            return act

        real, tapped = [], []  # per layer: this run's codes, and the same with a tap added

        def mlp_out(act, hook, layer: int):
            x = live[self.tcs.input_hook(layer)]
            real.append(self.tcs.encode(layer, x))
            tapped.append(tap(real[layer], f"codes{layer}"))
            moved = self.tcs.reconstruct(layer, tapped, x) - self.tcs.reconstruct(layer, real, x)
            return tap(act + moved, hook.name)

        hooks = self._hooks(lambda a, hook: tap(a, EMBED), record, mlp_out)
        with torch.enable_grad(), mlp_in_hooks(self.model, self._inputs):
            logits = self.model.run_with_hooks(self.query.tokens.to(dev)[None], fwd_hooks=hooks)
            names = list(taps)
            grads = dict(zip(names, torch.autograd.grad(metric(logits[0, -1]), [taps[n] for n in names])))
        return self.delta_scores(grads)

    def delta_scores(self, grads: dict) -> torch.Tensor:
        f = self.features
        out = torch.empty(self.n_nodes)
        for layer in range(self.L):
            sel = (f[:, 0] == layer).nonzero().flatten()
            g = grads[f"codes{layer}"][0]
            out[sel] = (g[f[sel, 1], f[sel, 2]] * (self.ablated_values[sel] - self.clean_values[sel])).float().cpu()
            d = self.abl.errors[layer] - self.clean.errors[layer]
            e0 = self.n_features + layer * self.P
            out[e0 : e0 + self.P] = (grads[f"blocks.{layer}.hook_mlp_out"][0] * d).sum(-1).float().cpu()
        d = self.abl.embed - self.clean.embed
        out[self.n_features + self.n_errors :] = (grads[EMBED][0] * d).sum(-1).float().cpu()
        return out
