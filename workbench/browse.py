"""A read-only view of a workspace for the app and `workbench ls`: no torch, TransformerLens or sae_lens.

Everything here starts from the manifests (`Workspace.scan`), never from guessed paths: the artifacts of
a workspace by kind (a damaged manifest is skipped and named), the SAEs, feature stores, transcoder sets,
saved models, sparse-attention models and circuits among them (`catalog`), and readers for their plain files
(an SAE folder's config, metrics and training curves, and what it reads and writes; a transcoder set's
layers and metrics; a circuit through the one circuit schema; an attention report and its comparisons).
Every workspace-relative path the app receives goes through `resolve`, which keeps it inside the
workspace. Opening a model or running an SAE is the engine's job, not this layer's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from workbench.circuits import neuronpedia, schema
from workbench.dictionaries.folders import TranscoderSet
from workbench.dictionaries.kinds import CLT, GRAPH_KINDS, SAE, TRANSCODERS, Kind
from workbench.errors import DamagedFileError, MissingInputError, UserError
from workbench.readback import artifact_manifest, json_file, json_or_empty, reading, verify_artifact, verify_listed
from workbench.sae import scores
from workbench.sae.scores import shown
from workbench.sae.transcoders import read_manifest
from workbench.workspace import KINDS, MANIFEST, Artifact, Skipped, Workspace

__all__ = [
    "Artifact",
    "KINDS",
    "OutsideWorkspace",
    "SAEView",
    "Skipped",
    "TranscoderSetView",
    "Catalog",
    "artifacts",
    "attention_report",
    "catalog",
    "compare_results",
    "inside",
    "open_circuit",
    "open_feature_graph",
    "open_sae",
    "open_transcoder_set",
    "resolve",
    "scan",
    "scores",  # the app reads scores through browse: it imports no workbench.sae
    "shown",
]

SAE_FILES = SAE.files
MODEL_FILES = ("config.json", "model.safetensors")
REPORT = "attention_report.json"
CIRCUIT = "circuit.json"
FEATURE_GRAPH = "graph.json"  # an attribution graph (circuit graph) or a feature circuit's (circuit find --transcoders)


class OutsideWorkspace(UserError):
    """A path names something outside the workspace, or nothing at all."""


def artifacts(workspace: str | Path, kind: str | None = None) -> list[Artifact]:
    """Every artifact recorded in the workspace (inside it or registered from elsewhere), by kind."""
    return Workspace(workspace).artifacts(kind)


def scan(workspace: str | Path, kind: str | None = None) -> tuple[list[Artifact], list[Skipped]]:
    """(artifacts, skipped manifests with why): what a listing shows, and what it must name as left out."""
    return Workspace(workspace).scan(kind)


def resolve(root: Path, rel: str) -> Path:
    """The workspace-relative path `rel` as an absolute path inside root, or OutsideWorkspace."""
    root = Path(root).resolve()
    p = PurePosixPath(rel)
    if not rel or p.is_absolute() or rel.startswith("~"):
        raise OutsideWorkspace(f"{rel!r} is not a path inside the workspace: give it relative to {root}")
    if ".." in p.parts:
        raise OutsideWorkspace(f"{rel!r} is refused: '..' may not appear in a workspace path")
    full = (root / p).resolve()
    if not full.is_relative_to(root):
        raise OutsideWorkspace(f"{rel!r} is refused: it leads outside the workspace {root} (through a symlink)")
    if not full.exists():
        raise OutsideWorkspace(f"{rel!r} does not exist in the workspace {root}")
    return full


def inside(root: Path, path: str | Path) -> str | None:
    """An absolute path (e.g. another dictionary a feature store names) as the workspace-relative path the app links
    with, or None when it lies outside the workspace or is gone."""
    root, path = Path(root).resolve(), Path(path).resolve()
    return path.relative_to(root).as_posix() if path.is_relative_to(root) and path.exists() else None


@dataclass
class Catalog:
    """One scan of a workspace's manifests, and the workspace-relative folders of what the app opens:
    only artifacts inside the workspace whose manifests list the files each kind needs."""

    root: Path
    artifacts: list[Artifact]
    skipped: list[Skipped]
    _found: dict = field(default_factory=dict, repr=False, compare=False)  # _inside's answers (it resolves paths)

    def _inside(self, kind: str, files: tuple[str, ...]) -> list[str]:
        """Each listing is worked out once per scan (a page asks for them many times) and handed out as a copy."""
        if (kind, files) not in self._found:
            self._found[kind, files] = self._scan(kind, files)
        return list(self._found[kind, files])

    def _scan(self, kind: str, files: tuple[str, ...]) -> list[str]:
        out = []
        for a in self.artifacts:
            folder = a.path.resolve()
            if (
                a.kind == kind
                and folder.is_relative_to(self.root)
                and all(f in a.manifest.get("files", {}) for f in files)
            ):
                out.append(folder.relative_to(self.root).as_posix())
        return sorted(out)

    def rel(self, a: Artifact) -> str | None:
        """An artifact's folder relative to the root, None when it lies outside (registered from elsewhere)."""
        folder = a.path.resolve()
        return folder.relative_to(self.root).as_posix() if folder.is_relative_to(self.root) else None

    @property
    def saes(self) -> list[str]:
        """SAE folders (cfg.json + weights)."""
        return self.dictionaries(SAE)

    @property
    def feature_stores(self) -> set[str]:
        """The SAE folders whose feature store (<sae>/features) a manifest records as finished."""
        return {str(PurePosixPath(rel).parent) for rel in self._inside("features", ("manifest.json",))}

    @property
    def transcoder_sets(self) -> list[str]:
        """Transcoder set folders (transcoders.json naming each layer's members)."""
        return self.dictionaries(TRANSCODERS)

    @property
    def clts(self) -> list[str]:
        """Cross-layer transcoder folders (clt.json)."""
        return self.dictionaries(CLT)

    def dictionaries(self, kind: Kind) -> list[str]:
        """The complete folders of one dictionary kind (a row of workbench.dictionaries.kinds)."""
        return self._inside(kind.workspace, kind.files)

    @property
    def graph_dictionaries(self) -> list[str]:
        """The folders of every kind that replaces every MLP (what a feature circuit or an attribution graph reads),
        kind by kind in the table's order."""
        return [rel for kind in GRAPH_KINDS for rel in self.dictionaries(kind)]

    @property
    def models(self) -> list[str]:
        """Saved models (config.json + model.safetensors)."""
        return self._inside("models", MODEL_FILES)

    @property
    def sparse_models(self) -> list[str]:
        """Saved models whose manifest lists an attention report: the sparse-attention ones."""
        return self._inside("models", MODEL_FILES + (REPORT,))

    @property
    def circuits(self) -> list[str]:
        """Circuit folders (circuits/<name>/circuit.json)."""
        return self._inside("circuits", (CIRCUIT,))

    @property
    def feature_graphs(self) -> list[str]:
        """Attribution-graph folders (circuits/<name>/graph.json: circuit graph, circuit find --transcoders)."""
        return self._inside("circuits", (FEATURE_GRAPH,))


