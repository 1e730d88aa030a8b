"""The one read path for files the workbench wrote and reads back (the read side of workbench.atomic).

Whatever is wrong with such a file (unparsable or truncated, another JSON type at the top, a part missing or
of the wrong type, bytes changed since it was written) becomes one `DamagedFileError` that names the file and
what it is, never a traceback and never a silently wrong value:
- `json_file`, `torch_file`, `safetensors_file`, `npy_file` parse one file; `reading` wraps the code that takes
  a parsed file apart, so a part of the wrong shape is reported like unparsable bytes.
- Files other tools wrote (the importers' sources) go through the same path: `yaml_file` for their YAML,
  `confined` for a path one of them lists (it must stay inside the source folder), and `tensors` for the names,
  dtypes, shapes and finiteness of their weights, all checked before anything is converted or written.
- A file of a recorded artifact is checked against the checksum (or size) its artifact.json lists, once per
  process (`verify_listed`); artifact.json itself carries a checksum of its own contents (`seal`).
- Intermediates a resumed job reuses (a graph build's rows.json, a set's passes.json) are sealed JSON
  (`write_sealed_json` / `sealed_json`): a checksum of the contents and the key of the job they belong to.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from contextlib import contextmanager
from pathlib import Path

import yaml

from workbench.atomic import jsonable, sha256_file, write_json
from workbench.errors import DamagedFileError, MissingInputError, UserError

ARTIFACT = "artifact.json"  # workbench.workspace.MANIFEST (that module imports this one)
SEAL = "sha256"  # the field of a sealed JSON object holding the checksum of the rest
_VERIFIED: set[tuple] = set()  # (path, size, mtime, checksum) of the files whose checksum matched


def damaged(path, what: str, detail: str, way_out: str = "") -> DamagedFileError:
    """The one-line error for a damaged file: the file, what it is, what is wrong, and the way out."""
    detail = " ".join(str(detail).split())[:300]
    return DamagedFileError(f"{path}: damaged {what} ({detail})" + (f"; {way_out}" if way_out else ""))


@contextmanager
def reading(path, what: str, way_out: str = ""):
    """Any error raised while a file is parsed or taken apart becomes `damaged(...)` naming it; a UserError
    (already one line) passes through. Keep the block to the parsing: an error there is the file's."""
    try:
        yield
    except UserError:
        raise
    except RecursionError:
        raise damaged(path, what, "nested too deeply", way_out) from None
    except Exception as e:  # json, torch, safetensors, numpy and plain indexing raise many types for bad bytes
        raise damaged(path, what, _detail(e), way_out) from None


def _detail(e: Exception) -> str:
    """The gist of a parser's error; torch's weights_only refusal is a paragraph of advice to load the file with
    weights_only=False (running its pickled code), so only its reason is kept."""
    text = str(e)
    if "Weights only load failed" not in text:
        return f"{type(e).__name__}: {text}"
    cls = re.search(r"Unsupported global: GLOBAL (\S+)", text)
    reason = re.search(r"WeightsUnpickler error: ([^.\n]*)", text)
    what = f"a pickled {cls[1]}" if cls else (reason[1].strip() if reason else "pickled Python objects")
    return f"it holds {what}, not only tensors and plain data; such objects are not loaded (they could run code)"


def _exists(path: Path, what: str) -> None:
    if not path.is_file():
        raise MissingInputError(f"{path} does not exist (the {what})")


def json_file(path, what: str, way_out: str = "", *, fields: dict | None = None, top: type = dict):
    """The parsed JSON of a file the workbench wrote: of type `top`, with each of `fields` (name -> type or
    tuple of types) present and of its type; checked against its artifact's listed checksum."""
    path = Path(path)
    _exists(path, what)
    verify_listed(path, what, way_out)
    with reading(path, what, way_out):
        data = json.loads(path.read_bytes())
    return _typed(path, data, "JSON", what, way_out, fields, top)


def yaml_file(path, what: str, way_out: str = "", *, fields: dict | None = None, top: type = dict):
    """The parsed YAML of a file another tool wrote (safe_load: plain data only), checked as json_file checks."""
    path = Path(path)
    _exists(path, what)
    with reading(path, what, way_out):
        data = yaml.safe_load(path.read_bytes())
    return _typed(path, data, "YAML", what, way_out, fields, top)


