"""Per-hook statistics, combined from per-shard moments once a harvest ends.

Later steps use them for mean ablation (mean) and input normalisation (mean_norm); the median
norm sets the outlier threshold. Shards carry float64 sums, so a resumed harvest gets the same
numbers as a clean one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from workbench.cache.format import CHECKSUM, checksum, save_npy

MEDIAN_SAMPLE = 1 << 24  # rows; beyond this the median is taken on an evenly strided sample


def _norms(split_dir: Path, records: list[dict], hook: str, stride: int = 1):
    for r in records:
        yield np.load(split_dir / r["name"] / f"norm.{hook}.npy", mmap_mode="r")[::stride]


def hook_stats(out: Path, hook: str, shards: dict[str, list[dict]], outlier_factor: float) -> dict:
    """Writes stats/<hook>.npy (float64 [2, d]: mean, std over the train split); returns the scalars."""
    train = shards["train"]
    n = sum(r["rows"] for r in train)
    sums = sum(np.load(out / "train" / r["name"] / f"moments.{hook}.npy") for r in train)
    mean = sums[0] / n
    std = np.sqrt(np.maximum(sums[1] / n - mean**2, 0.0))
    norm_sum = sum(float(x.sum(dtype=np.float64)) for x in _norms(out / "train", train, hook))
    stride = max(1, -(-n // MEDIAN_SAMPLE))
    median = float(np.median(np.concatenate(list(_norms(out / "train", train, hook, stride)))))
    threshold = outlier_factor * median
    n_outliers = {
        split: int(sum((x > threshold).sum() for x in _norms(out / split, recs, hook)))
        for split, recs in shards.items()
    }
    path = out / "stats" / f"{hook}.npy"
    tmp = path.with_name(path.name + ".tmp")
    save_npy(tmp, np.stack([mean, std]))
    tmp.replace(path)
    return {
        "n": n,
        "mean_norm": norm_sum / n,
        "median_norm": median,
        "outlier_threshold": threshold,
        "n_outliers": n_outliers,
        "file": {"bytes": path.stat().st_size, CHECKSUM: checksum(path)},
    }
