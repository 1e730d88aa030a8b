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
