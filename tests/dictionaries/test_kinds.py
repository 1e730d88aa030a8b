"""The table of dictionary kinds: every row names a folder class and steps that exist, its manifest is the file its
writer writes, a folder is recognised by its manifest, and no other module names a kind the table holds."""

import re
from pathlib import Path

import pytest

from workbench import browse, workspace
from workbench.dictionaries.folders import DictionaryFolder
from workbench.dictionaries.kinds import CLT, GRAPH_KINDS, KINDS, SAE, TRANSCODERS, by_name, kind_of, named
from workbench.errors import BadValueError

ROOT = Path(__file__).resolve().parents[2]


def test_every_row_names_its_folder_class_and_steps():
    for kind in KINDS:
        cls = named(kind.folder)
        assert issubclass(cls, DictionaryFolder) and cls.kind is kind
        for step in (kind.train, kind.evaluate, kind.import_, kind.export):
            assert step is None or callable(named(step))
        assert kind.workspace in workspace.KINDS and by_name(kind.name) is kind
    assert GRAPH_KINDS == (TRANSCODERS, CLT)


def test_each_manifest_is_the_file_its_writer_writes():
    from workbench.sae import clt_io, io, transcoders

    assert (TRANSCODERS.manifest, CLT.manifest) == (transcoders.SET_MANIFEST, clt_io.MANIFEST)
    assert SAE.files == (io.CFG, io.WEIGHTS) == browse.SAE_FILES


def test_an_unknown_kind_is_refused_naming_the_kinds():
    with pytest.raises(BadValueError, match=r"^dictionary kind 'crosscoder' is not one of sae, transcoders, clt$"):
        by_name("crosscoder")


def test_a_folder_is_recognised_by_the_manifest_it_holds(tmp_path):
    for kind in KINDS:
        (tmp_path / kind.name).mkdir()
        (tmp_path / kind.name / kind.manifest).write_text("{}")
        assert kind_of(tmp_path / kind.name) is kind
    (tmp_path / "empty").mkdir()
    assert kind_of(tmp_path / "empty") is None and kind_of(tmp_path / "empty", SAE) is SAE
    (tmp_path / "clt" / SAE.manifest).write_text("{}")  # a set's or a CLT's manifest wins over an SAE config
    assert kind_of(tmp_path / "clt") is CLT


def test_only_the_table_names_the_cross_layer_kind():
    """The CLT's workspace kind and manifest are spelled out only in the table (and in the module that writes the
    manifest, below it): every other reader looks them up."""
    spelled = re.compile(rf'"({re.escape(CLT.workspace)}|{re.escape(CLT.manifest)})"')
    allowed = {"workbench/dictionaries/kinds.py", "workbench/sae/clt_io.py"}
    found = sorted(
        str(p.relative_to(ROOT))
        for top in ("workbench", "app")
        for p in (ROOT / top).rglob("*.py")
        if spelled.search(p.read_text()) and str(p.relative_to(ROOT)) not in allowed
    )
    assert found == []
