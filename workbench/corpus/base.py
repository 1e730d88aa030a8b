"""The corpus protocol every token source follows (synthetic, files, Hugging Face).

A corpus has a `spec` string, `label_names` ({label kind: [names]}), and
`sequences(ctx_len, start=0, split="train")`: an iterator of packed `TokenSequence`s that is
deterministic in (spec, split, index), which is what makes harvests and training runs resumable.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from workbench.errors import BadValueError

SPLITS = ("train", "heldout")


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise BadValueError(f"unknown split {split!r}; valid: {', '.join(repr(s) for s in SPLITS)}")


@dataclass
class TokenSequence:
    tokens: np.ndarray  # int64 [ctx]
    doc_ids: np.ndarray  # int64 [ctx]; held-out documents get negative ids
    labels: dict[str, np.ndarray]  # per-token label ids, names in the corpus's label_names


class Corpus(Protocol):
    spec: str
    label_names: dict[str, list[str]]

    def sequences(self, ctx_len: int, start: int = 0, split: str = "train") -> Iterator[TokenSequence]: ...