def _typed(path: Path, data, kind_of: str, what: str, way_out: str, fields: dict | None, top: type):
    """`data` when it is a `top` with each of `fields` present and of its type; else damaged(...)."""
    if not isinstance(data, top):
        raise damaged(path, what, f"a {kind_of} {type(data).__name__}, not a {kind_of} {top.__name__}", way_out)
    for name, kind in (fields or {}).items():
        if name not in data:
            raise damaged(path, what, f"no {name!r}", way_out)
        if not isinstance(data[name], kind) or (isinstance(data[name], bool) and bool not in _types(kind)):
            raise damaged(path, what, f"{name!r} is {type(data[name]).__name__}, not {_names(kind)}", way_out)
    return data


def _types(kind) -> tuple:
    return kind if isinstance(kind, tuple) else (kind,)


def _names(kind) -> str:
    return " or ".join(t.__name__ for t in _types(kind))


def json_or_empty(path, what: str, way_out: str = "") -> dict:
    """json_file of an optional file: {} when it is not there."""
    return json_file(path, what, way_out) if Path(path).is_file() else {}


def torch_file(path, what: str, way_out: str = ""):
    """A torch.save file (tensors and plain data only)."""
    import torch

    path = Path(path)
    _exists(path, what)
    verify_listed(path, what, way_out)
    with reading(path, what, way_out):
        return torch.load(path, map_location="cpu", weights_only=True)


def safetensors_file(path, what: str, way_out: str = "") -> dict:
    from safetensors.torch import load_file

    path = Path(path)
    _exists(path, what)
    verify_listed(path, what, way_out)
    with reading(path, what, way_out):
        return load_file(str(path))


def npy_file(path, what: str, way_out: str = "", mmap: bool = False):
    import numpy as np

    path = Path(path)
    _exists(path, what)
    verify_listed(path, what, way_out)
    with reading(path, what, way_out):
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)


def confined(folder, listed, what: str, listed_in) -> Path:
    """`folder`/`listed` for a path that a file in `folder` (`listed_in`) names, refused when it is absolute or
    leads out of the folder; judged on the path as written, so a Hub cache's symlinked snapshot files pass."""
    base = Path(os.path.normpath(Path(folder).absolute()))
    path = Path(os.path.normpath(base / str(listed)))
    if Path(str(listed)).is_absolute() or not path.is_relative_to(base):
        raise damaged(listed_in, what, f"it names {str(listed)!r}, which is outside {folder}", "list files in it")
    return path


def tensors(
    path, what: str, state, shapes: dict, *, optional=(), ints=(), dims: dict | None = None, given="the layers before"
) -> dict:
    """Check the weights another tool saved before any are converted: a mapping holding each name of `shapes`
    (those in `optional` may be absent), floating point (`ints`: integer), of its shape, and finite. A shape
    entry is an int or a dimension's name, bound by the first tensor that has it (or by `dims`) and then held
    to (`given`: where `dims` came from, for the message); returns the dimensions bound."""
    import torch

    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        got = type(state).__name__ if not isinstance(state, dict) else "a mapping with non-tensor values"
        raise damaged(path, what, f"holds {got}, not a mapping of names to tensors")
    dims = dict(dims or {})
    origin = {d: given for d in dims}
    for name, shape in shapes.items():
        if name not in state:
            if name in optional:
                continue
            raise damaged(path, what, f"no tensor {name!r}; it has {', '.join(sorted(map(repr, state))) or 'none'}")
        t = state[name]
        if t.is_floating_point() == (name in ints):
            raise damaged(path, what, f"{name!r} is {t.dtype}, not {'an integer' if name in ints else 'a float'}")
        for d, n in zip(shape, t.shape):
            if isinstance(d, str) and d not in dims:
                dims[d], origin[d] = n, repr(name)
        if len(shape) != t.dim() or list(t.shape) != [dims.get(d, d) for d in shape]:
            expected = ", ".join(f"{d}={dims[d]}" if d in dims else str(d) for d in shape)
            by = [f"{d} from {origin[d]}" for d in shape if d in dims and origin[d] != repr(name)]
            detail = f"{name!r} has shape {list(t.shape)}, not [{expected}]" + (f" ({', '.join(by)})" if by else "")
            raise damaged(path, what, detail)
        finite(path, what, {name: t})
    return dims


def finite(path, what: str, state: dict) -> None:
    """Refuse a file whose floating-point tensors hold NaN or inf, naming the first such tensor."""
    import torch

    for name, t in state.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise damaged(path, what, f"{name!r} holds {bad} NaN/inf value{'s' if bad > 1 else ''}")


