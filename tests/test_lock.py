"""One process at a time per output: the lock names its holder, and dies with it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.lock import OutputBusyError, output_lock

ROOT = Path(__file__).resolve().parents[1]
HOLD = "import sys; from workbench.lock import output_lock\nwith output_lock(sys.argv[1], 'test holder'):\n    print('held', flush=True); sys.stdin.read()\n"


def hold(target):
    """A second process holding the lock on target until its stdin closes."""
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(target)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(ROOT)},
    )
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_second_holder_is_refused_with_the_first_ones_pid_and_command(tmp_path):
    target = tmp_path / "out"
    p = hold(target)
    try:
        with pytest.raises(
            OutputBusyError, match=rf"{target} is being written by another process \(pid {p.pid}, test holder"
        ):
            with output_lock(target, "me"):
                pass
    finally:
        p.stdin.close()
        p.wait()
    with output_lock(target, "me"):  # released when the holder exits
        assert json.loads((tmp_path / ".out.lock").read_text())["command"] == "me"
    assert not (tmp_path / ".out.lock").exists()


def test_a_killed_holder_leaves_no_lock(tmp_path):
    target = tmp_path / "out"
    p = hold(target)
    p.kill()
    p.wait()
    with output_lock(target, "me"):
        pass


def test_folders_made_for_the_lock_go_with_it(tmp_path):
    with output_lock(tmp_path / "ws" / "caches" / "c", "me"):
        assert (tmp_path / "ws" / "caches").is_dir()
    assert not (tmp_path / "ws").exists()


def test_a_workspace_clear_removes_a_killed_holders_lock_file(tmp_path):
    from workbench.workspace import Workspace

    stale = tmp_path / "ws" / "caches" / ".c.lock"
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")  # what kill -9 leaves: the file, no lock
    Workspace(tmp_path / "ws").clear()
    assert not (tmp_path / "ws").exists()


def test_a_second_cache_harvest_into_one_folder_is_refused(tmp_path, capsys):
    from workbench.cli import main

    p = hold(tmp_path / "c")
    try:
        assert main(["cache", "--out", str(tmp_path / "c"), "--workspace", str(tmp_path / "ws")]) == 2
    finally:
        p.stdin.close()
        p.wait()
    assert f"(pid {p.pid}, test holder" in capsys.readouterr().err


def _refused_while_paused(first, second, pattern, cwd, capsys, monkeypatch):
    """`first` paused in the middle of its first write matching `pattern` (another process); `second` meanwhile
    must be refused in one line naming the first's pid and command; the first then finishes."""
    from tests.test_atomic import stopped
    from workbench.cli import main

    p = stopped(first, pattern, 1, "pause", cwd)
    try:
        monkeypatch.chdir(cwd)
        assert main(second) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is being written by another process" in err[0], err
        assert f"(pid {p.pid}, workbench {' '.join(first[:2])}" in err[0], err
    finally:
        p.stdin.close()
        p.wait()
    assert p.returncode == 0, p.stderr.read()


def test_two_graph_builds_of_one_name_at_once_the_second_is_refused(small_world, tmp_path, capsys, monkeypatch):
    from tests.test_atomic import _graph_argv

    argv = _graph_argv(small_world, name="g", work="work")
    _refused_while_paused(argv, _graph_argv(small_world, name="g", work="other"), "*.pt", tmp_path, capsys, monkeypatch)
    assert (tmp_path / "ws" / "circuits" / "g" / "artifact.json").is_file()


def test_two_graph_builds_on_one_work_dir_at_once_the_second_is_refused(small_world, tmp_path, capsys, monkeypatch):
    from tests.test_atomic import _graph_argv

    argv = _graph_argv(small_world, name="a", work="work")
    _refused_while_paused(argv, _graph_argv(small_world, name="b", work="work"), "*.pt", tmp_path, capsys, monkeypatch)
    assert not (tmp_path / "ws" / "circuits" / "b").exists()


def test_two_set_trainings_into_one_out_at_once_the_second_is_refused(small_world, tmp_path, capsys, monkeypatch):
    argv = ["sae", "train", "--cache", str(small_world["cache"]), "--transcoders", "all", *small_world["train"]]
    argv += ["--out", "set", "--workspace", "ws"]
    _refused_while_paused(argv, argv, "*checkpoint.pt", tmp_path, capsys, monkeypatch)
    assert (tmp_path / "set" / "transcoders.json").is_file()
