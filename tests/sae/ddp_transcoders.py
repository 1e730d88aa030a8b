"""Run under torchrun by tests/sae/test_transcoders.py (not a test module itself):

    torchrun --standalone --nproc_per_node 2 tests/sae/ddp_transcoders.py CACHE OUT

trains a transcoder set from a cache into OUT/set, and one skip transcoder into OUT/pair on batches whose
global rows do not depend on the world size, so the test can train the same one in one process and compare.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

from workbench.sae.config import SAEConfig, TrainConfig
from workbench.sae.trainer import fit
from workbench.sae.transcoders import train_set

D_IN, D_OUT, BATCH, STEPS = 16, 12, 256, 12


def global_batches(start: int, rank: int, world: int):
    """This rank's share of each global batch of [x | y] rows (y a fixed nonlinear function of x, an MLP's shape):
    global batch i is the same rows for every world size, rank r gets its r-th slice."""
    w = torch.randn(D_IN, D_OUT, generator=torch.Generator().manual_seed(5))
    per = BATCH // world
    i = start
    while True:
        x = torch.randn(BATCH, D_IN, generator=torch.Generator().manual_seed(i)) * 2 + 0.5
        yield torch.cat([x, torch.relu(x @ w) - 1.0], 1)[rank * per : (rank + 1) * per]
        i += 1


def pair_config() -> SAEConfig:
    """No latent counts as dead within the run, so AuxK (normalised per rank's batch) stays off."""
    cfg = SAEConfig("topk", k=4, n_latents=64, skip=True, transcoder=True, dead_tokens=10**9, name="pair")
    return cfg.resolve(D_IN, None, D_OUT)


def train_config(**kw) -> TrainConfig:
    base = {"n_tokens": BATCH * STEPS, "batch_size": BATCH, "lr": 3e-3, "warmup_steps": 3, "log_every": 4}
    return TrainConfig(**{**base, "checkpoint_every": 5, "progress": False, "device": "cpu", **kw})


def main() -> None:
    cache, out = sys.argv[1:3]
    set_cfgs = [SAEConfig("topk", k=8, expansion=4), SAEConfig("batchtopk", k=8, expansion=4, skip=True)]
    train_set(cache, "0,1", set_cfgs, train_config(n_tokens=512 * 8, batch_size=512), f"{out}/set")
    fit([pair_config()], train_config(), global_batches, None, f"{out}/pair", metadata={})
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
