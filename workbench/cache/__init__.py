"""The shared activation cache: harvest many hooks in one resumable pass, read shuffled batches
from memory-mapped shards, and per-hook statistics for ablation and normalisation.

Names resolve on first use (workbench.lazy): the config and hook helpers import without torch.
"""

from workbench.lazy import lazy_exports

_EXPORTS = {
    "ActivationCache": "workbench.cache.reader",
    "CacheConfig": "workbench.cache.config",
    "harvest": "workbench.cache.writer",
    "write_array_cache": "workbench.cache.writer",
    "default_hooks": "workbench.cache.hooks",
    "hook_summary": "workbench.cache.hooks",
    "transcoder_hooks": "workbench.cache.hooks",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
