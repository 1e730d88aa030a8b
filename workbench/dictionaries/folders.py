"""A saved dictionary's folder, one class per row of the kinds table (kinds.py): its manifest read and checked
once, without torch (what the CLI checks before loading a model, what the app and `workbench ls` show, where each
member lives), and its `load` building the dictionary once per (member, device).

`DictionaryFolder` is what every kind shares; `TranscoderSet` (a per-layer set, transcoders.json) and `CLTFolder`
(a cross-layer transcoder, clt.json) load a `Transcoders`; `SAEFolder` (a single SAE, cfg.json) loads its SAE.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from workbench.dictionaries.kinds import CLT, SAE, TRANSCODERS, Kind, kind_of, named
from workbench.dictionaries.transcoders import CrossLayerTranscoders, PerLayerTranscoders, Transcoder, Transcoders
from workbench.errors import BadValueError
from workbench.readback import json_file


class DictionaryFolder:
    """A dictionary folder of kind `kind`: its manifest (`manifest`, read once) and what it was trained on."""

    kind: Kind
    checked_on_open = True  # whether opening reads and checks the manifest (a bad folder refused before a model loads)

    def __init__(self, folder: str | Path, manifest: dict | None = None):
        """manifest: the folder's manifest already read (a listing that shows the folder without its members'
        checks); None reads and checks it here, or on first use where the kind is not `checked_on_open`."""
        self.folder = Path(folder)
        self._loaded: dict = {}
        if manifest is not None:
            self.__dict__["manifest"] = manifest
        elif self.checked_on_open:
            self.manifest  # noqa: B018  (read now: a damaged folder is refused here)

    @cached_property
    def manifest(self) -> dict:
        return self._read()

    def _read(self) -> dict:
        """The manifest, read and checked (a one-line error when it is missing or damaged)."""
        raise NotImplementedError

    @property
    def model(self) -> str | None:
        """The id of the model it was trained on (or imported for)."""
        return self.manifest.get("model")

    @cached_property
    def cache(self) -> str | None:
        """The cache it was trained on, resolved; None for one imported from another tool (no cache of its training
        data here)."""
        rel = self._cache()
        return None if rel is None else str((self.folder / rel).resolve())

    def _cache(self) -> str | None:
        """The manifest's path to its training cache, relative to the folder."""
        raise NotImplementedError

    def member_folders(self, member: int | str = 0) -> dict[int, Path]:
        """layer -> the folder of each per-layer member (none for a folder that is one dictionary)."""
        return {}

    def _other_model(self, ours: str) -> str:
        """The error for a dictionary loaded on a model `ours` it was not trained on."""
        raise NotImplementedError

    def _check_model(self, model) -> None:
        """Refuse a dictionary recorded for other weights (same widths would pass its width checks silently)."""
        if model is not None:
            from workbench.provenance import model_id

            if self.model != model_id(model):
                raise BadValueError(self._other_model(model_id(model)))


class SAEFolder(DictionaryFolder):
    """A single SAE's folder (cfg.json and its weights): one dictionary at one hook."""

    kind = SAE
    checked_on_open = False  # load_sae checks the folder (its files, checksums, config) when it loads

    def _read(self) -> dict:
        return json_file(self.folder / SAE.manifest, "SAE config", "retrain or re-import the SAE")

    @property
    def model(self) -> str | None:
        return (self.manifest.get("metadata") or {}).get("model_name")

    def _cache(self) -> str | None:
        return (self.manifest.get("metadata") or {}).get("dataset_path")

    def load(self, member: int | str = 0, device: str = "cpu", model=None):
        """The SAE (eval mode) on `device`, loaded once per device."""
        from workbench.sae.io import load_sae

        if member not in (0, self.folder.name):
            raise BadValueError(f"an SAE folder holds one dictionary; member {member!r} is not 0")
        self._check_model(model)
        if str(device) not in self._loaded:
            self._loaded[str(device)] = load_sae(self.folder, device=device).eval()
        return self._loaded[str(device)]

    def _other_model(self, ours: str) -> str:
        return f"the SAE {str(self.folder)!r} was trained on {self.model!r}, not on this model {ours!r}"


