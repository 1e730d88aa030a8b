import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from workbench.corpus import load_corpus
from workbench.errors import BadValueError

DOCS = [f"Mary went to the park . John saw a big tree number {i} ." for i in range(40)]


def _write_all(tmp_path):
    (tmp_path / "c.txt").write_text("\n\n".join(DOCS))
    (tmp_path / "c.jsonl").write_text("\n".join(json.dumps({"text": d}) for d in DOCS))
    pq.write_table(pa.table({"text": DOCS}), tmp_path / "c.parquet")
    return [tmp_path / f"c.{s}" for s in ("txt", "jsonl", "parquet")]


def test_file_formats_give_the_same_sequences(tmp_path, tokenizer):
    outs = []
    for path in _write_all(tmp_path):
        seqs = list(load_corpus(str(path), tokenizer).sequences(16))
        assert seqs and all(s.tokens[0] == tokenizer.bos_token_id for s in seqs)
        outs.append(np.stack([s.tokens for s in seqs]))
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])


def test_file_corpus_resume_and_heldout(tmp_path, tokenizer):
    path = _write_all(tmp_path)[1]
    corpus = load_corpus(str(path), tokenizer)
    full = [s.tokens for s in corpus.sequences(16)]
    np.testing.assert_array_equal(np.stack(full[2:]), np.stack([s.tokens for s in corpus.sequences(16, start=2)]))
    held = list(corpus.sequences(16, split="heldout"))
    assert held and set(np.concatenate([s.doc_ids for s in held])) - {-1} == {19, 39}


def test_bad_corpus_specs(tmp_path, tokenizer):
    with pytest.raises(BadValueError, match="does not exist"):
        load_corpus(str(tmp_path / "missing.txt"), tokenizer)
    with pytest.raises(BadValueError, match="expected 'synthetic', 'hf:<dataset>' or a file"):
        load_corpus(str(tmp_path / "data.csv"), tokenizer)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\nnot json\n')
    with pytest.raises(BadValueError, match="bad.jsonl:2"):
        list(load_corpus(str(bad), tokenizer).sequences(8))
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(BadValueError, match="cannot read corpus file"):
        list(load_corpus(str(binary), tokenizer).sequences(8))


def test_hf_corpus_offline_is_one_clear_error(tokenizer, monkeypatch):
    import datasets
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # the sandbox state, made explicit
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    corpus = load_corpus("hf:nonexistent/dataset", tokenizer)
    with pytest.raises(BadValueError, match=r"cannot stream Hugging Face dataset 'hf:nonexistent/dataset' .*offline"):
        next(corpus.sequences(16))
