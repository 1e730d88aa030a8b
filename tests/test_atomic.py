"""A crash never leaves a half-written artifact that passes as finished: real commands killed with SIGKILL in the
middle of a write, then run again (the same result byte for byte, or a one-line refusal), and real full disks (a
small tmpfs) during a graph build, a transcoder set's training and a feature store's build (one line naming the
file, nothing listed, and the rerun finishes once there is space)."""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from workbench.cli import main
from workbench.workspace import MANIFEST, Workspace

# Runs `workbench ARGV` and stops it in the nth atomic write of a file matching PATTERN, after the data is written
# and before the rename: "kill" truncates the temporary file to half and sends itself SIGKILL (no clean-up runs);
# "pause" prints "paused" and waits until its stdin closes, then finishes.
DRIVER = """
import fnmatch, os, signal, sys
from contextlib import contextmanager
import torch
torch.set_num_threads(1)
from workbench import atomic
pattern, nth, action, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
real, seen = atomic.atomic_path, []

@contextmanager
def stopping(path):
    with real(path) as tmp:
        yield tmp
        if fnmatch.fnmatch(str(path), pattern):
            seen.append(path)
            if len(seen) == nth and action == "kill":
                with open(tmp, "r+b") as f:
                    f.truncate(f.seek(0, 2) // 2)
                os.kill(os.getpid(), signal.SIGKILL)
            if len(seen) == nth:
                print("paused", flush=True)
                sys.stdin.read()

atomic.atomic_path = stopping  # the modules the command imports from now on take this one
from workbench.cli import main
sys.exit(main(argv))
"""


