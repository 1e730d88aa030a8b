"""Errors a user can cause with a cache; each message names the bad value and what would be valid."""

from __future__ import annotations

from workbench.errors import UserError


class CacheError(UserError):
    """Base class, so callers (the CLI) can catch every cache problem at once."""


class UnknownHookError(CacheError, ValueError):
    pass


class CacheMismatchError(CacheError, ValueError):
    """The cache on disk was made from another model, corpus, hook set or config than requested."""


class CacheCorruptError(CacheError, ValueError):
    """A shard file is missing, truncated or fails its checksum."""


class CacheExistsError(CacheError, FileExistsError):
    pass


class CacheNotFoundError(CacheError, FileNotFoundError):
    pass


class CacheValueError(CacheError, ValueError):
    """A bad argument to a cache operation (size, dtype, split, batch size ...)."""


class CacheIncompleteError(CacheError, FileNotFoundError):
    """A harvest started here but never finished (no manifest.json yet)."""


class DiskFullError(CacheError, OSError):
    """The disk filled up during a harvest; the shards completed before it stay valid and resumable."""