def catalog(workspace: str | Path) -> Catalog:
    root = Path(workspace).resolve()
    return Catalog(root, *Workspace(root).scan())


@dataclass
class SAEView:
    """An SAE folder as data: cfg.json (SAELens), workbench.json, metrics.json, curves.jsonl, its manifest
    and its feature store's manifest."""

    path: Path
    cfg: dict
    info: dict  # workbench.json: sae_config, train_config, data, final curve point ({} if trained elsewhere)
    metrics: dict  # metrics.json ({} until `workbench sae eval` ran)
    curves: list[dict]  # one dict per logged step
    artifact: dict  # artifact.json
    store: dict  # features/manifest.json ({} without a feature store)

    @property
    def hook(self) -> str | None:
        return self.cfg.get("metadata", {}).get("hook_name")

    @property
    def model_name(self) -> str | None:
        return self.cfg.get("metadata", {}).get("model_name")

    @property
    def reads(self) -> str | None:
        """The hook the encoder reads: cfg.json's metadata, else the feature store's manifest."""
        return self.hook or self.store.get("reads") or self.store.get("hook")

    @property
    def writes(self) -> str | None:
        """The hook the decoder writes: a transcoder's target (metadata.hook_name_out), else the hook it reads."""
        return self.cfg.get("metadata", {}).get("hook_name_out") or self.store.get("writes") or self.reads

    @property
    def kind(self) -> str:
        """'transcoder' when it writes another hook than it reads, else 'sae'."""
        return "transcoder" if self.writes != self.reads else "sae"


def open_sae(folder: str | Path) -> SAEView:
    folder = Path(folder)
    if not (folder / SAE.manifest).is_file():
        raise MissingInputError(f"{folder} is not an SAE folder (no {SAE.manifest})")
    verify_artifact(folder, "SAE")
    return SAEView(
        folder,
        json_file(folder / SAE.manifest, "SAE's SAELens config"),
        json_or_empty(folder / "workbench.json", "SAE's training record"),
        json_or_empty(folder / "metrics.json", "SAE's evaluation metrics"),
        _curves(folder / "curves.jsonl"),
        _artifact(folder),
        json_or_empty(folder / "features" / "manifest.json", "feature store manifest"),
    )


def _curves(path: Path) -> list[dict]:
    """curves.jsonl: one JSON object per logged step ([] before the first)."""
    if not path.is_file():
        return []
    verify_listed(path, "training curves")
    with reading(path, "training curves"):
        curves = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [dict(c) for c in curves]


def _artifact(folder: Path) -> dict:
    return artifact_manifest(folder / MANIFEST) if (folder / MANIFEST).is_file() else {}