def digest(data: dict) -> str:
    """The checksum of a JSON object's contents, the seal field left out (independent of key order)."""
    rest = {k: v for k, v in data.items() if k != SEAL}
    return hashlib.sha256(json.dumps(rest, sort_keys=True, default=str).encode()).hexdigest()


def seal(data: dict) -> dict:
    """`data` with the checksum of its contents (what `sealed_json` checks)."""
    return {**{k: v for k, v in data.items() if k != SEAL}, SEAL: digest(data)}


def write_sealed_json(path, data: dict, indent: int | None = 1) -> None:
    write_json(path, seal(jsonable(data)), indent=indent)  # sealed as it reads back


def sealed_json(path, what: str, way_out: str = "", *, fields: dict | None = None, legacy: bool = False) -> dict:
    """A sealed JSON object, its checksum checked (legacy: one written before seals were, accepted unchecked);
    returned without the seal."""
    data = json_file(path, what, way_out, fields=fields)
    if SEAL not in data:
        if legacy:
            return data
        raise damaged(path, what, f"no {SEAL!r} checksum: damaged, or written by an older workbench", way_out)
    if data[SEAL] != digest(data):
        raise damaged(path, what, "its checksum does not match its contents: changed since it was written", way_out)
    return {k: v for k, v in data.items() if k != SEAL}


def owner(path: Path) -> Path | None:
    """The artifact.json of the recorded artifact a file lies in (the nearest folder above it holding one)."""
    for folder in Path(path).absolute().parents:
        if (folder / ARTIFACT).is_file():
            return folder / ARTIFACT
    return None


def artifact_manifest(path, way_out: str = "") -> dict:
    """An artifact.json, parsed and its seal checked (one written before seals were passes unchecked)."""
    way_out = way_out or "restore it, or remake the artifact with the step that made it"
    return sealed_json(path, "artifact manifest", way_out, fields={"files": dict}, legacy=True)


def verify_listed(path, what: str, way_out: str = "") -> None:
    """Refuse a file that differs from what its artifact's manifest lists (a checksum, or a size where the
    artifact checksums itself, as a cache does); a file no manifest lists passes (checked once per process)."""
    path = Path(path)
    if path.name == ARTIFACT or (manifest := owner(path)) is None:
        return
    rel = path.absolute().relative_to(manifest.parent).as_posix()
    listed = artifact_manifest(manifest)["files"].get(rel)
    if listed is None:
        return
    if isinstance(listed, int) and not isinstance(listed, bool):
        size = path.stat().st_size
        if size != listed:
            raise damaged(path, what, f"{size} bytes, {manifest} lists {listed}: truncated", way_out)
    else:
        verify_checksum(path, listed, what, way_out, manifest)


def verify_checksum(path, want, what: str, way_out: str = "", where="its manifest") -> None:
    """Refuse a file whose SHA-256 is not `want` (what a manifest recorded when it was written); each file is
    hashed once per process while its size and mtime stay the same."""
    path = Path(path)
    stat = path.stat()
    seen = (str(path.absolute()), stat.st_size, stat.st_mtime_ns, want)
    if seen in _VERIFIED:
        return
    if sha256_file(path) != want:
        raise damaged(
            path, what, f"its checksum differs from the one {where} lists: changed since it was written", way_out
        )
    _VERIFIED.add(seen)


def verify_artifact(folder, what: str) -> None:
    """Every file the artifact's manifest lists, checked as `verify_listed` does (each once per process): what an
    artifact's loader calls on open, so a damaged file of it is refused even where that loader does not parse it.
    A folder without a manifest (an SAE trained elsewhere) passes."""
    manifest = Path(folder) / ARTIFACT
    if manifest.is_file():
        for rel in artifact_manifest(manifest)["files"]:
            path = Path(folder) / rel
            if not path.is_file():
                raise damaged(path, what, f"missing: {manifest} lists it", "restore it or remake the artifact")
            verify_listed(path, what if owner(path) == manifest.absolute() else f"member of the {what}")


def read_json(path: str | Path, error: type[Exception], way_out: str, what: str = "workbench JSON file") -> dict:
    """A JSON object the workbench wrote, read through the one read path (json_file); any
    damage raises `error`, one line naming the file, what is wrong and `way_out` (e.g. "remake it with ...")."""
    try:
        return json_file(path, what, way_out)
    except DamagedFileError as e:
        if error is DamagedFileError:
            raise
        raise error(str(e)) from None
