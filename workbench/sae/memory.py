"""What a training run holds in memory, estimated before it starts (so a transcoder set can split into passes):
what it allocates beyond what the process already holds (Python, torch, the imported libraries, which the free
memory a default budget is taken from excludes too).

An SAE's *state* lives for the whole run: its parameters and buffers (counted exactly, by building it on the
meta device), their gradients, Adam's two moments and step counters, and the trainer's dead/dense counters.
Its *step* is the working set of one training step: the scaled and centred inputs, target and reconstruction,
the encoder's pre-activations (CPU: one chunk of ENCODE_ROWS rows; GPU, and BatchTopK's first step, which ranks
the whole batch: every row), the selected (token, latent) pairs and their gradients, AuxK's dead columns, and
the decoder-gradient projection's n x d_out temporary. The trainer steps its SAEs one after another, so a run
holds every state but one step at a time; between steps, a checkpoint serialises every state (less the
gradients) in memory before writing it. The initialisation (its float64 copies and, for a transcoder, the
decoder fit's target row per selected pair) counts as a step when it is the larger. The cache adds its
*buffers*: the window of rows it reads at once, two hooks' parts of it, the batches in flight in store and
float32 form, the initialisation batches, and the buffer each shard file's checksum is checked through when
the reader first opens it.

tests/sae/test_memory.py holds these against what a real step and a real set run allocate (the torch
profiler's peak for torch, tracemalloc's for numpy and Python), so the estimate cannot drift from the code.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from workbench.sae.config import TOPK_FAMILY, SAEConfig

MIB = 1 << 20
AVAILABLE_FRACTION = 0.5  # the default budget: half the free memory (the rest: page cache, the OS, other jobs)
F32, I64 = 4, 8
PAIR_BYTES = 9 * I64  # per selected pair: rows, idx, pre, values, grads, sort keys/order, offsets, candidates


@dataclass(frozen=True)
class Footprint:
    """Bytes an SAE holds: `state` for the whole run, `step` while it steps, and `saved`, its part of a checkpoint
    (serialised in memory before it is written, between steps)."""

    state: int
    step: int
    saved: int

    @property
    def total(self) -> int:
        return self.state + self.step


def sae_footprint(
    cfg: SAEConfig, rows: int, init_rows: int | None = None, device: str = "cpu", autocast: bool = True
) -> Footprint:
    """A resolved config's state and step working set at `rows` rows a step (this process's share of a batch);
    `step` also covers the initialisation from `init_rows` rows (default: `rows`), whichever is larger."""
    from workbench.sae.architectures import build
    from workbench.sae.base import ENCODE_ROWS

    with torch.device("meta"):
        sae = build(cfg)
    held = sum(t.numel() * t.element_size() for t in [*sae.parameters(), *sae.buffers()])
    trainable = [p for p in sae.parameters() if p.requires_grad]
    grads = sum(p.numel() * p.element_size() for p in trainable)
    saved = held + 2 * grads + F32 * len(trainable) + 2 * I64 * cfg.n_units  # + 2 moments, steps, counters
    state = saved + grads
    n, d_in, d_out = cfg.n_latents, cfg.d_in, cfg.out_width
    gpu = device != "cpu"
    # BatchTopK and Matryoshka rank the whole batch when theta cannot yet pick enough candidates (the first step)
    dense_rows = rows if gpu or cfg.architecture in ("batchtopk", "matryoshka") else min(rows, ENCODE_ROWS)
    chunk = 3 * dense_rows * n * F32 // 2  # the pre-activations, and AuxK's dead columns / top-k candidates of them
    pairs = rows * (_active(cfg) + (cfg.aux_k or 0)) * PAIR_BYTES
    dense = rows * n * F32 if cfg.kernel == "dense" else 0  # h with autograd (its gradient reuses the chunk's room)
    groups = len(cfg.prefixes or ()) if cfg.architecture == "matryoshka" else 0
    per_row = (4 * d_in + 10 * d_out + 2 * groups * d_out + 2 * cfg.scaffold_rank) * F32
    step = chunk + pairs + dense + rows * per_row + 2 * n * d_out * F32  # + the projection's g*w and a norm
    if gpu and autocast:
        step += held // 2  # bf16 copies of the weights autocast makes each step
    return Footprint(state, max(step, _init_bytes(cfg, init_rows or rows)), saved)


def _init_bytes(cfg: SAEConfig, rows: int) -> int:
    """`init_from_batch`: float64 copies for the geometric medians, and a transcoder's decoder fit (the target row
    of every selected pair, times its code)."""
    fit = 2 * _active(cfg, init=True) * cfg.out_width * F32 if cfg.transcoder else 0
    return rows * (4 * (cfg.d_in + cfg.out_width) * I64 + fit) + 2 * cfg.n_latents * cfg.out_width * F32


def _active(cfg: SAEConfig, init: bool = False) -> int:
    """Latents selected per token: k, the blocks' latents, or (thresholded blocks and JumpReLU in training, whose
    L0 drifts towards target_l0; ReLU supports) an upper estimate."""
    if cfg.architecture in TOPK_FAMILY:
        return cfg.k
    if cfg.architecture in ("gated", "standard"):
        # every positive pre-activation: about half the latents at the start (n/2 measured 5% under the peak)
        return 3 * cfg.n_latents // 4
    if cfg.architecture == "jumprelu":  # theta starts at target_l0 (else k) a token; the controller holds it near
        return 2 * int(cfg.target_l0 or cfg.k)
    blocks = cfg.n_active_blocks * cfg.block_size
    return blocks if init else max(blocks, int(cfg.target_l0 or 0) * 2)


def buffer_bytes(widths: list[int], window_rows: int, rows: int, init_batches: int, itemsize: int) -> int:
    """The cache reader's buffers for a stream of hooks of these widths: the window (and, when several hooks are
    read, two hooks' parts of it: the next is read before the last is let go), the batches in flight (the next
    one in its stored dtype and float32 while the last is still held), the initialisation batches, and the buffer
    that checks each shard file's checksum when the reader first opens it."""
    width = sum(widths)
    part = 2 * max(widths) if len(widths) > 1 else 0
    from workbench.cache.format import CHECKSUM_CHUNK

    in_flight = rows * width * (itemsize + 2 * F32)
    window = window_rows * (width + part) * itemsize
    return window + in_flight + init_batches * rows * width * F32 + CHECKSUM_CHUNK


def run_bytes(footprints: list[Footprint], buffers: int) -> int:
    """One pass: every SAE's state, the cache's buffers, and the larger of the largest step (they step one at a
    time) and the serialised checkpoint of them all."""
    transient = max(max((f.step for f in footprints), default=0), sum(f.saved for f in footprints))
    return sum(f.state for f in footprints) + transient + buffers


def available_bytes(device: str = "cpu") -> int:
    """Free memory where the SAEs train: MemAvailable of /proc/meminfo (the CPU), or the GPU's free memory."""
    if device != "cpu" and torch.cuda.is_available():
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def default_budget_mib(device: str = "cpu", local_processes: int = 1) -> float:
    """AVAILABLE_FRACTION of the free memory, shared by the processes of this machine (CPU ranks under torchrun)."""
    share = 1 if device != "cpu" else max(1, local_processes)
    return round(AVAILABLE_FRACTION * available_bytes(device) / share / MIB, 1)


def mib(n: int) -> float:
    return round(n / MIB, 2)
