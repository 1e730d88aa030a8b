"""Corpus specs -> token sources with one interface (`spec`, `label_names`, `sequences`).

  "synthetic" / "synthetic:seed=N"   the generated task corpus (workbench.corpus.synthetic)
  path(s) to .txt / .jsonl / .parquet files or `datasets` save_to_disk folders (comma-separated)
  "hf:<dataset>[:<config>]"          a Hugging Face dataset, streamed (needs a network or a local HF cache)
  "pydoc"                            real English offline: the standard library's documentation topics
                                     (pydoc_data.topics, the `help()` text of the running Python), one
                                     document per paragraph, topics in name order

The text is a jsonl field, parquet column or dataset column (`text_field`, the CLI's --text-field); a
wrong one is refused naming the fields there are, and a non-UTF-8 byte naming its file and offset.
File corpora are packed like the synthetic one (BOS, documents joined by EOS, cut at ctx_len) and
carry no ground-truth labels: task/role are "text"/"word" and entity is -1.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Iterable, Iterator
from pathlib import Path
from pydoc_data.topics import topics

import numpy as np

from workbench.corpus.base import TokenSequence, check_split
from workbench.corpus.synthetic import SyntheticCorpus
from workbench.errors import BadValueError

FILE_SUFFIXES = (".txt", ".jsonl", ".parquet")
PYDOC = "pydoc"
HELDOUT_EVERY = 20  # every 20th document of a file corpus is held out


def load_corpus(spec: str, tokenizer, seed: int = 0, text_field: str = "text"):
    if spec == "synthetic" or spec.startswith("synthetic:"):
        if spec.startswith("synthetic:seed="):
            seed = int(spec.split("=", 1)[1])
        elif spec != "synthetic":
            raise BadValueError(f"bad synthetic corpus spec {spec!r}; use 'synthetic' or 'synthetic:seed=N'")
        return SyntheticCorpus(tokenizer, seed)
    if spec.startswith("hf:"):
        return FileCorpus(spec, tokenizer, text_field)
    if spec == PYDOC or spec.startswith(PYDOC + ":"):
        if spec not in (PYDOC, pydoc_spec()):
            raise BadValueError(
                f"corpus {spec!r} is another Python's documentation; this Python's is {pydoc_spec()!r} (use {PYDOC!r})"
            )
        return FileCorpus(PYDOC, tokenizer, text_field)
    return FileCorpus([p.strip() for p in spec.split(",")], tokenizer, text_field)


def _read_texts(path: Path, text_field: str) -> Iterator[str]:
    if path.is_dir():
        yield from _saved_dataset_texts(path, text_field)
    elif path.suffix == ".txt":
        # documents are separated by blank lines
        yield from (d.strip() for d in _decode(path.read_bytes(), path, 0).split("\n\n") if d.strip())
    elif path.suffix == ".jsonl":
        yield from _jsonl_texts(path, text_field)
    else:
        import pyarrow.parquet as pq

        try:
            columns = pq.read_schema(path).names
        except Exception as e:  # pyarrow raises several types for a damaged file
            raise BadValueError(f"cannot read parquet file {path}: {type(e).__name__}: {e}") from e
        if text_field not in columns:
            raise BadValueError(
                f"parquet file {path} has no {text_field!r} column; its columns: {columns} (--text-field)"
            )
        yield from pq.read_table(path, columns=[text_field]).column(text_field).to_pylist()


def _decode(data: bytes, path: Path, offset: int) -> str:
    """UTF-8 text of `data` (read from `path` at byte `offset`); a bad byte is one error naming its offset."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadValueError(
            f"corpus file {path} is not UTF-8 text: byte {offset + e.start} is {data[e.start : e.start + 1]!r} "
            f"({e.reason}); convert it to UTF-8"
        ) from None


def _jsonl_texts(path: Path, text_field: str) -> Iterator[str]:
    offset = 0
    with path.open("rb") as f:
        for n, raw in enumerate(f, 1):
            line, offset = _decode(raw, path, offset), offset + len(raw)
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise BadValueError(f"{path}:{n}: expected a JSON object with a {text_field!r} field ({e})") from e
            yield _field(row, text_field, f"{path}:{n}")


def _saved_dataset_texts(path: Path, text_field: str) -> Iterator[str]:
    """A folder written by `datasets` save_to_disk: a Dataset, or a DatasetDict's 'train' (or only) split."""
    try:
        import datasets
    except ImportError:
        raise BadValueError(f"{path} is a folder: reading a saved dataset needs the `datasets` package") from None
    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as e:  # FileNotFoundError for a folder that is no saved dataset, others when damaged
        raise BadValueError(
            f"corpus folder {path} is not a dataset saved with `datasets` save_to_disk ({type(e).__name__}: {e})"
        ) from None
    if isinstance(ds, datasets.DatasetDict):
        split = "train" if "train" in ds else next(iter(ds), None)
        if split is None or ("train" not in ds and len(ds) > 1):
            raise BadValueError(f"saved dataset {path} has no 'train' split; its splits: {sorted(ds)}")
        ds = ds[split]
    if text_field not in ds.column_names:
        raise BadValueError(f"saved dataset {path} has no {text_field!r} column; its columns: {ds.column_names}")
    for row in ds.select_columns([text_field]):
        yield row[text_field]


