"""An artifact's folder, shared by every step: whether it is complete, its name, the model it was made on, its
manifest rewritten, and the folder claimed for one process while a step writes it."""

from __future__ import annotations

import hashlib
import json
import time
from contextlib import ExitStack
from pathlib import Path

from workbench.checkpoint import rank_zero_value
from workbench.errors import OutputExistsError
from workbench.guard import check_artifact
from workbench.lock import output_lock
from workbench.models import EMBEDDED
from workbench.provenance import model_id
from workbench.readback import artifact_manifest
from workbench.transaction import artifact_transaction
from workbench.workspace import MANIFEST, Workspace, slug


def complete(folder) -> bool:
    """Whether the artifact in `folder` is complete: its manifest, written last, is there."""
    return (Path(folder) / MANIFEST).is_file()


def model_inputs(ws: Workspace, model, spec: str) -> dict:
    """The model's id, and its spec (a saved model folder as a path relative to the workspace)."""
    is_folder = spec not in EMBEDDED and Path(spec).exists()
    return {"model": model_id(model), "model_spec": ws.rel(spec) if is_folder else spec}


def run_folder(ws: Workspace, kind: str, out, name: str | None, stem: str) -> Path:
    """A training run's folder: `out`, else <ws>/<kind>/<name>, else <ws>/<kind>/<stem>-<start time>; under
    torchrun every rank takes rank 0's start time (one run folder)."""
    if out:
        return Path(out)
    return ws.path(kind, name or f"{stem}-{rank_zero_value(time.strftime('%Y%m%d-%H%M%S'))}")


def rerecord(ws: Workspace, folder, kind: str, made_by: str, inputs: dict | None = None, summary: dict | None = None):
    """Rewrite an artifact's manifest after a later step added files or numbers to its folder, keeping what
    made it (made_by applies when the folder had no manifest); inputs are added, a summary replaces the old."""
    before = manifest_of(folder)
    ws.record(
        folder,
        kind,
        made_by=before.get("made_by", made_by),
        config=before.get("config", {}),
        inputs={**before.get("inputs", {}), **(inputs or {})},
        summary=before.get("summary", {}) if summary is None else summary,
        side_files=tuple(ws.resolve(p) for p in before.get("side_files", [])),
    )


def manifest_of(folder) -> dict:
    """The artifact's manifest, or {} when it has none yet."""
    path = Path(folder) / MANIFEST
    return artifact_manifest(path) if path.is_file() else {}


def circuit_name(query: dict, method: dict) -> str:
    """A stable default folder name: the prompt's last words and a hash of the query and the method
    settings (the same search on the same query gets the same name)."""
    words = slug("-".join(str(query.get("prompt", "")).split()[-4:]))[:40]
    key = json.dumps(
        [query.get(k) for k in ("prompt", "answer", "counterfactual", "wrong")] + [method], sort_keys=True, default=str
    )
    return f"{words}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"


CLAIMED = {"circuits": "a circuit or graph", "interventions": "an intervention"}  # what a finished folder holds


def claim(
    held: ExitStack, ws: Workspace, folder: Path, command: str, inputs: dict, work_dir=None, kind: str = "circuits"
) -> Path:
    """Take a circuit's (or an intervention's) folder, and a build's work_dir, for this process until `held` closes:
    an artifact transaction (the output guard, a lock, a folder another run filled refused) and a lock on the
    work_dir (a second run on the same --name or work_dir is refused, naming this one). Returns the staging folder
    the step writes and records the artifact in; it is validated and renamed onto `folder` when `held` closes."""
    what = CLAIMED[kind]
    scratch = {"work_dir": work_dir}
    staged = held.enter_context(artifact_transaction(ws, folder, kind, command, inputs, scratch=scratch, what=what))
    if work_dir:
        held.enter_context(output_lock(work_dir, command))
    return staged


def claim_in_place(held: ExitStack, folder: Path, command: str, inputs: dict, kind: str, resume: bool) -> Path:
    """Take a resumable step's folder (a streamed batch writes its lines there as it goes): the output guard and a
    lock; a folder another run filled, or a stopped one left unless `resume` continues it, is refused. Its manifest is
    written last, so a stopped run is never listed (as training steps keep their checkpoints in their folder)."""
    check_artifact(folder, kind, inputs, {})
    held.enter_context(output_lock(folder, command))
    if resume and not complete(folder):
        return folder
    if folder.exists() and any(p for p in folder.iterdir() if not p.name.startswith(".")):
        what = CLAIMED[kind] if complete(folder) else "the files of a run stopped before it finished"
        raise OutputExistsError(f"{folder} already holds {what}; delete it or pass another --name")
    return folder
