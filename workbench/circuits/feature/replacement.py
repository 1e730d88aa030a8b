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
from workbench.errors import BadValueError

EMBED = "blocks.0.hook_resid_pre"
FINAL = "ln_final.hook_normalized"  # before ln_final's weight and bias, which unembed_vectors apply
FROZEN = ("hook_pattern", "hook_scale")
HELD = 2  # forward passes backward keeps for reuse (the head split alternates two kinds)
WRITES_KEPT_MIB = 1536  # feature writes kept between batches up to this size (ActiveFeatures.writes)


@dataclass
class Transcoder:
    """One layer's transcoder: a sae-lens SAE with d_out, reading `input_hook` and replacing hook_mlp_out."""

    layer: int
    sae: object
    input_hook: str

    @property
    def n_sparse(self) -> int:
        return self.sae.cfg.d_sae - int(getattr(self.sae.cfg, "scaffold_rank", 0))

    def skip(self, x: torch.Tensor) -> torch.Tensor | None:
        w = getattr(self.sae, "W_skip", None)
        return None if w is None else x @ w.detach().T.to(x.dtype)

    def output(self, x: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        out = self.sae.decode(codes.to(self.sae.dtype)).to(x.dtype)
        s = self.skip(x)
        return out if s is None else out + s

    @torch.no_grad()
    def preacts(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(pre-activations [.., n_sparse], codes [.., d_sae]) of inputs x, through sae-lens's own encode."""
        seen = {}
        handle = self.sae.hook_sae_acts_pre.register_forward_hook(lambda m, i, o: seen.__setitem__("h", o))
        try:
            codes = self.sae.encode(x.to(self.sae.dtype))
        finally:
            handle.remove()
        return seen["h"].to(x.dtype), codes.to(x.dtype)

    @torch.no_grad()
    def encoder_vectors(self, latents: torch.Tensor, dtype) -> torch.Tensor:
        """[len(latents), d_in]: d pre-activation / d input of each latent. Every architecture's pre-activation is
        affine in its input (the scaffold's residual input included), so pre(e_i) - pre(0) is exact."""
        d_in = self.sae.cfg.d_in
        basis = torch.cat([torch.eye(d_in), torch.zeros(1, d_in)]).to(dtype)
        pre, _ = self.preacts(basis)
        return (pre[:-1] - pre[-1:])[:, latents].T.contiguous()


def check_transcoders(model, transcoders: list[Transcoder]) -> list[Transcoder]:
    """One transcoder per MLP layer of `model`, of its widths; sorted by layer. A one-line error otherwise."""
    n = model.cfg.n_layers
    if getattr(model.cfg, "attn_only", False):
        raise BadValueError("the model is attention-only: it has no MLPs for transcoders to replace")
    by_layer = {t.layer: t for t in transcoders}
    missing = [layer for layer in range(n) if layer not in by_layer]
    if missing:
        raise BadValueError(
            f"the transcoder set lacks layer(s) {missing} of the model's {n}; the replacement model replaces every "
            "MLP, so train the set with --transcoders all"
        )
    extra = sorted(set(by_layer) - set(range(n)))
    if extra:
        raise BadValueError(f"the transcoder set has layer {extra[0]}, but the model has layers 0..{n - 1}")
    for t in by_layer.values():
        d_in, d_out = t.sae.cfg.d_in, getattr(t.sae.cfg, "d_out", None)
        if d_in != model.cfg.d_model or d_out != model.cfg.d_model:
            raise BadValueError(
                f"layer {t.layer}'s transcoder maps width {d_in} -> {d_out}, but this model's MLP maps "
                f"{model.cfg.d_model} -> {model.cfg.d_model}: the set belongs to another model"
            )
    return [by_layer[layer] for layer in range(n)]


class ReplacementModel:
    """The frozen replacement model of `model` at `tokens` [pos] (one real forward pass at construction).

    Attributes from that pass: `codes[l]` [pos, d_sae] (the transcoder's activations, a sparse tensor), `errors[l]` [pos, d_model]
    (true MLP output - transcoder output), `embed` [pos, d_model] (what enters the residual stream before layer
    0), `logits` [d_vocab] at the last position. Layer index n_layers stands for the final residual (the logits).
    """

    def __init__(self, model, transcoders: list[Transcoder], tokens: torch.Tensor, position_step: int | None = None):
        self.model = model
        self.position_step = position_step  # backward's cut (see there); None: every backward runs the whole prompt
        self.tcs = check_transcoders(model, transcoders)
        self.L = model.cfg.n_layers
        self.tokens = torch.as_tensor(tokens).reshape(-1).to(model.cfg.device)
        self.P = self.tokens.numel()
        self.final = FINAL if FINAL in model.hook_dict else f"blocks.{self.L - 1}.hook_resid_post"
        self.inputs = [t.input_hook for t in self.tcs] + [self.final]
        wanted = set(self.inputs) | {EMBED} | {f"blocks.{layer}.hook_mlp_out" for layer in range(self.L)}
        with mlp_in_hooks(model, self.inputs), torch.no_grad():
            logits, cache = model.run_with_cache(
                self.tokens[None], names_filter=lambda n: n in wanted or n.endswith(FROZEN + ("attn.hook_v",))
            )
        self.frozen = {n: v for n, v in cache.items() if n.endswith(FROZEN)}
        self.values = {n: v for n, v in cache.items() if n.endswith("attn.hook_v")}  # what no_attention holds fixed
        self.logits = logits[0, -1]
        self.embed = cache[EMBED][0]
        self.x = [cache[t.input_hook][0] for t in self.tcs]
        self.codes, self.errors, self.base = [], [], []
        self._held = {}  # (copies, highest layer, options) -> (live, taps) of the forward passes backward reuses
        with torch.no_grad():
            self._replace_mlps(cache)

    def _replace_mlps(self, cache) -> None:
        for t, x in zip(self.tcs, self.x):
            y = cache[f"blocks.{t.layer}.hook_mlp_out"][0]
            _, codes = t.preacts(x)
            self.codes.append(codes.to_sparse().coalesce())  # dense, 12 layers x 1,024 x 24,576 would be 1.2 GB
            self.errors.append(y - t.output(x, codes))
            s = t.skip(x)
            self.base.append(y if s is None else y - s)  # so that base + skip(live input) is the MLP's output

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

        def mlp(act, hook, tc):
            def base(act):
                s = tc.skip(live[tc.input_hook])
                b = self.base[tc.layer][: act.shape[1]].expand_as(act)
                return b if s is None else b + s

            return tap(act, hook, base)

        hooks = [(lambda n: n.endswith(FROZEN), frozen)]
        hooks += [(n, record) for n in (*self.inputs, *extra)] + [(EMBED, tap)]
        hooks += [(f"blocks.{t.layer}.hook_mlp_out", lambda a, hook, t=t: mlp(a, hook, t)) for t in self.tcs]
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


def member_name(names: list[str], member: int | str) -> str:
    """Which of a layer's transcoders (folder names 'L{layer}-{config}') `member` picks: by index or config name."""
    if isinstance(member, int):
        if not 0 <= member < len(names):
            raise BadValueError(f"member {member} is not in 0..{len(names) - 1} of the set's configs {names}")
        return names[member]
    match = [n for n in names if n.split("-", 1)[-1] == member]
    if not match:
        raise BadValueError(f"the set has no config {member!r}; its configs: {[n.split('-', 1)[-1] for n in names]}")
    return match[0]


def load_transcoders(folder, member: int | str = 0, device: str = "cpu", model=None) -> list[Transcoder]:
    """A transcoder set folder's transcoders (member: which of each layer's configs, by index or config name).
    model: refuse a set recorded for other weights (same widths would pass check_transcoders silently)."""
    from pathlib import Path

    from workbench.provenance import model_id
    from workbench.sae.io import load_sae
    from workbench.sae.transcoders import load_set

    manifest = load_set(folder)
    if model is not None and manifest.get("model") != model_id(model):
        raise BadValueError(
            f"the transcoder set {str(folder)!r} was trained on {manifest.get('model')!r}, not on this model "
            f"{model_id(model)!r}: the set belongs to another model; train one on it (workbench sae train --transcoders)"
        )
    out = []
    for entry in manifest["layers"]:
        sae = load_sae(Path(folder) / member_name(entry["transcoders"], member), device=device).eval()
        out.append(Transcoder(int(entry["layer"]), sae, entry["input_hook"]))
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
        for t, codes in zip(rm.tcs, rm.codes):
            (pos, latent), act = codes.indices(), codes.values()
            parts.append((torch.full_like(pos, t.layer), pos, latent, act, latent < t.n_sparse))
        return cls(*(torch.cat(p) for p in zip(*parts)))

    def __len__(self) -> int:
        return self.layer.numel()

    def at(self, layer: int) -> torch.Tensor:
        return (self.layer == layer).nonzero().flatten()

    def forget_writes(self) -> None:
        """Drop the kept feature writes (n_active x d in all), e.g. before a graph's pruning."""
        self.__dict__.pop("_writes", None)

    def writes(self, rm: ReplacementModel, layer: int, dtype) -> LayerWrites:
        """Layer `layer`'s feature writes, padded per position: formed once and kept while all layers' take at
        most WRITES_KEPT_MIB (n_active x d in all), else formed again per batch (a gather, cheap next to the
        backward pass), so a long prompt's graph does not hold a second copy of every active decoder row."""
        cache = self.__dict__.setdefault("_writes", {})
        if layer in cache:
            return cache[layer]
        w = LayerWrites.of(rm, self, layer, dtype)
        if len(self) * w.vectors.shape[-1] * w.vectors.element_size() <= WRITES_KEPT_MIB * 2**20:
            cache[layer] = w
        return w


@dataclass
class LayerWrites:
    """One layer's feature writes laid out by position: `vectors` [pos, slots, d] (act * W_dec[latent] of the
    position's features, zeros in unused slots); feature idx[i] (an index into ActiveFeatures) sits at flat
    slot `flat[i]` = pos * slots + its rank among its position's features."""

    idx: torch.Tensor
    flat: torch.Tensor
    vectors: torch.Tensor

    @classmethod
    def of(cls, rm: ReplacementModel, active: ActiveFeatures, layer: int, dtype) -> LayerWrites:
        idx = active.at(layer)
        pos = active.pos[idx]
        first = torch.searchsorted(pos, pos)  # features are sorted by position within a layer
        rank = torch.arange(idx.numel()) - first
        slots = int(rank.max()) + 1 if idx.numel() else 1
        vectors = torch.zeros(rm.P * slots, rm.embed.shape[1], dtype=dtype, device=rm.embed.device)
        flat = pos * slots + rank
        vectors[flat] = rm.tcs[layer].sae.W_dec.detach()[active.latent[idx]].to(dtype) * active.act[idx, None]
        return cls(idx, flat, vectors.reshape(rm.P, slots, -1))


def source_rows(
    rm: ReplacementModel, active: ActiveFeatures, grads: dict, below: int | None = None, n_pos: int | None = None
) -> torch.Tensor:
    """[n_targets, n_active + n_layers * n_pos + n_pos]: each source's direct effect on each target, from the
    gradients at the taps: a feature writes act * W_dec[latent] into its layer's MLP output, an error node its
    error vector there, a token its embedding before layer 0. A feature's effect is its position's gradient
    dotted with its write: one batched product per layer over positions (no gather of the gradients).
    below, n_pos: the targets read before layer `below`'s MLP output and at positions < n_pos (backward's cut),
    so sources at later layers or positions have no effect: their zeros are not computed."""
    n_layers, p = rm.L if below is None else min(below, rm.L), n_pos or rm.P
    mlp = [grads[f"blocks.{layer}.hook_mlp_out"][:, :p] for layer in range(n_layers)]
    emb = grads[EMBED][:, :p]
    n_a = len(active)
    out = emb.new_zeros(emb.shape[0], n_a + rm.L * rm.P + rm.P)
    for layer in range(n_layers):
        w = active.writes(rm, layer, emb.dtype)
        inside = w.flat < p * w.vectors.shape[1]  # features at positions < p
        effects = torch.einsum("bpd,pkd->bpk", mlp[layer], w.vectors[:p]).flatten(1)
        out[:, w.idx[inside]] = effects[:, w.flat[inside]]
        start = n_a + layer * rm.P
        out[:, start : start + p] = torch.einsum("bpd,pd->bp", mlp[layer], rm.errors[layer][:p])
    out[:, n_a + rm.L * rm.P :][:, :p] = torch.einsum("bpd,pd->bp", emb, rm.embed[:p])
    return out