def stopped(argv, pattern: str, nth: int, action: str, cwd: Path) -> subprocess.Popen:
    """`workbench argv` in another process, stopped as DRIVER says; returns once it is killed or paused."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen(
        [sys.executable, "-c", DRIVER, pattern, str(nth), action, *argv],
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if action == "kill":
        p.wait()
        assert p.returncode == -signal.SIGKILL, p.stderr.read()
    else:
        lines = iter(p.stdout.readline, "")  # until it pauses, or ends without pausing
        assert any(line.strip() == "paused" for line in lines), p.stderr.read()
    return p


def listed(ws, capsys) -> list[str]:
    """The lines `workbench ls` prints for the workspace (what passes as a finished artifact)."""
    capsys.readouterr()
    assert main(["ls", "--workspace", str(ws)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    return [] if out == [f"no artifacts recorded in {ws}"] else out


def one_line(argv, capsys) -> str:
    """The one stderr line of a command that must exit with status 2."""
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def _files(folder: Path) -> dict:
    """Every file of an artifact folder, name -> bytes; a manifest by the files it lists (not its creation time), a
    training checkpoint by its contents (torch.save lays out a state loaded and saved again differently)."""
    from workbench import checkpoint

    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and not p.name.startswith("."):
            rel = p.relative_to(folder).as_posix()
            if p.name == MANIFEST:
                out[rel] = {k: v for k, v in json.loads(p.read_text())["files"].items() if "checkpoint" not in k}
            else:
                out[rel] = _flat(checkpoint.read(p)) if p.suffix == ".pt" else p.read_bytes()
    return out


def _flat(x, key=""):
    """A nested state as {path: value}, tensors as (dtype, shape, bytes): comparable with ==."""
    if isinstance(x, dict):
        return {k: v for name, item in x.items() for k, v in _flat(item, f"{key}{name}.").items()}
    if isinstance(x, (list, tuple)):
        return {k: v for i, item in enumerate(x) for k, v in _flat(item, f"{key}{i}.").items()}
    if hasattr(x, "numpy"):
        return {
            key: (
                str(x.dtype),
                tuple(x.shape),
                x.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes(),
            )
        }
    return {key: x}


# ---- kill -9 ----------------------------------------------------------------------------------------------------


def _set_argv(world, *extra) -> list[str]:
    budget = ["--memory-budget-mib", str(world["two_passes_mib"])]
    cache = ["--cache", str(world["cache"]), "--transcoders", "all", *world["train"], *budget]
    return ["sae", "train", *cache, "--out", "set", "--workspace", "ws", *extra]


def test_a_set_killed_mid_checkpoint_in_its_second_pass_resumes_to_the_same_bytes(
    small_world, tmp_path, capsys, monkeypatch
):
    """SIGKILL while the second pass writes its second checkpoint: nothing listed, a plain rerun refused in one
    line, and --resume ends with the files of a run never stopped, byte for byte."""
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    whole.mkdir(), killed.mkdir()
    monkeypatch.chdir(whole)
    assert main(_set_argv(small_world)) == 0
    assert json.loads((whole / "set" / "passes.json").read_text())["passes"] == [[0], [1]]
    stopped(_set_argv(small_world), "*passes/1/checkpoint.pt", 2, "kill", killed)
    monkeypatch.chdir(killed)
    assert list((killed / "set" / "passes" / "1").glob(".checkpoint.pt.*.tmp"))  # it died mid-write
    assert listed("ws", capsys) == [] and not (killed / "set" / MANIFEST).exists()
    assert "already holds a run" in one_line(_set_argv(small_world), capsys)
    assert main(_set_argv(small_world, "--resume")) == 0
    assert _files(killed / "set") == _files(whole / "set")
    assert len(listed("ws", capsys)) == 3  # the set and its two members


PROMPT = "the cat saw the hat and the dog"


def _graph_argv(world, name="g", work="work") -> list[str]:
    model = ["--model", str(world["model"]), "--transcoders", str(world["set"]), "--prompt", PROMPT]
    rows = ["--work-dir", work, "--chunk-mib", "0.002", "--batch-size", "4", "--no-heads"]
    return ["circuit", "graph", *model, *rows, "--name", name, "--workspace", "ws"]


def test_a_graph_build_killed_mid_chunk_resumes_to_the_same_graph(small_world, tmp_path, capsys, monkeypatch):
    """SIGKILL while the build writes its 5th row chunk: no graph listed, and the same command run again resumes
    from the work folder to the graph of a build never stopped, byte for byte."""
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    whole.mkdir(), killed.mkdir()
    monkeypatch.chdir(whole)
    assert main(_graph_argv(small_world)) == 0
    stopped(_graph_argv(small_world), "*work/*.pt", 5, "kill", killed)
    monkeypatch.chdir(killed)
    assert list((killed / "work").glob(".*.tmp")) and len(list((killed / "work").glob("*.pt"))) == 4
    assert listed("ws", capsys) == [] and not (killed / "ws" / "circuits" / "g").exists()
    assert main(_graph_argv(small_world)) == 0
    assert (killed / "ws/circuits/g/graph.json").read_bytes() == (whole / "ws/circuits/g/graph.json").read_bytes()
    assert _files(killed / "ws/circuits/g") == _files(whole / "ws/circuits/g")


def test_a_graph_killed_while_it_records_itself_leaves_nothing_and_its_name_free(
    small_world, tmp_path, capsys, monkeypatch
):
    """SIGKILL while the manifest is written (graph.json complete, in the staging folder): nothing listed, no folder
    under the name, and the rerun makes the graph (workbench.transaction); a clear removes what is left."""
    stopped(_graph_argv(small_world), "*circuits/.g.staging-*/g/artifact.json", 1, "kill", tmp_path)
    monkeypatch.chdir(tmp_path)
    assert list((tmp_path / "ws/circuits").glob(".g.staging-*/g/graph.json")) and listed("ws", capsys) == []
    assert not (tmp_path / "ws/circuits/g").exists()
    assert main(_graph_argv(small_world)) == 0 and len(listed("ws", capsys)) == 1
    assert not list((tmp_path / "ws/circuits").glob(".g.staging-*"))
    (tmp_path / "ws/circuits/.h.staging-1/h").mkdir(parents=True)
    (tmp_path / "ws/circuits/.h.staging-1/h/graph.json").write_text("{}")
    Workspace(tmp_path / "ws").clear()
    assert not (tmp_path / "ws").exists()


# ---- a full disk ------------------------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """mount(name, KiB) -> a folder on its own tmpfs of that size (needs root; skipped where mounting is refused);
    grow(folder) gives it room again."""
    mounted = []

    def mount(name: str, kib: int) -> Path:
        path = tmp_path / name
        path.mkdir()
        try:
            r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(path)], capture_output=True)
        except FileNotFoundError:
            pytest.skip("no mount command: a full disk needs a small tmpfs")
        if r.returncode:
            pytest.skip(f"cannot mount a small tmpfs for a full disk (needs root): {r.stderr.decode().strip()}")
        mounted.append(path)
        return path

    def grow(path: Path) -> None:
        subprocess.run(["mount", "-o", "remount,size=8m", str(path)], check=True)

    mount.grow = grow
    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)])


def _full(line: str, path: Path) -> None:
    assert line.split(": error: ", 1)[1].startswith(f"no space left on the device writing {path}"), line
    assert "rerun" in line


def _no_temporaries(folder: Path) -> None:
    assert not [p for p in folder.rglob("*.tmp")], list(folder.rglob("*"))


@pytest.mark.parametrize("where", ["work_dir", "workspace"])
def test_a_full_disk_during_a_graph_build_is_one_line_and_nothing_listed(
    where, small_world, small_disk, capsys, tmp_path
):
    """The rows' chunk files (torch.save) or the graph's JSON fill the disk: one line naming the file, nothing that
    lists as a graph, and the same command finishes once there is room."""
    disk = small_disk("disk", 24 if where == "work_dir" else 12)
    ws, work = (tmp_path / "ws", disk / "work") if where == "work_dir" else (disk / "ws", tmp_path / "work")
    argv = _graph_argv(small_world, work=str(work))
    argv[argv.index("--workspace") + 1] = str(ws)
    line = one_line(argv, capsys)
    _full(line, work if where == "work_dir" else ws / "circuits" / "g" / "graph.json")
    _no_temporaries(disk)
    assert listed(ws, capsys) == [] and not (ws / "circuits" / "g" / MANIFEST).exists()
    small_disk.grow(disk)
    assert main(argv) == 0 and len(listed(ws, capsys)) == 1


def test_a_full_disk_during_a_set_training_is_one_line_and_nothing_listed(small_world, small_disk, capsys, tmp_path):
    disk = small_disk("disk", 64)
    argv = ["sae", "train", "--cache", str(small_world["cache"]), "--transcoders", "all", *small_world["train"]]
    argv += ["--out", str(disk / "set"), "--workspace", str(tmp_path / "ws")]
    _full(one_line(argv, capsys), disk / "set" / "checkpoint.pt")
    _no_temporaries(disk)
    assert listed(tmp_path / "ws", capsys) == [] and not (disk / "set" / "transcoders.json").exists()
    small_disk.grow(disk)
    assert main([*argv, "--resume"]) == 0 and len(listed(tmp_path / "ws", capsys)) == 3


@pytest.mark.parametrize("kib", [60, 100])  # a chunk of the partial store (numpy); a file of the finished store
def test_a_full_disk_during_a_feature_build_is_one_line_and_nothing_listed(
    kib, small_world, small_disk, capsys, tmp_path
):
    from workbench.features.store import STORE

    disk = small_disk("disk", kib)
    member = next(p for p in sorted(small_world["set"].iterdir()) if (p / "cfg.json").is_file())
    shutil.copytree(member, disk / "sae", ignore=shutil.ignore_patterns(MANIFEST, STORE))
    argv = ["features", "build", str(disk / "sae"), "--cache", str(small_world["cache"]), "--model"]
    argv += [str(small_world["model"]), "--workspace", str(tmp_path / "ws"), "--quiet"]
    _full(one_line(argv, capsys), disk / "sae" / STORE)
    _no_temporaries(disk)
    assert listed(tmp_path / "ws", capsys) == [] and not (disk / "sae" / STORE / MANIFEST).exists()
    small_disk.grow(disk)
    assert main(argv) == 0 and len(listed(tmp_path / "ws", capsys)) == 1
