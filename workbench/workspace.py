"""The workspace: every artifact a step produces, as plain files plus a manifest.

Layout: <root>/<kind>/<name>/ with an `artifact.json` manifest that records what made the artifact (the
command and its config), from which inputs (model id, cache path, ...), when, and the checksums of
its files. Later steps and the app find artifacts through `Workspace.artifacts`, never by guessing.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from workbench.atomic import atomic_write_text, sha256_file
from workbench.errors import BadValueError

KINDS = ("caches", "saes", "circuits", "models", "features")
MANIFEST = "artifact.json"


@dataclass
class Artifact:
    kind: str
    name: str
    path: Path
    manifest: dict


class Workspace:
    def __init__(self, root: str | Path):
        self.root = Path(root)

    def path(self, kind: str, name: str) -> Path:
        if kind not in KINDS:
            raise BadValueError(f"unknown artifact kind {kind!r}; valid kinds: {', '.join(KINDS)}")
        return self.root / kind / name

    def record(self, kind: str, name: str, *, made_by: str, config: dict, inputs: dict | None = None,
               summary: dict | None = None, checksums: bool = True) -> Path:
        """Write the artifact's manifest after its files are complete (its presence means 'done').

        checksums=False lists file sizes only, for artifacts that checksum themselves (a cache's
        own manifest.json holds per-shard checksums; hashing gigabytes twice buys nothing).
        """
        folder = self.path(kind, name)
        files = {str(p.relative_to(folder)): sha256_file(p) if checksums else p.stat().st_size
                 for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MANIFEST and not p.name.startswith(".")}
        manifest = {"kind": kind, "name": name, "made_by": made_by, "config": config, "inputs": inputs or {},
                    "summary": summary or {}, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "files": files}
        atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=2, default=str))
        return folder / MANIFEST

    def artifacts(self, kind: str | None = None) -> list[Artifact]:
        kinds = [kind] if kind else list(KINDS)
        out = []
        for k in kinds:
            for m in sorted(self.root.glob(f"{k}/*/{MANIFEST}")) if k in KINDS else []:
                out.append(Artifact(k, m.parent.name, m.parent, json.loads(m.read_text())))
        return out
