"""Checkpoint files that are either complete and verified or rejected with a clear error.

Shared by the training loops (SAEs, sparse attention), with the process-group and device helpers.
torch.load does not notice flipped bytes inside a tensor, so the file carries a SHA-256 of its
payload in a one-line header; writes go to a temp file in the same folder and then os.replace.
"""

from __future__ import annotations

import hashlib
import io
import os
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch
import torch.distributed as dist

from workbench.atomic import atomic_path
from workbench.errors import DamagedFileError
from workbench.lock import output_lock
from workbench.readback import reading

MAGIC = b"WORKBENCH-SAE-CHECKPOINT-1 "  # the SAE trainer wrote it first; kept so old checkpoints still read


def write(path: Path | str, state: dict) -> None:
    path = Path(path)
    buf = io.BytesIO()
    torch.save(state, buf)
    with buf.getbuffer() as payload, atomic_path(path) as tmp, open(tmp, "wb") as f:  # no second copy of it
        f.write(MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n")
        f.write(payload)


RESTORE = "delete it to start over or restore a good copy"


def read(path: Path | str, what: str = "checkpoint", way_out: str = RESTORE) -> dict:
    """The state `write` saved, its checksum checked; `what` names the file's kind in the errors."""
    path = Path(path)
    if not path.is_file():
        raise DamagedFileError(f"no {what} at {path}")
    data = path.read_bytes()
    head, _, payload = data.partition(b"\n")
    if not head.startswith(MAGIC):
        raise DamagedFileError(f"{path} is not a workbench {what} (bad header)")
    if hashlib.sha256(payload).hexdigest().encode() != head[len(MAGIC) :]:
        raise DamagedFileError(f"{path} ({what}) is corrupted: its checksum does not match its contents; {way_out}")
    with reading(path, what, way_out):
        return torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)


def read_matching(path: Path, record: dict) -> dict:
    """The checkpoint at path, or DamagedFileError listing how the run that wrote it differs from `record`
    (resuming it under another configuration would silently mix two runs)."""
    state = read(path)
    with reading(path, "checkpoint", RESTORE):
        diff = config_diff(state["record"], record)
    if diff:
        raise DamagedFileError(
            f"{path} was written by a different configuration; refusing to resume:\n  " + "\n  ".join(diff)
        )
    return state


def config_diff(saved, current, prefix: str = "") -> list[str]:
    """Human-readable differences between two nested configs (dicts and lists)."""
    if isinstance(saved, dict) and isinstance(current, dict):
        keys = sorted(set(saved) | set(current))
        return [
            d for k in keys for d in config_diff(saved.get(k, "<absent>"), current.get(k, "<absent>"), f"{prefix}{k}.")
        ]
    if isinstance(saved, list) and isinstance(current, list) and len(saved) == len(current):
        return [d for i, (a, b) in enumerate(zip(saved, current)) for d in config_diff(a, b, f"{prefix}{i}.")]
    return [] if saved == current else [f"{prefix.rstrip('.')}: checkpoint {saved!r} != now {current!r}"]


def dist_info() -> tuple[int, int]:
    """(rank, world size); starts the process group when torchrun set WORLD_SIZE > 1."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def rank_zero_value(value):
    """`value` as rank 0 has it, on every rank (a run folder's timestamped name must be one folder for all)."""
    _, world = dist_info()
    if world == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


@contextmanager
def rank_zero_writes(target: str | Path, command: str):
    """One writer per output under torchrun too: rank 0 holds `target`'s output lock and is the one that writes
    (yields True there); the other ranks start once it holds the lock and leave once it is done writing."""
    rank, world = dist_info()
    with output_lock(target, command) if rank == 0 else nullcontext():
        if world > 1:
            dist.barrier()
        yield rank == 0
    if world > 1:
        dist.barrier()


def default_device(device: str | None = None) -> torch.device:
    """The requested device, else this process's GPU under torchrun (LOCAL_RANK), else the CPU."""
    if device:
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")
