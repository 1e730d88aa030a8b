"""The workspace: every artifact a command makes, as plain files plus a manifest.

Layout: <root>/<kind>/<name>/ (SAEs: <root>/saes/<run>/<name>/; a transcoder set's members:
<root>/transcoders/<set>/<member>/, each recorded as an SAE) with an `artifact.json` manifest that records what made the artifact
(the command and its config), from which inputs, when, and the checksums of its files. An artifact
written elsewhere (an explicit --out) gets the same manifest in its own folder and is listed in
<root>/workspace.json, so the workspace still finds it. Paths inside manifests are relative to the
workspace root, so a workspace can be moved or shared. Later steps and the app find artifacts through
`Workspace.artifacts`, never by guessing.

This module imports no torch: `workbench.browse` and the CLI parser stand on it.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from workbench.atomic import atomic_write_text, sha256_file
from workbench.dictionaries.kinds import WORKSPACE_KINDS as DICTIONARY_KINDS
from workbench.errors import BadValueError, OutputExistsError, UserError
from workbench.lock import stale_locks
from workbench.readback import ARTIFACT, artifact_manifest, read_json, seal

KINDS = ("caches", *DICTIONARY_KINDS, "circuits", "models", "features", "interventions")
MANIFEST = ARTIFACT
INDEX = "workspace.json"
STAGING = ".staging-"  # in the name of the hidden folder an artifact is written in before it is renamed into place
SCHEMA = "workbench.workspace"
REPOSITORY = Path(__file__).resolve().parents[1]


@dataclass
class Artifact:
    kind: str
    name: str
    path: Path
    manifest: dict


@dataclass
class Skipped:
    """A manifest a listing could not use (damaged JSON, not an object, a foreign kind): named, never fatal."""

    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class Workspace:
    def __init__(self, root: str | Path):
        self.root = Path(root)

    def path(self, kind: str, *names: str) -> Path:
        """The default folder of an artifact: <root>/<kind>/<name>[/<member>...]. Every name is checked here, where the
        path is made, so no caller can reach outside its kind's folder (`--name ../x`, an absolute name)."""
        check_kind(kind)
        for name in names:
            check_name(name)
        return self.root.joinpath(kind, *names)

    def rel(self, path: str | Path) -> str:
        """`path` relative to the workspace root (with '..' when it lies outside), as manifests store it."""
        return Path(os.path.relpath(Path(path).resolve(), self.root.resolve())).as_posix()

    def resolve(self, rel: str | Path) -> Path:
        """A path read from a manifest, back to a real path."""
        return self.root / rel

    def model_spec(self, spec: str) -> str:
        """A model spec read from a manifest: a saved model folder is stored relative to the workspace root (and
        resolved here, whatever the working directory), an embedded or Hub name as it was given."""
        return str(self.resolve(spec)) if (self.root / spec).is_dir() else spec

    def record(
        self,
        folder: str | Path,
        kind: str,
        *,
        made_by: str,
        config: dict,
        inputs: dict | None = None,
        summary: dict | None = None,
        side_files: tuple[str | Path, ...] = (),
        checksums: bool = True,
    ) -> Path:
        """Write the artifact's manifest after its files are complete (its presence means 'done').

        inputs: name -> value; Path values are stored relative to the workspace root. side_files:
        files the step made outside the folder (a training run's checkpoint), so a workspace clean-up
        knows them. checksums=False lists file sizes only, for artifacts that checksum themselves (a
        cache's manifest.json holds per-shard checksums; hashing gigabytes twice buys nothing); so are the files
        of an artifact recorded inside this one (a transcoder set's members). The manifest is sealed
        (workbench.readback), and the loaders check each listed file against it (`verify_artifact`).
        """
        check_kind(kind)
        folder = Path(folder)
        nested = {m.parent for m in folder.glob(f"*/**/{MANIFEST}")}  # artifacts inside it checksum their own files
        files = {
            p.relative_to(folder).as_posix(): sha256_file(p)
            if checksums and not nested.intersection(p.parents)
            else p.stat().st_size
            for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != MANIFEST and not p.name.startswith(".")
        }
        manifest = {
            "kind": kind,
            "name": folder.name,
            "made_by": made_by,
            "config": config,
            "inputs": {k: self.rel(v) if isinstance(v, Path) else v for k, v in (inputs or {}).items()},
            "summary": summary or {},
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "files": files,
            "side_files": [self.rel(p) for p in side_files],
        }
        manifest = seal(json.loads(json.dumps(manifest, default=str)))  # sealed as it reads back
        atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=2))
        if not _inside(folder, self.root) and not staged(folder):
            self.register(folder)  # a staged one is registered where it lands (workbench.transaction)
        return folder / MANIFEST

    def _index(self) -> dict:
        """workspace.json, checked: a damaged one would silently hide every registered artifact."""
        self._check_root()
        p = self.root / INDEX
        if not p.is_file():
            return {"schema": SCHEMA, "version": 1, "external": []}
        way_out = f"it lists the artifacts registered from outside {self.root}: restore it or re-run their steps"
        index = read_json(p, BadValueError, way_out, "workspace index")
        external = index.get("external")
        if not isinstance(external, list) or not all(isinstance(e, str) for e in external):
            raise BadValueError(f"{p}: 'external' is {external!r}, not a list of folder paths; {way_out}")
        return index

    def _check_root(self) -> None:
        if self.root.exists() and not self.root.is_dir():
            raise BadValueError(f"{self.root} is a file, not a workspace folder; pass the folder (--workspace DIR)")

    def holds(self, folder: str | Path) -> bool:
        """Whether `folder` is this workspace's: inside its root, or registered in its index."""
        return _inside(folder, self.root) or self.rel(folder) in self._index()["external"]

    def register(self, folder: Path) -> None:
        """List a folder outside the root in workspace.json, so the workspace finds it."""
        index = self._index()
        rel = self.rel(folder)
        if rel not in index["external"]:
            index["external"].append(rel)
            self.root.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.root / INDEX, json.dumps(index, indent=2))

    def artifacts(self, kind: str | None = None) -> list[Artifact]:
        """Recorded artifacts (inside the root, then registered ones that still exist), optionally of one kind;
        a damaged manifest is left out (`scan` names it)."""
        return self.scan(kind)[0]

    def scan(self, kind: str | None = None) -> tuple[list[Artifact], list[Skipped]]:
        """(artifacts, skipped manifests): one bad artifact.json (`{`, `[]`, another tool's) never hides the rest."""
        if kind is not None:
            check_kind(kind)
        self._check_root()
        manifests = [
            m
            for k in KINDS
            for m in sorted(self.root.glob(f"{k}/**/{MANIFEST}"))
            if not staged(m.relative_to(self.root))
        ]
        skipped = []
        try:
            external = self._index()["external"]
        except BadValueError as e:
            skipped.append(
                Skipped(self.root / INDEX, f"unreadable workspace index, registered artifacts not listed ({e})")
            )
            external = []
        manifests += [m for rel in external if (m := self.resolve(rel) / MANIFEST).is_file()]
        out = []
        for m in manifests:
            try:
                manifest = artifact_manifest(m)
            except (UserError, OSError) as e:
                skipped.append(Skipped(m, f"not a readable workbench manifest ({e})"))
                continue
            if manifest.get("kind", m.parent.parent.name) not in KINDS:
                what = manifest.get("kind")
                skipped.append(Skipped(m, f"not a workbench manifest (kind {what!r}; valid kinds: {', '.join(KINDS)})"))
                continue
            if kind is None or manifest.get("kind") == kind:
                out.append(Artifact(manifest.get("kind", m.parent.parent.name), m.parent.name, m.parent, manifest))
        return out, skipped

    def clear(self) -> list[Skipped]:
        """Remove what the workspace's manifests say the workbench made, and nothing else.

        Refuses `/`, the home folder, this repository and any folder above them outright, and any
        workspace holding a file no manifest lists (a user's notes, a .git folder, a half-finished
        step): those are listed in the error and left alone. A folder whose manifest is damaged (and a
        damaged index) is left in place as it is, and returned (with why) for the caller to name.
        """
        root = self.root.resolve()
        for guarded in (Path("/"), Path.home().resolve(), REPOSITORY):
            if root == guarded or _inside(guarded, root):
                raise OutputExistsError(
                    f"refusing to clear {self.root}: it is or contains {guarded}; choose a dedicated workspace folder"
                )
        if not root.exists():
            return []
        found, skipped = self.scan()
        kept = [s.path.resolve() if s.path.name == INDEX else s.path.resolve().parent for s in skipped]
        made = set(stale_locks(root)) | (set() if any(k == (root / INDEX) for k in kept) else {root / INDEX})
        made |= {p for p in root.rglob("*") if p.is_file() and staged(p.relative_to(root))}  # killed steps' staging
        for a in found:
            folder = a.path.resolve()
            if not _inside(folder, root):
                continue  # registered from elsewhere: not this workspace's to delete
            made |= {folder / MANIFEST} | {folder / f for f in a.manifest.get("files", {})}
            made |= {p for p in folder.rglob(".*") if p.is_file()}  # atomic-write temp files of the step
            made |= {(root / s).resolve() for s in a.manifest.get("side_files", [])}
        entries = [p for p in root.rglob("*") if not any(p == k or _inside(p, k) for k in kept)]
        foreign = sorted(str(p.relative_to(root)) for p in entries if (p.is_file() or p.is_symlink()) and p not in made)
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise OutputExistsError(
                f"refusing to clear {self.root}: {len(foreign)} file(s) no workspace manifest "
                f"lists ({shown}); move them or choose another workspace"
            )
        removed = [p for p in entries if p in made and p.is_file()]
        for p in removed:
            p.unlink()
        # folders that held what was removed, up to the root; empty folders of the user's stay
        held = {d for p in removed for d in p.parents if _inside(d, root)}
        for d in sorted(held, key=lambda p: -len(p.parts)):
            if d.is_dir() and not d.is_symlink() and not any(d.iterdir()):
                d.rmdir()
        return skipped


def slug(text: str) -> str:
    """A folder-name-safe version of a spec: 'data/x.txt,hf:y' -> 'data_x.txt_hf_y'."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(text)).strip("_.") or "artifact"


def check_name(name) -> str:
    """Refuse an artifact name that is not one plain folder name: empty, '.', '..', with a separator, absolute."""
    if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise BadValueError(f"artifact name {name!r} must be one folder name (no '/' or '\\', not empty, '.' or '..')")
    return name


def check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise BadValueError(f"unknown artifact kind {kind!r}; valid kinds: {', '.join(KINDS)}")


def staged(path: Path) -> bool:
    """Whether `path` lies in an artifact's staging folder (not yet an artifact: never listed or registered)."""
    return any(part.startswith(".") and STAGING in part for part in Path(path).parts)


def _inside(path: Path, root: Path) -> bool:
    return Path(path).resolve().is_relative_to(Path(root).resolve())
