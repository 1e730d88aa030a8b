"""The `Transcoders` interface and the folders it is loaded from, by their old import path: they moved below every
reader, to workbench.dictionaries (transcoders.py, folders.py), with the table of dictionary kinds."""

from workbench.dictionaries.folders import (
    CLTFolder,
    DictionaryFolder,
    TranscoderSet,
    member_name,
    open_folder,
    open_set,
    resolve,
)
from workbench.dictionaries.transcoders import (
    CrossLayerTranscoders,
    PerLayerTranscoders,
    Transcoder,
    Transcoders,
    output_hook,
    sae_preacts,
)

__all__ = [
    "CLTFolder",
    "CrossLayerTranscoders",
    "DictionaryFolder",
    "PerLayerTranscoders",
    "Transcoder",
    "TranscoderSet",
    "Transcoders",
    "member_name",
    "open_folder",
    "open_set",
    "output_hook",
    "resolve",
    "sae_preacts",
]
