"""The closest units in the other dictionaries on one hook: is Top-k latent 525 the same thing in the Matryoshka SAE?

Unit indices of two dictionaries are unrelated, so a unit is matched, not looked up: by decoder direction (cosine
of the decoder rows; a block's span by subspace overlap) and by Pearson correlation of activations over the same
tokens (the first `corr_tokens` rows of the store's pass). The stores of the dictionaries built together on one
hook (`workbench features build` with several SAEs: they share one pass over the cache) are matched with each
other at build time and keep their matches as store files, so a feature page reads a few numbers, never a model.
Each store's manifest lists the others (`across`) in the order of the files' second axis, by their folder relative
to the store and the checksum of the weights they were matched with.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from workbench.features import compute

FILES = ("across_cos_ids", "across_cos_vals", "across_corr_ids", "across_corr_vals")


@dataclass
class Dictionary:
    """One dictionary of a build group: its folder, the checksum of its weights, its sparse decoder rows, its unit
    size (1: latents, b: blocks of b) and its unit activations [rows, units] over the group's shared rows."""

    folder: Path
    weights: str
    W: np.ndarray
    block: int
    acts: sp.csr_matrix

    @property
    def n_units(self) -> int:
        return self.W.shape[0] // self.block


def match(one: Dictionary, others: list[Dictionary], n: int) -> dict[str, np.ndarray]:
    """FILES as arrays [units of `one`, len(others), n] (ids -1 pad where another has fewer units or no positively
    correlated one): each unit's n closest units of every other dictionary, by decoder direction and by correlation."""
    shape = (one.n_units, len(others), n)
    out = {"across_cos_ids": np.full(shape, -1, np.int32), "across_corr_ids": np.full(shape, -1, np.int32)}
    out["across_cos_vals"], out["across_corr_vals"] = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
    for k, other in enumerate(others):
        for kind, (ids, vals) in (
            ("cos", compute.decoder_matches(one.W, one.block, other.W, other.block, n)),
            ("corr", compute.correlation_matches(one.acts, other.acts, n)),
        ):
            out[f"across_{kind}_ids"][:, k, : ids.shape[1]] = ids
            out[f"across_{kind}_vals"][:, k, : ids.shape[1]] = vals
    return out


def listing(one: Dictionary, others: list[Dictionary], store: Path) -> list[dict]:
    """The manifest's `across` entries: each other dictionary's folder relative to `store` and its weights' checksum."""
    return [
        {"sae": Path(os.path.relpath(o.folder.resolve(), store.resolve())).as_posix(), "sae_weights": o.weights}
        for o in others
    ]


def description(n_rows: int, split: str) -> dict:
    """How the matches were made, in the manifest's words (as its `neighbours`)."""
    return {
        "cosine": "cosine of decoder directions (a block's span: subspace overlap, sqrt(sum cos^2 of the principal "
        "angles / the smaller span's dimension))",
        "correlation": f"Pearson correlation of activations over the first {n_rows:,} {split} tokens",
    }
