"""The local replacement model of one prompt (docs/methods.md §11): every MLP replaced by its transcoder plus a
fixed error term, attention patterns and normalisation scales frozen at this prompt's values.

The residual stream of the frozen model is linear in what is written into it (feature activations, error
terms, token embeddings), so one batched backward pass from a set of targets gives each target's direct
effect from every source. `ReplacementModel` runs that model with TransformerLens hooks: `forward` (with
optional additive interventions, for checking edges against the real thing) and `backward` (the gradients
at the places sources write: blocks.0.hook_resid_pre and each hook_mlp_out, and optionally each hook_z).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.cache.hooks import mlp_in_hooks
from workbench.circuits.feature.transcoders import Transcoders, output_hook, resolve

EMBED = "blocks.0.hook_resid_pre"
TOKEN_EMBED, POS_EMBED = "hook_embed", "hook_pos_embed"  # its two parts in a model with absolute positions
FINAL = "ln_final.hook_normalized"  # before ln_final's weight and bias, which unembed_vectors apply
FROZEN = ("hook_pattern", "hook_scale")
HELD = 2  # forward passes backward keeps for reuse (the head split alternates two kinds)
WRITES_KEPT_MIB = 1536  # feature writes kept between batches up to this size (ActiveFeatures.writes)


class ReplacementModel:
    """The frozen replacement model of `model` at `tokens` [pos] (one real forward pass at construction).

    Attributes from that pass: `codes[l]` [pos, d_sae] (the transcoder's activations, a sparse tensor), `errors[l]` [pos, d_model]
    (true MLP output - transcoder output), `embed` [pos, d_model] (what enters the residual stream before layer
    0), `logits` [d_vocab] at the last position. Layer index n_layers stands for the final residual (the logits).
    """

    def __init__(self, model, transcoders: Transcoders, tokens: torch.Tensor, position_step: int | None = None):
        self.model = model
        self.position_step = position_step  # backward's cut (see there); None: every backward runs the whole prompt
        self.tcs = resolve(transcoders, model)
        self.L = model.cfg.n_layers
        self.tokens = torch.as_tensor(tokens).reshape(-1).to(model.cfg.device)
        self.P = self.tokens.numel()
        self.final = FINAL if FINAL in model.hook_dict else f"blocks.{self.L - 1}.hook_resid_post"
        self.inputs = [self.tcs.input_hook(layer) for layer in range(self.L)] + [self.final]
        absolute = model.cfg.positional_embedding_type == "standard" and POS_EMBED in model.hook_dict
        wanted = set(self.inputs) | {EMBED, POS_EMBED} | {output_hook(layer) for layer in range(self.L)}
        with mlp_in_hooks(model, self.inputs), torch.no_grad():
            logits, cache = model.run_with_cache(
                self.tokens[None], names_filter=lambda n: n in wanted or n.endswith(FROZEN + ("attn.hook_v",))
            )
        self.frozen = {n: v for n, v in cache.items() if n.endswith(FROZEN)}
        self.values = {n: v for n, v in cache.items() if n.endswith("attn.hook_v")}  # what no_attention holds fixed
        self.logits = logits[0, -1]
        self.embed = cache[EMBED][0]
        # absolute positions: the positional embedding's part of embed (its token part is the rest); else None
        self.pos_embed = cache[POS_EMBED][0] if absolute else None
        self.x = [cache[hook][0] for hook in self.inputs[:-1]]
        self.codes, self.errors, self.base = [], [], []
        self._held = {}  # (copies, highest layer, options) -> (live, taps) of the forward passes backward reuses
        with torch.no_grad():
            self._replace_mlps(cache)

    def _replace_mlps(self, cache) -> None:
        dense = []
        for layer, x in enumerate(self.x):
            y = cache[output_hook(layer)][0]
            _, codes = self.tcs.preacts(layer, x)
            dense.append(codes)
            self.codes.append(codes.to_sparse().coalesce())  # dense, 12 layers x 1,024 x 24,576 would be 1.2 GB
            self.errors.append(self.tcs.error(layer, dense, x, y))
            s = self.tcs.skip(layer, x)
            self.base.append(y if s is None else y - s)  # so that base + skip(live input) is the MLP's output
            for s in range(layer + 1):  # a layer's dense codes are kept only while a later layer reads them
                if dense[s] is not None and self.tcs.writes_to(s)[-1] <= layer:
                    dense[s] = None

    def _final_affine(self):
        ln = getattr(self.model, "ln_final", None) if self.final == FINAL else None
        return getattr(ln, "w", None), getattr(ln, "b", None)

    def unembed_vectors(self, ids: list[int]) -> torch.Tensor:
        """[len(ids), d]: each logit minus the mean logit as a linear function of the final residual (live[final])."""
        W_U = self.model.W_U.detach()
        vecs = (W_U[:, ids] - W_U.mean(1, keepdim=True)).T
        w, _ = self._final_affine()
        return vecs if w is None else vecs * w.detach()

    def last_logits(self, live: dict) -> torch.Tensor:
        """[batch, d_vocab] logits at the last position from a forward's live final residual."""
        x = live[self.final][:, -1]
        w, b = self._final_affine()
        x = x if w is None else x * w
        return self.model.unembed((x if b is None else x + b)[:, None])[:, 0]

    def _hooks(self, live: dict, taps: dict, deltas: dict, no_attention: bool, with_z: bool, record=()) -> list:
        """Hooks of the frozen model: frozen patterns and scales, live inputs recorded, each MLP replaced, a zero
        leaf tensor (a tap) added where sources write (and at each hook_z), for gradients; deltas added there."""

        def frozen(act, hook, values=False):
            held = (self.values if values else self.frozen)[hook.name]
            return held[tuple(slice(0, n) for n in act.shape)].expand_as(act)  # a cut prompt: its first positions

        extra = record

        def record(act, hook):
            live[hook.name] = act
            return act

        def tap(act, hook, base=lambda act: act.detach()):
            t = taps[hook.name] = torch.zeros_like(act, requires_grad=torch.is_grad_enabled())
            out = base(act) + t
            return out + deltas[hook.name][:, : out.shape[1]] if hook.name in deltas else out

        def mlp(act, hook, layer):
            def base(act):
                s = self.tcs.skip(layer, live[self.inputs[layer]])
                b = self.base[layer][: act.shape[1]].expand_as(act)
                return b if s is None else b + s

            return tap(act, hook, base)

        hooks = [(lambda n: n.endswith(FROZEN), frozen)]
        hooks += [(n, record) for n in (*self.inputs, *extra)] + [(EMBED, tap)]
        hooks += [(output_hook(layer), lambda a, hook, layer=layer: mlp(a, hook, layer)) for layer in range(self.L)]
        if no_attention:
            hooks.append((lambda n: n.endswith("attn.hook_v"), lambda act, hook: frozen(act, hook, values=True)))
        if with_z:
            hooks.append((lambda n: n.endswith("attn.hook_z"), lambda act, hook: tap(act, hook, lambda a: a)))
        return hooks

    def forward(
        self,
        batch: int = 1,
        deltas: dict | None = None,
        no_attention: bool = False,
        with_z=False,
        record=(),
        upto=None,
        n_pos=None,
    ):
        """(live inputs, taps): one pass of the frozen model on `batch` copies of the prompt. live[hook] is each
        transcoder's input, the final residual and the hooks in `record`; deltas[hook] [batch, pos, d] is added
        where it writes. no_attention: every value fixed at this prompt's, so nothing passes through attention.
        upto: run blocks 0..upto only (what a target read at layer upto depends on). n_pos: the first n_pos
        positions only (the model is causal: what a target at position < n_pos depends on)."""
        live, taps = {}, {}
        hooks = self._hooks(live, taps, deltas or {}, no_attention, with_z, record)
        stop = None if upto is None or upto >= self.L else upto + 1
        with mlp_in_hooks(self.model, self.inputs), self.model.hooks(fwd_hooks=hooks):
            self.model(self.tokens[:n_pos].expand(batch, -1), return_type=None, stop_at_layer=stop)
        return live, taps

    def backward(
        self, layers: torch.Tensor, positions: torch.Tensor, vectors: torch.Tensor, copies: int | None = None, **kw
    ) -> dict:
        """Gradients of n targets, target i being vectors[i] . (the input read at layer layers[i], position
        positions[i]) (layer n_layers: the final residual), each in its own copy of the prompt: {hook: [n, ...]}
        at every tap (blocks.0.hook_resid_pre, each hook_mlp_out, with_z: each hook_z).

        The frozen model is the same function for every target, so one forward pass on `copies` (>= n) copies
        serves every later call with as many copies, the same highest layer, cut and options: each call is then one
        backward pass through the kept graph (the last HELD forward passes are held). The prompt is cut after the
        targets' last position rounded up to position_step (later positions have no effect on them), so a
        forward pass serves the batches of a span of positions and each backward runs over that span only."""
        n = layers.numel()
        copies = max(n, copies or n)
        n_pos = self.cut(positions)
        key = (copies, min(int(layers.max()), self.L), n_pos, tuple(sorted(kw.items())))
        with torch.enable_grad():
            if key not in self._held:
                for other in [k for k in self._held if k[:2] + k[3:] == key[:2] + key[3:]]:
                    del self._held[other]  # the same pass cut elsewhere: the sweep has moved on to later positions
                while len(self._held) >= HELD:  # free the oldest graph first
                    self._held.pop(next(iter(self._held)))
                self._held[key] = self.forward(copies, upto=key[1], n_pos=n_pos, **kw)
            live, taps = self._held[key]
            outs, grads = [], []
            for layer in layers.unique().tolist():
                pick = (layers == layer).nonzero().flatten()
                out = live[self.inputs[layer]]
                g = torch.zeros_like(out)
                g[pick, positions[pick].to(g.device)] = vectors[pick].to(g.dtype)
                outs.append(out)
                grads.append(g)
            names = list(taps)
            got = torch.autograd.grad(
                outs, [taps[k] for k in names], grads, retain_graph=True, allow_unused=True, materialize_grads=True
            )
        out = {k: _pad_positions(v[:n], self.P) for k, v in zip(names, got)}
        zero = torch.zeros_like(out[EMBED])
        cfg = self.model.cfg
        for layer in range(self.L):  # taps above the highest target: blocks that did not run have no effect
            out.setdefault(f"blocks.{layer}.hook_mlp_out", zero)
            if kw.get("with_z"):
                out.setdefault(f"blocks.{layer}.attn.hook_z", zero.new_zeros(n, self.P, cfg.n_heads, cfg.d_head))
        return out

    def cut(self, positions: torch.Tensor) -> int:
        """How many positions backward runs for targets at `positions`: past the last, rounded up to position_step."""
        step = self.position_step or self.P
        return min(self.P, (int(positions.max()) // step + 1) * step)

    def release(self) -> None:
        """Drop the forward passes `backward` holds (their activations: copies x the prompt's each)."""
        self._held = {}


def _pad_positions(grad: torch.Tensor, n_pos: int) -> torch.Tensor:
    """A cut prompt's gradient [n, pos, ...] with zeros after its positions (they have no effect)."""
    if grad.shape[1] == n_pos:
        return grad
    out = grad.new_zeros(grad.shape[0], n_pos, *grad.shape[2:])
    out[:, : grad.shape[1]] = grad
    return out


@dataclass
class ActiveFeatures:
    """Active features of the prompt, sorted by (layer, pos, latent); has_row: a sparse latent (a scaffold's
    dense coordinates are sources only: they have no pre-activation)."""

    layer: torch.Tensor
    pos: torch.Tensor
    latent: torch.Tensor
    act: torch.Tensor
    has_row: torch.Tensor

    @classmethod
    def of(cls, rm: ReplacementModel) -> ActiveFeatures:
        parts = []
        for layer, codes in enumerate(rm.codes):
            (pos, latent), act = codes.indices(), codes.values()
            parts.append((torch.full_like(pos, layer), pos, latent, act, latent < rm.tcs.n_sparse(layer)))
        return cls(*(torch.cat(p) for p in zip(*parts)))

    def __len__(self) -> int:
        return self.layer.numel()

    def from_position(self, first: int) -> ActiveFeatures:
        """The features at positions >= first (before any writes are kept)."""
        keep = self.pos >= first
        return ActiveFeatures(self.layer[keep], self.pos[keep], self.latent[keep], self.act[keep], self.has_row[keep])

    def at(self, layer: int) -> torch.Tensor:
        return (self.layer == layer).nonzero().flatten()

    def forget_writes(self) -> None:
        """Drop the kept feature writes (n_active x d in all), e.g. before a graph's pruning."""
        self.__dict__.pop("_writes", None)

    def writes(self, rm: ReplacementModel, layer: int, target: int, dtype) -> LayerWrites:
        """Layer `layer`'s feature writes into layer `target`'s MLP output, padded per position: formed once and
        kept while all of them take at most WRITES_KEPT_MIB (n_active x d per target), else formed again per
        batch (a gather, cheap next to the backward pass), so a long prompt's graph does not hold a second copy
        of every active decoder row."""
        cache = self.__dict__.setdefault("_writes", {})
        if (layer, target) in cache:
            return cache[layer, target]
        w = LayerWrites.of(rm, self, layer, target, dtype)
        if len(self) * w.vectors.shape[-1] * w.vectors.element_size() <= WRITES_KEPT_MIB * 2**20:
            cache[layer, target] = w
        return w


@dataclass
class LayerWrites:
    """One layer's feature writes into one target layer laid out by position: `vectors` [pos, slots, d] (act *
    the latent's decoder row into the target, of the position's features, zeros in unused slots); feature idx[i] (an index into ActiveFeatures) sits at flat
    slot `flat[i]` = pos * slots + its rank among its position's features."""

    idx: torch.Tensor
    flat: torch.Tensor
    vectors: torch.Tensor

    @classmethod
    def of(cls, rm: ReplacementModel, active: ActiveFeatures, layer: int, target: int, dtype) -> LayerWrites:
        idx = active.at(layer)
        pos = active.pos[idx]
        first = torch.searchsorted(pos, pos)  # features are sorted by position within a layer
        rank = torch.arange(idx.numel()) - first
        slots = int(rank.max()) + 1 if idx.numel() else 1
        vectors = torch.zeros(rm.P * slots, rm.embed.shape[1], dtype=dtype, device=rm.embed.device)
        flat = pos * slots + rank
        vectors[flat] = rm.tcs.decoder(layer, target, active.latent[idx]).to(dtype) * active.act[idx, None]
        return cls(idx, flat, vectors.reshape(rm.P, slots, -1))


def source_rows(
    rm: ReplacementModel,
    active: ActiveFeatures,
    grads: dict,
    below: int | None = None,
    n_pos: int | None = None,
    positions: bool = False,
) -> torch.Tensor:
    """[n_targets, n_active + n_layers * n_pos + n_pos]: each source's direct effect on each target, from the
    gradients at the taps: a feature writes act * its decoder row into the MLP output of every layer it writes
    to (Transcoders.writes_to), an error node its error vector into its layer's, a token its embedding before
    layer 0. A feature's effect is its position's gradients dotted with its writes: one batched product per
    (layer, target layer) over positions (no gather of the gradients).
    below, n_pos: the targets read before layer `below`'s MLP output and at positions < n_pos (backward's cut),
    so sources at later layers or positions have no effect: their zeros are not computed. positions (a model with
    absolute positions, rm.pos_embed): n_pos more columns, each position's positional embedding's part of its
    token column (the same gradient dotted with hook_pos_embed's output), so the two parts split that column."""
    n_layers, p = rm.L if below is None else min(below, rm.L), n_pos or rm.P
    mlp = [grads[output_hook(layer)][:, :p] for layer in range(n_layers)]
    emb = grads[EMBED][:, :p]
    n_a = len(active)
    split = positions and rm.pos_embed is not None
    out = emb.new_zeros(emb.shape[0], n_a + rm.L * rm.P + rm.P + (rm.P if split else 0))
    for layer in range(n_layers):
        for target in rm.tcs.writes_to(layer):
            if target >= n_layers:
                break
            w = active.writes(rm, layer, target, emb.dtype)
            inside = w.flat < p * w.vectors.shape[1]  # features at positions < p
            effects = torch.einsum("bpd,pkd->bpk", mlp[target], w.vectors[:p]).flatten(1)
            out[:, w.idx[inside]] += effects[:, w.flat[inside]]
        start = n_a + layer * rm.P
        out[:, start : start + p] = torch.einsum("bpd,pd->bp", mlp[layer], rm.errors[layer][:p])
    start = n_a + rm.L * rm.P
    out[:, start : start + p] = torch.einsum("bpd,pd->bp", emb, rm.embed[:p])
    if split:
        out[:, start + rm.P : start + rm.P + p] = torch.einsum("bpd,pd->bp", emb, rm.pos_embed[:p])
    return out
