"""The feature-store build config: saved in the store's manifest and compared on resume.

Field metadata gives each CLI flag its help text (workbench.configflags), so defaults live here only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from workbench.configcheck import from_json, to_json
from workbench.corpus.base import SPLITS
from workbench.errors import BadValueError


@dataclass(frozen=True)
class FeatureConfig:
    split: str = field(
        default="heldout",
        metadata={"choices": SPLITS, "help": "cache split to read (held-out: the SAEs never trained on it)"},
    )
    n_tokens: int | None = field(
        default=None, metadata={"flag": "--tokens", "help": "rows of the split to read; None: all"}
    )
    chunk_rows: int = field(default=16384, metadata={"help": "rows per resumable chunk"})
    batch_rows: int = field(default=2048, metadata={"help": "rows per SAE encode (bounds the dense code matrix)"})
    n_top: int = field(default=20, metadata={"help": "top activating examples per unit"})
    n_bins: int = field(default=5, metadata={"help": "true quantile bins of each unit's non-zero activations"})
    per_bin: int = field(default=4, metadata={"help": "examples drawn from each quantile bin"})
    left: int = field(default=8, metadata={"help": "context tokens before each example token"})
    right: int = field(default=3, metadata={"help": "context tokens after each example token"})
    hist_bins: int = field(default=32, metadata={"help": "equal-width histogram bins of non-zero activations, 0..max"})
    n_logits: int = field(default=10, metadata={"help": "top and bottom tokens of each logit effect"})
    n_neighbours: int = field(
        default=10, metadata={"help": "neighbours per kind (decoder cosine, activation correlation)"}
    )
    corr_tokens: int = field(
        default=200_000, metadata={"help": "first rows of the pass used for activation correlations"}
    )
    n_pcs: int = field(default=16, metadata={"help": "principal components of the stream kept for the scaffold panel"})
    token_top: int = field(default=10, metadata={"help": "units kept per token for search by token"})

    def __post_init__(self):
        if self.split not in SPLITS:
            raise BadValueError(f"unknown split {self.split!r}; valid: {', '.join(SPLITS)}")
        if self.n_tokens is not None and self.n_tokens < 1:
            raise BadValueError(f"n_tokens must be >= 1 (or None for all), got {self.n_tokens}")
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name not in ("split", "n_tokens") and (
                not isinstance(v, int) or v < (0 if f.name in ("left", "right") else 1)
            ):
                raise BadValueError(f"{f.name} must be a positive integer, got {v!r}")

    @property
    def n_examples(self) -> int:
        return self.n_top + self.n_bins * self.per_bin

    @property
    def window(self) -> int:
        return self.left + 1 + self.right

    def to_dict(self) -> dict:
        return to_json(self)

    @classmethod
    def from_dict(cls, d: dict) -> FeatureConfig:
        return cls(**from_json(cls, d, None))  # a store from another version: its unknown keys are dropped