@dataclass
class TranscoderSetView:
    """A transcoder set folder as data: its TranscoderSet (transcoders.json: the model and, per layer, its input
    and target hooks and members), metrics.json ({} until `workbench sae eval` ran on the set) and its manifest."""

    tset: TranscoderSet
    metrics: dict
    artifact: dict

    @property
    def path(self) -> Path:
        return self.tset.folder

    @property
    def manifest(self) -> dict:
        return self.tset.manifest

    @property
    def model(self) -> str | None:
        return self.tset.model

    def layers(self) -> list[dict]:
        """One row per member: its layer, what it reads and writes, and its numbers from the set's evaluation."""
        members = self.metrics.get("members", {})
        return [
            {
                "layer": e["layer"],
                "member": name,
                "reads": e["input_hook"],
                "writes": e["target_hook"],
                **{k: shown(members.get(name, {}), k) for k in ("fvu", "l0", "ce_loss_recovered")},
            }
            for e in self.tset.layers
            for name in e["transcoders"]
        ]

    def all_replaced(self) -> dict[str, float | str]:
        """Each config's CE loss recovered with every MLP of the set replaced at once (the replacement model), or
        'undefined (reason)' (workbench.sae.scores)."""
        return {k: shown(v, "ce_loss_recovered") for k, v in self.metrics.get("all_replaced", {}).items()}


def open_transcoder_set(folder: str | Path) -> TranscoderSetView:
    folder = Path(folder)
    manifest = read_manifest(folder / TRANSCODERS.manifest)
    verify_artifact(folder, "transcoder set")
    return TranscoderSetView(
        TranscoderSet(folder, manifest),
        json_or_empty(folder / "metrics.json", "transcoder set's evaluation"),
        _artifact(folder),
    )


def open_circuit(path: str | Path) -> schema.CircuitRecord:
    """A workbench circuit file (or an artifact folder holding circuit.json), read and validated by the schema."""
    path = Path(path)
    if path.is_dir():
        path = path / CIRCUIT
    verify_artifact(path.parent, "circuit")
    d = schema.load(path)
    if schema.detect(d) != "workbench":
        raise DamagedFileError(f"{path} is not a workbench circuit file (schema {d.get('schema')!r})")
    try:
        return schema.read(d)
    except DamagedFileError as e:
        raise DamagedFileError(f"{path}: {e}") from None


def open_feature_graph(path: str | Path) -> neuronpedia.FeatureGraph:
    """A circuit-tracer / Neuronpedia graph JSON (or an artifact folder holding graph.json), validated."""
    path = Path(path)
    if path.is_dir():
        path = path / FEATURE_GRAPH
    verify_artifact(path.parent, "attribution graph")
    try:
        return neuronpedia.read_feature_graph(schema.load(path))
    except DamagedFileError as e:
        raise DamagedFileError(f"{path}: {e}") from None


def attention_report(folder: str | Path) -> dict:
    """A sparse-attention model's attention_report.json."""
    return json_file(Path(folder) / REPORT, "attention report")


HEAD_FLOW = "heads-"  # compare/heads-<set|clt>-<task>.json: base vs sparse through two dictionaries of a kind
HEAD_FLOW_KINDS = {"set": "per-layer transcoder sets", "clt": "cross-layer transcoders"}  # kind -> its name


def _compared(folder: Path, head_flow: bool) -> list[str]:
    """The compare/*.json files the sparse model's manifest lists: the circuit comparisons or the head flows."""
    listed = _artifact(folder).get("files", {})
    found = [f for f in listed if f.startswith("compare/") and f.endswith(".json")]
    return sorted(f for f in found if PurePosixPath(f).name.startswith(HEAD_FLOW) == head_flow)


def compare_results(folder: str | Path) -> list[tuple[str, dict]]:
    """(task, result) of each `workbench attention compare` the sparse model's manifest lists (compare/<task>.json)."""
    folder = Path(folder)
    return [(PurePosixPath(f).stem, json_file(folder / f, "attention comparison")) for f in _compared(folder, False)]


def head_flow_results(folder: str | Path) -> list[tuple[str, str, dict]]:
    """(dictionary kind, task, result) of each head-flow comparison listed with the sparse model
    (compare/heads-<kind>-<task>.json, `attention compare --transcoders` through two per-layer sets or two CLTs)."""
    folder = Path(folder)
    out = []
    for f in _compared(folder, True):
        kind, _, task = PurePosixPath(f).stem[len(HEAD_FLOW) :].partition("-")
        if kind not in HEAD_FLOW_KINDS or not task:
            raise DamagedFileError(
                f"{folder / f}: a head-flow comparison is named {HEAD_FLOW}<kind>-<task>.json with kind one of "
                f"{', '.join(HEAD_FLOW_KINDS)}; rename or remove it"
            )
        out.append((kind, task, json_file(folder / f, "head-flow comparison")))
    return out