def _hf_texts(name: str, text_field: str) -> Iterator[str]:
    import datasets

    ds_name, _, config = name.partition(":")
    try:
        ds = datasets.load_dataset(ds_name, config or None, split="train", streaming=True)
        rows = iter(ds)
        first = next(rows, None)
    except Exception as e:  # datasets raises many types (ConnectionError offline, FileNotFoundError, ValueError)
        raise BadValueError(
            f"cannot stream Hugging Face dataset 'hf:{name}' ({type(e).__name__}: "
            f"{str(e).splitlines()[0][:200] if str(e) else ''}); hf: corpora need a network or a local "
            "copy in the Hugging Face cache; use .txt/.jsonl/.parquet files offline"
        ) from e
    for row in [] if first is None else [first]:
        yield _field(row, text_field, f"Hugging Face dataset 'hf:{name}'")
    for row in rows:
        yield _field(row, text_field, f"Hugging Face dataset 'hf:{name}'")


def pydoc_spec() -> str:
    """The recorded spec of the pydoc corpus: the documentation is the running Python's, so its version names it."""
    return f"{PYDOC}:python-{platform.python_version()}"


def _pydoc_texts() -> Iterator[str]:
    """The paragraphs of the standard library's documentation topics (the text `help('if')` prints), in topic
    order: English prose with code samples that every Python install carries."""
    for key in sorted(topics):
        yield from (p.strip() for p in topics[key].split("\n\n") if p.strip())


def _field(row, text_field: str, where: str) -> str:
    if not isinstance(row, dict):
        raise BadValueError(f"{where}: expected a JSON object with a {text_field!r} field, got a {type(row).__name__}")
    if text_field not in row:
        raise BadValueError(f"{where} has no {text_field!r} field; its fields: {sorted(row)} (--text-field)")
    return row[text_field]


def _check_path(p: Path) -> None:
    if p.is_dir():
        return  # a saved `datasets` folder, checked when read
    if p.suffix not in FILE_SUFFIXES:
        raise BadValueError(
            f"unknown corpus spec {str(p)!r}: expected 'synthetic', 'hf:<dataset>', a folder saved by `datasets` "
            f"save_to_disk, a file ending in {', '.join(FILE_SUFFIXES)}, or {PYDOC!r} (the standard library's "
            "documentation)"
        )
    if not p.is_file():
        raise BadValueError(f"corpus file {str(p)!r} does not exist or is not a file")
    if p.stat().st_size == 0:
        raise BadValueError(f"corpus file {p} is empty (0 bytes at byte offset 0); give a file with text")


class FileCorpus:
    label_names = {"task": ["special", "text"], "role": ["special", "word"]}

    def __init__(self, source: str | list[str], tokenizer, text_field: str = "text"):
        self.tokenizer = tokenizer
        self.text_field = text_field
        if isinstance(source, str):  # hf:<name> or pydoc
            self._paths: list[Path] = []
            self._hf = source[3:] if source.startswith("hf:") else None
            self.spec = source if self._hf is not None else pydoc_spec()
        else:
            self._hf = None
            self._paths = [Path(p) for p in source]
            for p in self._paths:
                _check_path(p)
            self.spec = ",".join(str(p.resolve()) for p in self._paths)

    def _texts(self) -> Iterable[str]:
        if self.spec.startswith(PYDOC):
            yield from _pydoc_texts()
        if self._hf is not None:
            yield from _hf_texts(self._hf, self.text_field)
        for p in self._paths:
            try:
                yield from _read_texts(p, self.text_field)
            except (OSError, UnicodeDecodeError) as e:
                raise BadValueError(f"cannot read corpus file {str(p)!r}: {e}") from e

    def sequences(self, ctx_len: int, start: int = 0, split: str = "train") -> Iterator[TokenSequence]:
        """Finite packed sequences; `start` skips that many (resume) without changing what follows."""
        check_split(split)
        bos, eos = self.tokenizer.bos_token_id, self.tokenizer.eos_token_id
        toks, docs = [bos], [-1]
        i = 0
        for d, text in enumerate(self._texts()):
            if (d % HELDOUT_EVERY == HELDOUT_EVERY - 1) != (split == "heldout"):
                continue
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [eos]
            toks += ids
            docs += [d] * len(ids)
            while len(toks) >= ctx_len:
                if i >= start:
                    yield self._pack(toks[:ctx_len], docs[:ctx_len])
                i += 1
                toks, docs = [bos] + toks[ctx_len:], [-1] + docs[ctx_len:]

    def _pack(self, toks: list[int], docs: list[int]) -> TokenSequence:
        t = np.asarray(toks, dtype=np.int64)
        special = np.isin(t, self.tokenizer.all_special_ids)
        task = np.where(special, 0, 1).astype(np.int16)
        return TokenSequence(
            t,
            np.asarray(docs, dtype=np.int64),
            {"task": task, "role": task.copy(), "entity": np.full(len(t), -1, np.int32)},
        )
