import json
import re
from pathlib import Path

import pytest

from workbench.errors import BadValueError, OutputExistsError
from workbench.workspace import INDEX, MANIFEST, REPOSITORY, Workspace


def _artifact(ws: Workspace, kind: str, name: str, files: dict[str, str], folder: Path | None = None) -> Path:
    folder = folder or ws.path(kind, name)
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    ws.record(folder, kind, made_by="test", config={"x": 1}, inputs={"source": folder / next(iter(files))})
    return folder


def test_record_lists_files_and_stores_paths_relative_to_the_root(tmp_path):
    ws = Workspace(tmp_path / "ws")
    folder = _artifact(ws, "caches", "c", {"a.txt": "a", "sub/b.txt": "b"})
    m = json.loads((folder / MANIFEST).read_text())
    assert set(m["files"]) == {"a.txt", "sub/b.txt"} and m["inputs"]["source"] == "caches/c/a.txt"
    [art] = ws.artifacts()
    assert (art.kind, art.name, art.path) == ("caches", "c", folder)


def test_an_artifact_written_elsewhere_is_registered_and_found(tmp_path):
    ws = Workspace(tmp_path / "ws")
    _artifact(ws, "saes", "s", {"cfg.json": "{}"}, folder=tmp_path / "elsewhere" / "s")
    assert json.loads((tmp_path / "ws" / INDEX).read_text())["external"] == ["../elsewhere/s"]
    assert [(a.kind, a.path) for a in ws.artifacts("saes")] == [("saes", tmp_path / "ws" / "../elsewhere/s")]
    assert ws.artifacts("caches") == []


def test_moving_a_workspace_keeps_its_artifacts(tmp_path):
    ws = Workspace(tmp_path / "ws")
    _artifact(ws, "circuits", "q", {"circuit.json": "{}"})
    (tmp_path / "ws").rename(tmp_path / "moved")
    [art] = Workspace(tmp_path / "moved").artifacts()
    assert art.manifest["inputs"]["source"] == "circuits/q/circuit.json"


def test_bad_kind_and_name_are_refused(tmp_path):
    ws = Workspace(tmp_path)
    with pytest.raises(BadValueError, match="unknown artifact kind 'cach'; valid kinds: caches"):
        ws.path("cach", "x")
    with pytest.raises(BadValueError, match="one folder name"):
        ws.path("caches", "../escape")
    for bad in ("/abs/olute", "", ".", "a/b", "a\\b"):  # every name, the run and member levels too
        with pytest.raises(BadValueError, match=f"artifact name {re.escape(repr(bad))} must be one folder name"):
            ws.path("saes", "imported", bad)
    assert ws.path("saes", "imported", "x") == tmp_path / "saes" / "imported" / "x"


def test_clear_removes_only_what_manifests_list(tmp_path):
    ws = Workspace(tmp_path / "ws")
    _artifact(ws, "caches", "c", {"a.txt": "a"})
    _artifact(ws, "saes", "s", {"w.bin": "w"}, folder=tmp_path / "ws" / "saes" / "run" / "s")
    (tmp_path / "ws" / "saes" / "run" / "checkpoint.pt").write_text("ckpt")
    ws.record(
        tmp_path / "ws" / "saes" / "run" / "s",
        "saes",
        made_by="test",
        config={},
        side_files=(tmp_path / "ws" / "saes" / "run" / "checkpoint.pt",),
    )
    outside = _artifact(ws, "models", "m", {"w": "w"}, folder=tmp_path / "mine" / "m")
    ws.clear()
    assert not (tmp_path / "ws").exists() and (outside / "w").is_file()  # registered, not ours to delete


@pytest.mark.parametrize("stray", [".git/HEAD", "notes.md", "caches/c/user.txt", "caches/half-done/shard.npy"])
def test_clear_refuses_a_workspace_holding_anything_else(tmp_path, stray):
    ws = Workspace(tmp_path / "ws")
    _artifact(ws, "caches", "c", {"a.txt": "a"})
    (tmp_path / "ws" / stray).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "ws" / stray).write_text("keep me")
    with pytest.raises(OutputExistsError, match=f"1 file\\(s\\) no workspace manifest lists \\({stray}\\)"):
        ws.clear()
    assert (tmp_path / "ws" / stray).read_text() == "keep me" and (tmp_path / "ws" / "caches" / "c" / "a.txt").is_file()


