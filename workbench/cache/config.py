"""The harvest config: saved in every manifest, and compared on --resume so a resumed harvest
cannot silently mix two different configs in one cache."""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.config import Config
from workbench.errors import BadValueError

DTYPES = ("float32", "float16", "bfloat16")
# the bounds (workbench.config) a harvest is asked for and a cache records
HELDOUT = {"min": 0.0, "max": 1.0, "open": "max"}  # leaves train rows
UNKNOWN = {"min": 0.0, "max": 1.0}
OUTLIER = {"min": 1.0, "open": "min"}


@dataclass
class HarvestConfig(Config):
    """What a harvest may choose (harvest(), `workbench cache`); CacheConfig records the resolved values."""

    error = BadValueError

    n_tokens: int = field(
        default=200_000,
        metadata={"flag": "--tokens", "min": 1, "help": "activation rows to store, train + held-out"},
    )
    ctx_len: int | None = field(
        default=None, metadata={"min": 1, "help": "tokens per sequence; None: the model's n_ctx"}
    )
    batch_size: int = field(default=64, metadata={"min": 1, "help": "sequences per forward pass"})
    dtype: str = field(default="float16", metadata={"choices": DTYPES, "help": "storage dtype (stats are float32)"})
    shard_tokens: int | None = field(
        default=None,
        metadata={"min": 1, "help": "rows per shard, the unit of resume; None: about 1 GiB of activations"},
    )
    heldout_fraction: float = field(
        default=0.05,
        metadata={
            **HELDOUT,
            "help": "share of the rows taken from the corpus's held-out split (its documents never appear in train)",
        },
    )
    exclude_special: bool = field(
        default=True,
        metadata={
            "flag": "--keep-special",
            "negate": True,
            "help": "also store BOS/EOS/pad positions (excluded by default)",
        },
    )
    outlier_factor: float = field(
        default=10.0, metadata={**OUTLIER, "help": "flag rows whose norm exceeds this many times the median train norm"}
    )
    max_unknown_fraction: float = field(
        default=0.05,
        metadata={
            **UNKNOWN,
            "help": "stop when more of the corpus's tokens than this are unknown to the tokenizer (<unk>); 1: never",
        },
    )

    def check(self) -> None:
        _check_train_rows(self)


def _check_train_rows(cfg: HarvestConfig | CacheConfig) -> None:
    """The rows a harvest is asked for and a cache records leave train rows beside the held-out ones."""
    if cfg.n_tokens - round(cfg.n_tokens * cfg.heldout_fraction) < 1:
        raise BadValueError(
            f"n_tokens={cfg.n_tokens} with heldout_fraction={cfg.heldout_fraction} leaves no train rows"
        )


@dataclass(frozen=True)
class CacheConfig(Config):
    error = BadValueError
    drop_unknown = True  # a manifest from another version: its unknown keys are dropped

    model: str  # workbench.models.model_id(model): name + weight hash
    corpus: str  # corpus.spec
    hooks: tuple[str, ...]
    n_tokens: int = field(metadata={"min": 1})  # activation rows to store, train + heldout
    ctx_len: int = field(metadata={"min": 1})
    # sequences per forward pass; shards close on batch boundaries
    batch_size: int = field(metadata={"min": 1})
    dtype: str = field(metadata={"choices": DTYPES})
    # a shard closes at the first batch boundary with >= this many rows
    shard_tokens: int = field(metadata={"min": 1})
    heldout_fraction: float = field(metadata=HELDOUT)  # share of n_tokens taken from the corpus's held-out split
    exclude_special: bool
    special_ids: tuple[int, ...]  # token ids dropped when exclude_special
    # a row is an outlier when its norm > outlier_factor x median train norm
    outlier_factor: float = field(metadata=OUTLIER)
    # the harvest stops when more than this share of the corpus's tokens are the tokenizer's unknown
    # token (a corpus the model cannot read: those rows would be dropped or meaningless); 1 = never
    max_unknown_fraction: float = field(default=0.05, metadata=UNKNOWN)

    def check(self) -> None:
        _check_train_rows(self)

    def n_rows(self, split: str) -> int:
        heldout = round(self.n_tokens * self.heldout_fraction)
        return heldout if split == "heldout" else self.n_tokens - heldout

    def diff(self, other: CacheConfig) -> list[str]:
        """Human-readable differences, for mismatch errors."""
        a, b = self.to_dict(), other.to_dict()
        return [f"{k}: {a[k]!r} on disk vs {b[k]!r} requested" for k in a if a[k] != b[k]]
