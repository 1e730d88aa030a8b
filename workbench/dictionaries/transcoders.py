"""What replaces the MLPs (docs/methods.md §11): the one interface every consumer of a dictionary reads through
(the replacement model, feature patching, attribution graphs, the head split, QK attribution, feature circuits,
the exports, `attention compare --transcoders`, the app and `workbench ls`).

`Transcoders` is the interface. Layer l's features read layer l's MLP input; each feature writes into the MLP
output of every layer in `writes_to(l)`; the replacement's MLP output at a layer sums the writes of every
feature that reaches it (`reconstruct`), and the error at a layer is the true MLP output minus that. A per-layer
set (`PerLayerTranscoders`: one transcoder per layer, writing its own layer only) implements it today; a
cross-layer transcoder (features at l writing every l' >= l) implements the same methods with
`writes_to(l) = range(l, n_layers)`.

The folders these are loaded from (a set's `TranscoderSet`, a CLT's `CLTFolder`) are in folders.py; this
interface moved here from workbench.circuits.feature.transcoders (which re-exports it) so the readers below the
circuits (interventions, browse, the app) need not reach up for it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from workbench.dictionaries.kinds import CLT, TRANSCODERS, Kind
from workbench.errors import BadValueError

if TYPE_CHECKING:
    import torch


def output_hook(layer: int) -> str:
    """Where layer `layer`'s replacement writes: the MLP output."""
    return f"blocks.{layer}.hook_mlp_out"


