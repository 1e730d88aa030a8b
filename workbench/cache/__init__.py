"""The shared activation cache: harvest many hooks in one resumable pass, read shuffled batches
from memory-mapped shards, and per-hook statistics for ablation and normalisation."""

from workbench.cache.config import CacheConfig
from workbench.cache.errors import (CacheCorruptError, CacheError, CacheExistsError, CacheIncompleteError,
                                    CacheMismatchError, CacheNotFoundError, DiskFullError, UnknownHookError)
from workbench.cache.hooks import hook_summary
from workbench.cache.reader import ActivationCache
from workbench.cache.writer import harvest

__all__ = ["ActivationCache", "CacheConfig", "CacheCorruptError", "CacheError", "CacheExistsError",
           "CacheIncompleteError", "CacheMismatchError", "CacheNotFoundError", "DiskFullError", "UnknownHookError",
           "harvest", "hook_summary"]