class CLTFolder(DictionaryFolder):
    """A saved CLT's folder (sae train --clt) with a TranscoderSet's reading API: its manifest (clt.json) read once,
    the CLT loaded once per device. It has no per-layer member folders (so no per-member feature stores)."""

    kind = CLT

    def _read(self) -> dict:
        from workbench.sae.clt_io import read_manifest

        return read_manifest(self.folder)

    def _cache(self) -> str | None:
        return self.manifest["metadata"].get("dataset_path")  # none for a CLT imported from circuit-tracer

    @property
    def layers(self) -> list[dict]:
        m = self.manifest
        return [
            {"layer": layer, "input_hook": h, "target_hook": t, "transcoders": [self.folder.name]}
            for layer, h, t in zip(m["layers"], m["input_hooks"], m["target_hooks"])
        ]

    def _other_model(self, ours: str) -> str:
        return (
            f"the CLT {str(self.folder)!r} was trained on {self.model!r}, not on this model "
            f"{ours!r}; train one on it (workbench sae train --clt)"
        )

    def load(self, member: int | str = 0, device: str = "cpu", model=None) -> Transcoders:
        """The CLT as the dictionary (member: a CLT has one, 0), checked against `model`'s weights and layers."""
        from workbench.sae.clt_io import load_clt

        if member not in (0, self.folder.name):
            raise BadValueError(f"a CLT folder holds one dictionary; member {member!r} is not 0")
        self._check_model(model)
        if self.manifest["layers"] != list(range(len(self.manifest["layers"]))):
            raise BadValueError(
                f"the CLT {str(self.folder)!r} spans layers {self.manifest['layers']}; graphs need one over "
                "every layer (--layers all)"
            )
        if str(device) not in self._loaded:
            clt = load_clt(self.folder, str(device))
            self._loaded[str(device)] = CrossLayerTranscoders(clt, self.manifest["input_hooks"], source=self)
        tcs = self._loaded[str(device)]
        return tcs if model is None else tcs.check(model)


def member_name(names: list[str], member: int | str) -> str:
    """Which of a layer's transcoders (folder names 'L{layer}-{config}') `member` picks: by index or config name."""
    if isinstance(member, int):
        if not 0 <= member < len(names):
            raise BadValueError(f"member {member} is not in 0..{len(names) - 1} of the set's configs {names}")
        return names[member]
    match = [n for n in names if n.split("-", 1)[-1] == member]
    if not match:
        raise BadValueError(f"the set has no config {member!r}; its configs: {[n.split('-', 1)[-1] for n in names]}")
    return match[0]


class TranscoderSet(DictionaryFolder):
    """A transcoder set folder: its manifest (transcoders.json) read and checked once (sae.transcoders.load_set),
    and its dictionaries loaded once per (member, device)."""

    kind = TRANSCODERS

    def _read(self) -> dict:
        from workbench.sae.transcoders import load_set

        return load_set(self.folder)

    def _cache(self) -> str | None:
        return self.manifest.get("cache")

    @property
    def layers(self) -> list[dict]:
        """Per layer: layer, input_hook, target_hook, transcoders (its members' folder names)."""
        return self.manifest["layers"]

    def member_folders(self, member: int | str = 0) -> dict[int, Path]:
        """layer -> the folder of the member `member` picks (by index or config name)."""
        return {int(e["layer"]): self.folder / member_name(e["transcoders"], member) for e in self.layers}

    def _other_model(self, ours: str) -> str:
        return (
            f"the transcoder set {str(self.folder)!r} was trained on {self.model!r}, not on this model "
            f"{ours!r}: the set belongs to another model; train one on it (workbench sae train --transcoders)"
        )

    def load(self, member: int | str = 0, device: str = "cpu", model=None) -> Transcoders:
        """The set's dictionary (member: which of each layer's configs). model: refuse a set recorded for other
        weights (same widths would pass `check` silently), and check it replaces every MLP of the model."""
        self._check_model(model)
        key = (member, str(device))
        if key not in self._loaded:
            from workbench.sae.io import load_sae

            hooks = {int(e["layer"]): e["input_hook"] for e in self.layers}
            members = [
                Transcoder(layer, load_sae(folder, device=device).eval(), hooks[layer])
                for layer, folder in self.member_folders(member).items()
            ]
            self._loaded[key] = PerLayerTranscoders(members, source=self)
        tcs = self._loaded[key]
        return tcs if model is None else tcs.check(model)


def open_folder(folder, default: Kind = SAE) -> DictionaryFolder:
    """The folder class its kind's row names, of a dictionary folder (one already open is returned as is); a folder
    holding no kind's manifest opens as `default` (whose reading names what is missing)."""
    if isinstance(folder, DictionaryFolder):
        return folder
    return named(kind_of(folder, default).folder)(folder)


def open_set(folder) -> TranscoderSet | CLTFolder:
    """A dictionary folder that replaces every MLP (a set's TranscoderSet, a CLT's CLTFolder), opened once; any other
    folder is read as a transcoder set (whose reading names what is missing)."""
    opened = open_folder(folder, TRANSCODERS)
    return opened if opened.kind.replaces_mlps else TranscoderSet(opened.folder)


def resolve(transcoders, model, member: int | str = 0) -> Transcoders:
    """The dictionary `transcoders` names, checked against `model`: a Transcoders as is, a list of per-layer
    Transcoder, or a set folder (str, Path or TranscoderSet) loaded on the model's device."""
    if isinstance(transcoders, Transcoders):
        return transcoders.check(model)
    if isinstance(transcoders, list | tuple):
        return PerLayerTranscoders(transcoders).check(model)
    return open_set(transcoders).load(member, model.cfg.device, model)