class Transcoders(ABC):
    """Dictionaries replacing every MLP of one model. Layers are 0..n_layers-1; codes are [.., d_sae(layer)],
    the first n_sparse(layer) of them sparse features (the rest a scaffold's dense coordinates)."""

    n_layers: int
    kind: Kind  # its row in the kinds table (what an export of it builds)
    source: object | None = None  # the DictionaryFolder (folders.py) it was loaded from (None: built in memory)

    @abstractmethod
    def input_hook(self, layer: int) -> str:
        """The hook layer `layer`'s encoder reads (the MLP's input)."""

    @abstractmethod
    def d_in(self, layer: int) -> int: ...

    @abstractmethod
    def d_out(self, layer: int) -> int: ...

    @abstractmethod
    def d_sae(self, layer: int) -> int: ...

    @abstractmethod
    def n_sparse(self, layer: int) -> int: ...

    @abstractmethod
    def writes_to(self, layer: int) -> range:
        """The layers whose MLP output layer `layer`'s features write into (a per-layer set: its own)."""

    @abstractmethod
    def preacts(self, layer: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(pre-activations [.., n_sparse], codes [.., d_sae]) of layer `layer`'s inputs x."""

    @abstractmethod
    def encode(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """Codes [.., d_sae] of layer `layer`'s inputs x (differentiable in x)."""

    @abstractmethod
    def decoder(self, layer: int, target: int, latents: torch.Tensor) -> torch.Tensor:
        """[len(latents), d_out]: what each latent of layer `layer` writes per unit activation into layer
        `target`'s MLP output (zeros when `target` is not in writes_to(layer))."""

    @abstractmethod
    def skip(self, layer: int, x: torch.Tensor) -> torch.Tensor | None:
        """Layer `layer`'s linear skip path from its input x, or None."""

    @abstractmethod
    def reconstruct(self, layer: int, codes: Sequence[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """The replacement's MLP output at `layer`: the writes of every layer reaching it (codes[s] are layer s's
        codes, for every s up to `layer`) plus the skip path of its input x."""

    @abstractmethod
    def parameters(self):
        """Every parameter tensor (what a build's fingerprint sums)."""

    def error(self, layer: int, codes: Sequence[torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The error node's value at `layer`: the true MLP output y minus the replacement's."""
        return y - self.reconstruct(layer, codes, x)

    def encoder_vectors(self, layer: int, latents: torch.Tensor, dtype) -> torch.Tensor:
        """[len(latents), d_in]: d pre-activation / d input of each latent. Every architecture's pre-activation is
        affine in its input (a scaffold's residual input included), so pre(e_i) - pre(0) is exact."""
        import torch

        d_in = self.d_in(layer)
        basis = torch.cat([torch.eye(d_in), torch.zeros(1, d_in)]).to(dtype)
        pre, _ = self.preacts(layer, basis)
        return (pre[:-1] - pre[-1:])[:, latents].T.contiguous()

    def fingerprint(self) -> list[float]:
        """One number per parameter group that changes when any weight does (a resumed build's key)."""
        return [float(sum(p.detach().double().sum() for p in group)) for group in self.parameters()]

    def check(self, model) -> Transcoders:
        """self, if it replaces every MLP of `model` at its widths; a one-line error otherwise."""
        n = model.cfg.n_layers
        if getattr(model.cfg, "attn_only", False):
            raise BadValueError("the model is attention-only: it has no MLPs for transcoders to replace")
        self._check_layers(n)
        for layer in range(n):
            d_in, d_out = self.d_in(layer), self.d_out(layer)
            if d_in != model.cfg.d_model or d_out != model.cfg.d_model:
                raise BadValueError(
                    f"layer {layer}'s transcoder maps width {d_in} -> {d_out}, but this model's MLP maps "
                    f"{model.cfg.d_model} -> {model.cfg.d_model}: the set belongs to another model"
                )
        return self

    def _check_layers(self, n: int) -> None:
        if self.n_layers != n:
            raise BadValueError(f"the transcoders replace {self.n_layers} layers, but the model has {n}")


@dataclass
class Transcoder:
    """One layer's transcoder: a sae-lens SAE with d_out, reading `input_hook` and replacing hook_mlp_out."""

    layer: int
    sae: object
    input_hook: str

    @property
    def n_sparse(self) -> int:
        return self.sae.cfg.d_sae - int(getattr(self.sae.cfg, "scaffold_rank", 0))


class PerLayerTranscoders(Transcoders):
    """One transcoder per MLP layer, each writing its own layer's MLP output only."""

    kind = TRANSCODERS

    def __init__(self, members: Sequence[Transcoder], source=None):
        by_layer = {t.layer: t for t in members}
        self.layers = sorted(by_layer)
        self.members = [by_layer[layer] for layer in self.layers]
        self.n_layers = len(self.members)
        self.source = source

    def _check_layers(self, n: int) -> None:
        missing = [layer for layer in range(n) if layer not in self.layers]
        if missing:
            raise BadValueError(
                f"the transcoder set lacks layer(s) {missing} of the model's {n}; the replacement model replaces "
                "every MLP, so train the set with --transcoders all"
            )
        extra = [layer for layer in self.layers if layer >= n]
        if extra:
            raise BadValueError(f"the transcoder set has layer {extra[0]}, but the model has layers 0..{n - 1}")

    def _sae(self, layer: int):
        return self.members[layer].sae

    def input_hook(self, layer: int) -> str:
        return self.members[layer].input_hook

    def d_in(self, layer: int) -> int:
        return self._sae(layer).cfg.d_in

    def d_out(self, layer: int) -> int:
        return getattr(self._sae(layer).cfg, "d_out", None)

    def d_sae(self, layer: int) -> int:
        return self._sae(layer).cfg.d_sae

    def n_sparse(self, layer: int) -> int:
        return self.members[layer].n_sparse

    def writes_to(self, layer: int) -> range:
        return range(layer, layer + 1)

    def preacts(self, layer: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return sae_preacts(self._sae(layer), x)

    def encode(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        sae = self._sae(layer)
        return sae.encode(x.to(sae.dtype)).to(x.dtype)

    def decoder(self, layer: int, target: int, latents: torch.Tensor) -> torch.Tensor:
        w = self._sae(layer).W_dec.detach()[latents]
        return w if target == layer else w.new_zeros(w.shape)

    def skip(self, layer: int, x: torch.Tensor) -> torch.Tensor | None:
        w = getattr(self._sae(layer), "W_skip", None)
        return None if w is None else x @ w.detach().T.to(x.dtype)

    def reconstruct(self, layer: int, codes: Sequence[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        sae = self._sae(layer)
        out = sae.decode(codes[layer].to(sae.dtype)).to(x.dtype)
        s = self.skip(layer, x)
        return out if s is None else out + s

    def parameters(self):
        return [list(t.sae.parameters()) for t in self.members]


class CrossLayerTranscoders(Transcoders):
    """A cross-layer transcoder (workbench.sae.clt): layer l's features read layer l's MLP input and write the MLP
    output of every layer l..n_layers-1. Its codes are its sparse features only (a scaffold, whose dense path
    writes several layers, and a Top-k budget shared across layers, which cannot encode one layer alone, are
    refused)."""

    kind = CLT

    def __init__(self, clt, input_hooks: Sequence[str], source=None):
        cfg = clt.cfg
        if cfg.scaffold_rank or (cfg.clt_sparsity == "shared" and cfg.architecture == "topk"):
            raise BadValueError(
                f"CLT {cfg.name!r}: graphs read CLTs without a scaffold and with a per-layer (or BatchTopK) budget"
            )
        self.clt, self.hooks, self.n_layers, self.source = clt, list(input_hooks), clt.n_layers, source

    def input_hook(self, layer: int) -> str:
        return self.hooks[layer]

    def d_in(self, layer: int) -> int:
        return self.clt.cfg.d_in

    def d_out(self, layer: int) -> int:
        return self.clt.cfg.d_out

    def d_sae(self, layer: int) -> int:
        return self.clt.cfg.n_latents

    def n_sparse(self, layer: int) -> int:
        return self.clt.cfg.n_latents

    def writes_to(self, layer: int) -> range:
        return range(layer, self.n_layers)

    def _pre(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        m = self.clt.members[layer]
        _, _, _, enc_in = m._inputs(x.reshape(-1, x.shape[-1]).float())
        return (enc_in @ m.W_enc.detach().T + m.b_enc.detach()).view(*x.shape[:-1], -1)

    def preacts(self, layer: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        with torch.no_grad():
            return self._pre(layer, x).to(x.dtype), self.encode(layer, x)

    def encode(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """The member's inference rule picks the latents (no gradient through the choice); their values are the
        pre-activations, differentiable in x."""
        import torch

        flat = x.reshape(-1, x.shape[-1])
        chosen = self.clt.encode(layer, flat.detach().float()) != 0
        pre = self._pre(layer, x).reshape(flat.shape[0], -1)
        return torch.where(chosen, pre, torch.zeros_like(pre)).view(*x.shape[:-1], -1).to(x.dtype)

    def decoder(self, layer: int, target: int, latents: torch.Tensor) -> torch.Tensor:
        return self.clt.decoder(layer, target)[latents]

    def skip(self, layer: int, x: torch.Tensor) -> torch.Tensor | None:
        w = self.clt.W_skip
        if w is None:
            return None
        scale = self.clt.members[layer].input_scale / self.clt.output_scale[layer]
        return x @ (w[layer].detach() * scale).T.to(x.dtype)

    def reconstruct(self, layer: int, codes: Sequence[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        out = self.clt.bias(layer).to(x.dtype) + sum(
            codes[s].to(x.dtype) @ self.clt.decoder(s, layer).to(x.dtype) for s in range(layer + 1)
        )
        s = self.skip(layer, x)
        return out if s is None else out + s

    def parameters(self):
        return [list(m.parameters()) for m in self.clt.members]


def sae_preacts(sae, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(pre-activations, codes) of one sae-lens dictionary's inputs x, through its own encode: the pre-activations
    read at its hook_sae_acts_pre (what an attribution graph's edges into a feature move)."""
    import torch

    seen = {}
    handle = sae.hook_sae_acts_pre.register_forward_hook(lambda m, i, o: seen.__setitem__("h", o))
    try:
        with torch.no_grad():
            codes = sae.encode(x.to(sae.dtype))
    finally:
        handle.remove()
    return seen["h"].to(x.dtype), codes.to(x.dtype)