@pytest.mark.parametrize("root", [Path("/"), Path.home(), REPOSITORY, REPOSITORY.parent])
def test_clear_refuses_the_root_the_home_and_the_repository(root):
    with pytest.raises(OutputExistsError, match="refusing to clear"):
        Workspace(root).clear()


@pytest.mark.parametrize("text", ["{", "[]", '{"kind": "elsewhere"}'])
def test_a_damaged_manifest_is_skipped_with_its_path_everywhere(tmp_path, text):
    ws = Workspace(tmp_path / "ws")
    good = _artifact(ws, "circuits", "good", {"circuit.json": "{}"})
    bad = ws.path("circuits", "bad")
    bad.mkdir(parents=True)
    (bad / MANIFEST).write_text(text)
    arts, skipped = ws.scan()
    assert [a.path for a in arts] == [good] and ws.artifacts() == arts
    assert [s.path for s in skipped] == [bad / MANIFEST] and str(bad / MANIFEST) in str(skipped[0])
    (bad / "notes.txt").write_text("mine")
    [left] = ws.clear()  # the rest goes; the damaged folder stays as it is, and is named
    assert left.path == bad / MANIFEST and (bad / "notes.txt").read_text() == "mine" and not good.exists()


def test_a_damaged_index_is_named_and_the_workspace_still_lists(tmp_path):
    ws = Workspace(tmp_path / "ws")
    good = _artifact(ws, "models", "m", {"config.json": "{}"})
    (tmp_path / "ws" / INDEX).write_text('{"external": "../elsewhere"}')
    arts, skipped = ws.scan()
    assert [a.path for a in arts] == [good] and "unreadable workspace index" in skipped[0].reason


def test_ls_names_a_damaged_manifest_and_lists_the_rest(tmp_path, capsys):
    from workbench.cli import main

    ws = Workspace(tmp_path / "ws")
    _artifact(ws, "circuits", "good", {"circuit.json": "{}"})
    bad = ws.path("circuits", "bad")
    bad.mkdir(parents=True)
    (bad / MANIFEST).write_text("[]")
    assert main(["ls", "--workspace", str(tmp_path / "ws")]) == 0
    out, err = capsys.readouterr()
    assert "good" in out and f"skipped {bad / MANIFEST}" in err


def _ls(argv, capsys):
    from workbench.cli import main

    rc = main(["ls", *argv])
    io = capsys.readouterr()
    return rc, io.err.strip().splitlines()


def test_ls_of_a_file_is_one_line_not_an_empty_workspace(tmp_path, capsys):
    (tmp_path / "f.json").write_text("{}")
    rc, err = _ls(["--workspace", str(tmp_path / "f.json")], capsys)
    assert rc == 2 and len(err) == 1 and "f.json is a file, not a workspace folder" in err[0], err


def test_clear_keeps_empty_folders_no_manifest_lists(tmp_path):
    ws = Workspace(tmp_path / "ws")
    _artifact(ws, "caches", "c", {"a.txt": "a"})
    (tmp_path / "ws" / "notes" / "later").mkdir(parents=True)
    (tmp_path / "ws" / "circuits").mkdir()
    ws.clear()
    assert (tmp_path / "ws" / "notes" / "later").is_dir() and (tmp_path / "ws" / "circuits").is_dir()
    assert not (tmp_path / "ws" / "caches").exists()


def test_a_recorded_model_folder_resolves_against_the_root_whatever_the_working_directory(tmp_path, monkeypatch):
    ws = Workspace(tmp_path / "ws")
    (ws.root / "models" / "m").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)  # "models/m" does not exist from here: `circuit check` once loaded it from here
    assert ws.model_spec(ws.rel(ws.root / "models" / "m")) == str(ws.root / "models" / "m")
    assert ws.model_spec("tiny") == "tiny"  # an embedded name (no such folder in the workspace) stays a name
