"""The dictionaries interventions act on, behind one shape: `Site` (where a dictionary reads, where it writes, its
sae-lens object) and `Unit` (which of its codes one feature is: a latent, a block of a block-sparse SAE, or a
scaffold's dense coordinates).

An SAE folder is one site (it reads and writes its hook); a transcoder set is one site per layer (each reads its
MLP's input and writes hook_mlp_out). This module is the one place that knows how a transcoder set is loaded
(the circuits' dictionary interface, `workbench.circuits.feature.transcoders`), so a cross-layer dictionary is added here only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from workbench.circuits.feature.replacement import EMBED  # noqa: F401  (where a graph's embedding nodes write)
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
    def n_sparse(self) -> int:
        return self.sae.cfg.d_sae - int(getattr(self.sae.cfg, "scaffold_rank", 0))

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
    def decode_change(self, old: torch.Tensor, new: torch.Tensor, dtype) -> torch.Tensor:
        """What the decoded output changes by when the codes go from old to new (a skip path, which reads the input,
        does not change): zero exactly where they are equal."""
        d = self.sae.decode(new.to(self.sae.dtype)) - self.sae.decode(old.to(self.sae.dtype))
        return d.to(dtype)


@dataclass
class Unit:
    """Feature `name` of `site`: code coordinates `index` (one latent, a block's, or the scaffold's)."""

    name: str
    site: Site
    index: torch.Tensor
    kind: str  # "latent" | "block" | "scaffold"


def load_dictionary(folder, model, device: str = "cpu", member: int | str = 0) -> list[Site]:
    """The sites of an SAE folder or a transcoder set folder (member: which config of each layer's, by index or
    config name), checked against the model's hooks."""
    from workbench.sae.transcoders import is_set

    folder = Path(folder)
    if not folder.is_dir():
        raise MissingInputError(f"dictionary {str(folder)!r} is not a folder (an SAE folder or a transcoder set)")
    if is_set(folder):
        from workbench.circuits.feature.transcoders import open_set

        tcs = open_set(folder).load(member, device, model)
        return [Site(t.layer, t.input_hook, f"blocks.{t.layer}.hook_mlp_out", t.sae) for t in tcs.members]
    from workbench.sae.io import load_sae

    sae = load_sae(folder, device=device).eval()
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
    r = site.sae.cfg.d_sae - site.n_sparse
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
