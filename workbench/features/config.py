"""The feature-store build config: saved in the store's manifest and compared on resume."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from workbench.errors import UserError

SPLITS = ("train", "heldout")


class FeatureStoreError(UserError, ValueError):
    """A feature store cannot be built or read as asked; the message says why and what to do."""


@dataclass(frozen=True)
class FeatureConfig:
    split: str = "heldout"  # cache split read (held-out by default: the SAEs never trained on it)
    n_tokens: int | None = None  # rows of the split to read; None = all of them
    chunk_rows: int = 16384  # rows per resumable chunk
    batch_rows: int = 2048  # rows per SAE encode (bounds the dense code matrix)
    n_top: int = 20  # top activating examples per unit
    n_bins: int = 5  # quantile bins of each unit's non-zero activations
    per_bin: int = 4  # examples drawn from each quantile bin
    left: int = 8  # context tokens before the example token
    right: int = 3  # and after it
    hist_bins: int = 32  # equal-width histogram of non-zero activations, 0..max
    n_logits: int = 10  # top and bottom tokens of the logit effect
    n_neighbours: int = 10  # per kind (decoder cosine, activation correlation)
    corr_tokens: int = 200_000  # rows used for the activation correlation (first rows of the pass)
    n_pcs: int = 16  # principal components of the stream kept (scaffold panel)
    token_top: int = 10  # units kept per token for search by token

    def __post_init__(self):
        if self.split not in SPLITS:
            raise FeatureStoreError(f"unknown split {self.split!r}; valid: {', '.join(SPLITS)}")
        if self.n_tokens is not None and self.n_tokens < 1:
            raise FeatureStoreError(f"n_tokens must be >= 1 (or None for all), got {self.n_tokens}")
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name not in ("split", "n_tokens") and (not isinstance(v, int) or v < (0 if f.name in ("left", "right") else 1)):
                raise FeatureStoreError(f"{f.name} must be a positive integer, got {v!r}")

    @property
    def n_examples(self) -> int:
        return self.n_top + self.n_bins * self.per_bin

    @property
    def window(self) -> int:
        return self.left + 1 + self.right

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> FeatureConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})
