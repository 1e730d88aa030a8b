"""The dictionaries interventions act on, behind one shape: `Site` (where a dictionary reads, where it writes, its
sae-lens object) and `Unit` (which of its codes one feature is: a latent, a block of a block-sparse SAE, or a
scaffold's dense coordinates).

An SAE folder is one site (it reads and writes its hook); a transcoder set is one site per layer (each reads its
MLP's input and writes hook_mlp_out); a cross-layer transcoder is one `TranscoderSite` per layer, read through the
circuits' dictionary interface (`workbench.circuits.feature.transcoders`): layer l's features read its MLP input and
write the MLP output of every layer in writes_to(l), so a site has one change per write hook. This module is the one
place that knows how a dictionary folder is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from workbench.circuits.feature.replacement import EMBED  # noqa: F401  (where a graph's embedding nodes write)
from workbench.dictionaries.folders import open_folder
from workbench.dictionaries.kinds import SAE, TRANSCODERS, kind_of
from workbench.dictionaries.transcoders import output_hook
from workbench.errors import BadValueError, MissingInputError
from workbench.interventions.config import parse_feature


@dataclass
class Site:
    """One dictionary at one place: codes = sae.encode(activation at read_hook); its decoded output stands for the
    activation at write_hook (the same hook for an SAE)."""

    layer: int | None
    read_hook: str
    write_hook: str
    sae: object

    @property
    def d_sae(self) -> int:
        return self.sae.cfg.d_sae

    @property
    def n_sparse(self) -> int:
        return self.sae.cfg.d_sae - int(getattr(self.sae.cfg, "scaffold_rank", 0))

    @property
    def write_hooks(self) -> list[str]:
        """Every hook the site's decoded output writes into, in the forward's order (the first is write_hook)."""
        return [self.write_hook]

    @property
    def block_size(self) -> int:
        return int(getattr(self.sae.cfg, "block_size", 1))

    @torch.no_grad()
    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.sae.encode(x.to(self.sae.dtype)).to(x.dtype)

    def preacts(self, x: torch.Tensor) -> torch.Tensor:
        """[.., n_sparse] pre-activations of inputs x (what an attribution graph's edges into a feature move)."""
        from workbench.circuits.feature.transcoders import sae_preacts

        return sae_preacts(self.sae, x)[0]

    @torch.no_grad()
    def decode_changes(self, old: torch.Tensor, new: torch.Tensor, dtype) -> list[torch.Tensor]:
        """What the decoded output changes by at each write hook when the codes go from old to new (a skip path,
        which reads the input, does not change): zero exactly where they are equal."""
        both = self.sae.decode(torch.stack([new, old]).to(self.sae.dtype))  # one call: a generated token's is small
        return [(both[0] - both[1]).to(dtype)]

    def decoder_row(self, latent: int) -> torch.Tensor:
        """[d_out]: what one unit of `latent` writes at write_hook."""
        return self.sae.W_dec[latent].detach()


@dataclass
class TranscoderSite(Site):
    """Layer `layer` of a dictionary read through the transcoder interface (a cross-layer transcoder): codes are
    tcs.encode(layer, MLP input), and a change of codes writes (new - old) @ decoder(layer, t) into the MLP output of
    every layer t in tcs.writes_to(layer). Its codes are sparse features only (sae is None)."""

    tcs: object = None

    @classmethod
    def of(cls, tcs, layer: int) -> TranscoderSite:
        return cls(layer, tcs.input_hook(layer), output_hook(layer), None, tcs)

    @property
    def d_sae(self) -> int:
        return self.tcs.d_sae(self.layer)

    @property
    def n_sparse(self) -> int:
        return self.tcs.n_sparse(self.layer)

    @property
    def block_size(self) -> int:
        return 1

    @property
    def write_hooks(self) -> list[str]:
        return [output_hook(t) for t in self.tcs.writes_to(self.layer)]

    @torch.no_grad()
    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.tcs.encode(self.layer, x)

    def preacts(self, x: torch.Tensor) -> torch.Tensor:
        return self.tcs.preacts(self.layer, x)[0]

    @torch.no_grad()
    def decode_changes(self, old: torch.Tensor, new: torch.Tensor, dtype) -> list[torch.Tensor]:
        d = (new - old).to(dtype)
        every = torch.arange(self.d_sae)
        return [d @ self.tcs.decoder(self.layer, t, every).to(dtype) for t in self.tcs.writes_to(self.layer)]

    def decoder_row(self, latent: int) -> torch.Tensor:
        return self.tcs.decoder(self.layer, self.layer, torch.tensor([latent]))[0]


@dataclass
class Unit:
    """Feature `name` of `site`: code coordinates `index` (one latent, a block's, or the scaffold's)."""

    name: str
    site: Site
    index: torch.Tensor
    kind: str  # "latent" | "block" | "scaffold"


def load_dictionary(folder, model, device: str = "cpu", member: int | str = 0) -> list[Site]:
    """The sites of an SAE folder, a transcoder set folder (member: which config of each layer's, by index or
    config name) or a cross-layer transcoder folder, checked against the model's hooks."""
    folder = Path(folder)
    if not folder.is_dir():
        raise MissingInputError(
            f"dictionary {str(folder)!r} is not a folder (an SAE folder, a transcoder set or a cross-layer transcoder)"
        )
    if kind_of(folder, SAE).replaces_mlps:
        tcs = open_folder(folder).load(member, device, model)
        if tcs.kind is not TRANSCODERS:  # read through the interface: writes to several layers
            return [TranscoderSite.of(tcs, layer) for layer in range(tcs.n_layers)]
        return [Site(t.layer, t.input_hook, output_hook(t.layer), t.sae) for t in tcs.members]
    sae = open_folder(folder).load(device=device)
    meta = sae.cfg.metadata
    read = getattr(meta, "hook_name", None)
    write = getattr(meta, "hook_name_out", None) or read
    for hook in (read, write):
        if hook not in model.hook_dict:
            raise BadValueError(f"the dictionary in {folder} reads or writes hook {hook!r}, which this model lacks")
    layer = _layer_of(write)
    return [Site(layer, read, write, sae)]


def _layer_of(hook: str) -> int | None:
    parts = hook.split(".")
    return int(parts[1]) if len(parts) > 2 and parts[0] == "blocks" and parts[1].isdigit() else None


def resolve(sites: list[Site], spec: str) -> Unit:
    """The unit a '[layer:]index' names: a latent (a block for block-sparse SAEs) or 'scaffold'. One site: the
    layer may be left out; several (a transcoder set): it is required."""
    layer, index = parse_feature(spec)
    if len(sites) == 1 and layer in (None, sites[0].layer):
        site = sites[0]
    else:
        by_layer = {s.layer: s for s in sites}
        if layer not in by_layer:
            raise BadValueError(
                f"feature {spec!r}: the dictionary has layers {sorted(by_layer)}; name one as layer:index (e.g. "
                f"{sorted(by_layer)[0]}:{index})"
            )
        site = by_layer[layer]
    r = site.d_sae - site.n_sparse
    if index == "scaffold":
        if not r:
            raise BadValueError(f"feature {spec!r}: the dictionary has no scaffold (scaffold_rank 0)")
        return Unit(spec, site, torch.arange(site.n_sparse, site.n_sparse + r), "scaffold")
    b = site.block_size
    n_units = site.n_sparse // b
    if index >= n_units:
        what = "blocks" if b > 1 else "latents"
        raise BadValueError(f"feature {spec!r}: index {index} is outside the dictionary's {n_units} {what}")
    return Unit(spec, site, torch.arange(index * b, (index + 1) * b), "block" if b > 1 else "latent")
