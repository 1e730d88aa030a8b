"""The feature-store build config: saved in the store's manifest and compared on resume.

Field metadata gives each CLI flag its help text (workbench.configflags), so defaults live here only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.config import Config
from workbench.corpus.base import SPLITS
from workbench.errors import BadValueError


@dataclass(frozen=True)
class FeatureConfig(Config):
    error = BadValueError
    drop_unknown = True  # a store from another version: its unknown keys are dropped

    split: str = field(
        default="heldout",
        metadata={"choices": SPLITS, "help": "cache split to read (held-out: the SAEs never trained on it)"},
    )
    n_tokens: int | None = field(
        default=None, metadata={"min": 1, "flag": "--tokens", "help": "rows of the split to read; None: all"}
    )
    chunk_rows: int = field(default=16384, metadata={"min": 1, "help": "rows per resumable chunk"})
    batch_rows: int = field(
        default=2048, metadata={"min": 1, "help": "rows per SAE encode (bounds the dense code matrix)"}
    )
    n_top: int = field(default=20, metadata={"min": 1, "help": "top activating examples per unit"})
    n_bins: int = field(
        default=5, metadata={"min": 1, "help": "true quantile bins of each unit's non-zero activations"}
    )
    per_bin: int = field(default=4, metadata={"min": 1, "help": "examples drawn from each quantile bin"})
    left: int = field(default=8, metadata={"help": "context tokens before each example token"})
    right: int = field(default=3, metadata={"help": "context tokens after each example token"})
    hist_bins: int = field(
        default=32, metadata={"min": 1, "help": "equal-width histogram bins of non-zero activations, 0..max"}
    )
    n_logits: int = field(default=10, metadata={"min": 1, "help": "top and bottom tokens of each logit effect"})
    n_neighbours: int = field(
        default=10, metadata={"min": 1, "help": "neighbours per kind (decoder cosine, activation correlation)"}
    )
    n_across: int = field(
        default=5,
        metadata={"min": 1, "help": "closest units kept per other dictionary built on the same hook (both kinds)"},
    )
    corr_tokens: int = field(
        default=200_000, metadata={"min": 1, "help": "first rows of the pass used for activation correlations"}
    )
    n_pcs: int = field(
        default=16, metadata={"min": 1, "help": "principal components of the stream kept for the scaffold panel"}
    )
    token_top: int = field(default=10, metadata={"min": 1, "help": "units kept per token for search by token"})

    @property
    def n_examples(self) -> int:
        return self.n_top + self.n_bins * self.per_bin

    @property
    def window(self) -> int:
        return self.left + 1 + self.right
