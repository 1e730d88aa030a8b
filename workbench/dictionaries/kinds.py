"""The table of dictionary folder kinds: the one place a kind is named (a single SAE, a per-layer transcoder set,
a cross-layer transcoder). Every reader that dispatches on a dictionary folder (opening it, loading it, listing it,
checking an in-place step, evaluating, importing, exporting, the app's pages) looks its kind up here, so a new kind
is one row here plus its folder class and its steps.

Torch-free and free of the method packages (the workspace and the CLI parser stand on it): a row names its folder
class and its steps as "module:attribute" strings, resolved only when used (`named`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from workbench.errors import BadValueError


@dataclass(frozen=True)
class Kind:
    """One dictionary folder kind."""

    name: str  # what a user and a manifest's config call it
    workspace: str  # its artifacts' folder in a workspace: <root>/<workspace>/<name>
    manifest: str  # the file that marks a folder of this kind
    files: tuple[str, ...]  # every file a complete folder holds (what a listing checks)
    label: str  # the kind in a sentence
    folder: str  # "module:class" of its DictionaryFolder
    replaces_mlps: bool  # whether it replaces every MLP (a Transcoders: graphs, feature circuits)
    train: str  # "module:function" of its training step
    train_command: str  # the command that trains one (what a page with none of them suggests)
    evaluate: str  # of its evaluation step
    import_: str | None  # of its import step (None: no other tool writes it)
    export: str | None  # of the function that builds circuit-tracer's object of its Transcoders (None: none)


SAE = Kind(
    name="sae",
    workspace="saes",
    manifest="cfg.json",
    files=("cfg.json", "sae_weights.safetensors"),
    label="SAE",
    folder="workbench.dictionaries.folders:SAEFolder",
    replaces_mlps=False,
    train="workbench.steps.dictionaries:train_saes",
    train_command="workbench sae train --cache DIR --hook HOOK",
    evaluate="workbench.steps.dictionaries:evaluate_one",
    import_="workbench.steps.exchange:import_one",
    export=None,
)
TRANSCODERS = Kind(
    name="transcoders",
    workspace="transcoders",
    manifest="transcoders.json",  # workbench.sae.transcoders.SET_MANIFEST (its module imports torch)
    files=("transcoders.json",),
    label="transcoder set",
    folder="workbench.dictionaries.folders:TranscoderSet",
    replaces_mlps=True,
    train="workbench.steps.dictionaries:train_transcoder_set",
    train_command="workbench sae train --cache DIR --transcoders all",
    evaluate="workbench.steps.dictionaries:evaluate_set",
    import_="workbench.steps.exchange:import_set",
    export="workbench.circuits.feature.tracer_export:transcoder_set",
)
CLT = Kind(
    name="clt",
    workspace="clts",
    manifest="clt.json",  # workbench.sae.clt_io.MANIFEST (its module imports torch)
    files=("clt.json",),
    label="cross-layer transcoder",
    folder="workbench.dictionaries.folders:CLTFolder",
    replaces_mlps=True,
    train="workbench.steps.dictionaries:train_clt",
    train_command="workbench sae train --cache DIR --clt --layers all",
    evaluate="workbench.steps.dictionaries:evaluate_clt",
    import_="workbench.steps.exchange:import_tracer_clt",
    export="workbench.circuits.feature.tracer_export:cross_layer_transcoder",
)
KINDS = (SAE, TRANSCODERS, CLT)  # in the order a workspace lists them
WORKSPACE_KINDS = tuple(k.workspace for k in KINDS)  # the workspace kinds whose artifacts are dictionaries
GRAPH_KINDS = tuple(k for k in KINDS if k.replaces_mlps)  # what a feature circuit or an attribution graph reads
# a folder is recognised by the first manifest it holds, in this order (a set's members are SAE folders inside it)
_RECOGNISED = (TRANSCODERS, CLT, SAE)


def by_name(name: str) -> Kind:
    """The kind called `name`; a one-line error naming the valid ones otherwise."""
    for kind in KINDS:
        if kind.name == name:
            return kind
    raise BadValueError(f"dictionary kind {name!r} is not one of {', '.join(k.name for k in KINDS)}")


def kind_of(folder: str | Path, default: Kind | None = None) -> Kind | None:
    """The kind of a dictionary folder, by the manifest it holds; `default` when it holds none."""
    folder = Path(folder)
    return next((k for k in _RECOGNISED if (folder / k.manifest).is_file()), default)


def named(path: str):
    """The class or function a row names ("module:attribute"), imported now."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)
