"""The artifact transaction: an artifact appears whole and checked, or not at all.

A step writes its artifact (files, members, manifest) into a staging folder beside its real folder (same file
system, a hidden name the workspace's listing skips), under the output lock; the staged artifact is then validated
(every manifest readable and sealed, every listed file matching its checksum, every tensor finite, an SAE's weight
shapes matching its config) and renamed into place in one step. A failure at any point (a bad layer half-way
through a set, a crash, a validation error) removes the staging folder: nothing is listed and the name stays free.
Steps that resume in their own folder (training, cache harvests) keep their checkpoints there instead.
This module imports no torch at the top: the workspace and the CLI parser stand without it.
"""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from workbench.atomic import fsync_dir
from workbench.errors import BadValueError, OutputExistsError
from workbench.guard import check_artifact
from workbench.lock import output_lock
from workbench.readback import artifact_manifest, damaged, json_file, safetensors_file, verify_artifact
from workbench.workspace import MANIFEST, STAGING, Workspace


def staging_folder(folder: Path) -> Path:
    """Where `folder`'s artifact is staged: a hidden folder beside it (one rename away), holding a folder of the real
    name (the manifest records its folder's name)."""
    return folder.parent / f".{folder.name}{STAGING}{os.getpid()}" / folder.name


@contextmanager
def artifact_transaction(
    ws: Workspace,
    folder: str | Path,
    kind: str | None,
    command: str,
    inputs: dict | None = None,
    *,
    scratch: dict | None = None,
    replace: bool = False,
    what: str = "an artifact",
) -> Iterator[Path]:
    """Yield the staging folder the step writes `folder`'s artifact of `kind` into (None: a folder whose members
    are the artifacts) and records it in (`ws.record(staged, ...)`); on success validate it and rename it into
    `folder`. The folder is checked by the output guard against `inputs` and locked for `command`; one that already
    holds files is refused unless `replace` (the old one is swapped out in the same step, then removed); scratch:
    the step's working folders (name -> path or None), checked by the guard too."""
    folder = Path(folder)
    check_artifact(folder, kind, inputs or {}, scratch)
    with output_lock(folder, command):
        if not replace and folder.exists() and any(not p.name.startswith(".") for p in folder.iterdir()):
            held = what if (folder / MANIFEST).is_file() else "the files of a run stopped before it finished"
            raise OutputExistsError(f"{folder} already holds {held}; delete it or pass another --name")
        staged = staging_folder(folder)
        for stale in folder.parent.glob(f".{glob.escape(folder.name)}{STAGING}*"):  # killed runs' (we hold the lock)
            shutil.rmtree(stale, ignore_errors=True)
        staged.mkdir(parents=True)
        try:
            yield staged
            validate(staged, kind, folder)
            _move_in(staged, folder)
        except OSError as e:  # a full disk names the file the user knows, not its staged copy
            if not isinstance(e.filename, str) or not Path(e.filename).is_relative_to(staged):
                raise
            raise OSError(e.errno, e.strerror, str(folder / Path(e.filename).relative_to(staged))) from e
        finally:
            shutil.rmtree(staged.parent, ignore_errors=True)
    if not folder.resolve().is_relative_to(ws.root.resolve()):
        for manifest in sorted(folder.glob(f"**/{MANIFEST}")):
            ws.register(manifest.parent)


def _move_in(staged: Path, folder: Path) -> None:
    """Rename the staged artifact onto `folder` (an old one is renamed aside first, then deleted)."""
    old = staged.parent / ".replaced"
    if folder.exists():
        os.rename(folder, old)
    try:
        os.rename(staged, folder)
    except OSError:
        if old.exists():  # the old artifact goes back where it was
            os.rename(old, folder)
        raise
    fsync_dir(folder.parent)


def validate(folder: Path, kind: str | None, final: Path | None = None) -> None:
    """Refuse (one line naming the file, as it would be named in `final`) a staged artifact that is not whole: no
    manifest (of `kind`), a listed file missing or changed, a NaN, an infinite value outside a mask buffer, an SAE
    whose weights' shapes are not its config's."""
    manifests = sorted(folder.glob(f"**/{MANIFEST}"))
    own = folder / MANIFEST
    if (kind is not None and own not in manifests) or not manifests:
        raise damaged(own, "staged artifact", "missing: the step recorded nothing", "rerun the step")
    for m in manifests:
        got = artifact_manifest(m).get("kind")
        if m == own and kind is not None and got != kind:
            raise damaged(m, "staged artifact", f"kind {got!r}, not {kind!r}", "rerun the step")
        verify_artifact(m.parent, f"staged {got}")
    final = final or folder
    for path in sorted(folder.rglob("*.safetensors")):
        _check_tensors(path, final / path.relative_to(folder))
    for cfg in sorted(folder.rglob("cfg.json")):
        _check_sae_shapes(cfg, final / cfg.parent.relative_to(folder) / SAE_WEIGHTS)


MASK_BUFFERS = ("IGNORE",)  # TransformerLens's attention-mask fill value: -inf by design


def _check_tensors(path: Path, shown: Path) -> None:
    import torch

    for key, t in safetensors_file(path, "staged weights", "rerun the step").items():
        if not t.is_floating_point():
            continue
        bad = t.isnan() if key.rsplit(".", 1)[-1] in MASK_BUFFERS else ~torch.isfinite(t)
        if bool(bad.any()):
            raise BadValueError(
                f"{shown}: tensor {key!r} has {int(bad.sum())} NaN or infinite value(s); nothing was recorded"
            )


SAE_WEIGHTS = "sae_weights.safetensors"


def _check_sae_shapes(cfg_path: Path, shown: Path) -> None:
    """A SAELens folder's W_enc is [d_in, d_sae] and W_dec [d_sae, d_out or d_in], as its cfg.json says."""
    weights = cfg_path.parent / SAE_WEIGHTS
    cfg = json_file(cfg_path, "staged SAE config", "rerun the step")
    if not weights.is_file() or not all(isinstance(cfg.get(k), int) for k in ("d_in", "d_sae")):
        return
    d_in, d_sae = cfg["d_in"], cfg["d_sae"]
    want = {"W_enc": (d_in, d_sae), "W_dec": (d_sae, cfg.get("d_out") or d_in)}
    tensors = safetensors_file(weights, "staged SAE weights", "rerun the step")
    for key, shape in want.items():
        if key in tensors and tuple(tensors[key].shape) != shape:
            raise BadValueError(
                f"{shown}: {key} has shape {list(tensors[key].shape)}, but {cfg_path.name} says {list(shape)} "
                "(d_in, d_sae, d_out); nothing was recorded"
            )
