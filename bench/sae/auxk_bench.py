"""AuxK's cost and its effect: today's AuxK (every row, aux_k = d_in // 2) against cheaper variants.

Part 1 (cost): the Top-k training step at d_in 768 (n 12,288, k 32, batch 4,096, the GPT-2-small width of
bench/sae/sae_bench.py's d 768 cases) on Gaussian rows with a fixed dead mask, in CPU seconds of one thread
(time.process_time): each round times the dense encoder matmul into a preallocated output, the step without
AuxK and the step under each variant, in a rotated order; the figure is the median over rounds of
step / matmul of the same round (neighbours under the same load of a shared machine).
Part 2 (effect): each variant trains a Top-k SAE on the embedded model `tiny` (blocks.2.hook_resid_post, d 128,
n 4,096, dead after 20 steps: latents die there) for 600k tokens (batch 1,024, lr 1e-3, 50 warm-up steps: the schedule of
bench/results/new_trainers.md) on the same shuffled batches; held-out FVU on 35k tokens and the dead-latent
fraction at the end.

    OMP_NUM_THREADS=1 python bench/sae/auxk_bench.py [--rounds 5] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # sae_bench, beside it
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # harness
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "peers"))
import common  # noqa: E402
import harness  # noqa: E402
from sae_bench import tiny_acts  # noqa: E402

from workbench.sae.architectures import build  # noqa: E402
from workbench.sae.config import SAEConfig, TrainConfig  # noqa: E402
from workbench.sae.trainer import Trainer  # noqa: E402

OUT = harness.BENCH / "results" / "auxk.md"
# (label, SAEConfig overrides); None: AuxK off
VARIANTS = [
    ("no AuxK", None),
    ("AuxK today (aux_rows 1, aux_k d_in // 2)", {}),
    ("aux_rows 0.25", {"aux_rows": 0.25}),
    ("aux_rows 0.125", {"aux_rows": 0.125}),
    ("aux_rows 0.0625", {"aux_rows": 0.0625}),
    ("aux_k d_in // 8", {"aux_k_div": 8}),
]
D, N, K, B = 768, 12288, 32, 4096


def _sae_cfg(variant: dict | None, d: int, **kw) -> dict:
    v = dict(variant or {})
    if "aux_k_div" in v:
        v["aux_k"] = d // v.pop("aux_k_div")
    return {**kw, **v, **({"aux_alpha": 0.0} if variant is None else {})}


def _cpu(fn) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def time_steps(rounds: int, dead_frac: float) -> dict[str, float]:
    """Median over rounds of (CPU time of one training step) / (CPU time of the dense matmul), per variant."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(B, D, generator=gen) + 0.5 * torch.randn(D, generator=gen)
    dead = torch.rand(N, generator=gen) < dead_frac
    saes = {}
    for label, variant in VARIANTS:
        cfg = SAEConfig(**_sae_cfg(variant, D, k=K, n_latents=N, seed=0)).resolve(D, 10**7)
        sae = build(cfg)
        sae.init_from_batch(x)
        saes[label] = (sae, torch.optim.Adam(sae.parameters(), lr=1e-5))
    buf = torch.zeros(B, N)
    w = next(iter(saes.values()))[0].W_enc.detach()

    def step(sae, opt):
        opt.zero_grad(set_to_none=True)
        sae(x, dead)["loss"].backward()
        sae.project_decoder_grad()
        opt.step()
        sae.normalise_decoder()

    ratios: dict[str, list[float]] = {label: [] for label in saes}
    mm_times, steps = [], {label: [] for label in saes}
    labels = list(saes)
    step(*saes[labels[0]])  # warm-up: first-touch pages, thread pools
    for r in range(rounds + 1):
        order = labels[r % len(labels) :] + labels[: r % len(labels)]
        for label in order:
            mm = _cpu(lambda: torch.mm(x, w.T, out=buf))
            s = _cpu(lambda label=label: step(*saes[label]))
            if r:  # round 0 warms every variant up
                ratios[label].append(s / mm)
                steps[label].append(s)
                mm_times.append(mm)
        print(f"  round {r}: " + ", ".join(f"{lb} {steps[lb][-1] if r else 0:.2f}s" for lb in labels), flush=True)
    out = {label: statistics.median(v) for label, v in ratios.items()}
    out["_step_s"] = {label: statistics.median(v) for label, v in steps.items()}
    out["_matmul_s"] = statistics.median(mm_times)
    return out


def train_tiny(variant: dict | None, data: dict, seed: int, tokens: int, expansion: int, dead_tokens: int) -> dict:
    """A Top-k SAE on tiny under the new_trainers.md schedule; held-out FVU, dead fraction, AuxK steps."""
    train = np.load(data["train"])
    heldout = torch.from_numpy(np.load(data["heldout"]))
    d = train.shape[1]
    batch = 1024
    n_steps = tokens // batch
    cfg = SAEConfig(**_sae_cfg(variant, d, seed=seed, expansion=expansion, dead_tokens=dead_tokens)).resolve(d, tokens)
    tcfg = TrainConfig(
        n_tokens=tokens, batch_size=batch, lr=1e-3, warmup_steps=50, checkpoint_every=0, device="cpu", progress=False
    )
    trainer = Trainer([cfg], tcfg, "cpu")
    sae = trainer.saes[0]
    order = np.random.default_rng(seed).permutation(train.shape[0])
    auxk_steps, t0 = 0, time.process_time()
    for i in range(n_steps):
        x = torch.from_numpy(train[order[i * batch : (i + 1) * batch]])
        if i == 0:
            trainer.initialise(x)
        auxk_steps += bool((trainer.since_fired[0] >= cfg.dead_tokens).any())
        trainer.train_step(x)
    n_dead = int((trainer.since_fired[0] >= cfg.dead_tokens).sum())
    return {
        "fvu": common.fvu(sae.reconstruct, heldout),
        "dead_frac": n_dead / cfg.n_latents,
        "auxk_steps": auxk_steps,
        "n_steps": n_steps,
        "cpu_s": time.process_time() - t0,
        "dead_tokens": cfg.dead_tokens,
        "aux_k": cfg.aux_k,
    }


def report(timing: dict, fvus: dict[str, list[dict]], args, commit: str) -> str:
    base = statistics.mean(r["fvu"] for r in fvus["AuxK today (aux_rows 1, aux_k d_in // 2)"])
    first = next(iter(fvus.values()))[0]
    lines = [
        "# AuxK: cost at d 768 and held-out FVU on tiny, today's AuxK vs cheaper variants",
        "",
        f"- Commit: {commit}",
        "",
        f"Measured by `OMP_NUM_THREADS=1 python bench/sae/auxk_bench.py --rounds {args.rounds}"
        f" --seeds {args.seeds} --expansion {args.expansion} --dead-tokens {args.dead_tokens}` (one thread, CPU time), "
        "both parts in one run.",
        "",
        f"- Cost: Top-k training step (forward, backward, Adam, decoder renorm) at d_in {D}, n {N:,}, k {K}, "
        f"batch {B:,}, Gaussian rows, {args.dead_frac:.0%} of latents marked dead (AuxK's sparse kernels: "
        f"more than 4 x aux_k dead), CPU seconds (time.process_time) of one thread; step / matmul is the median "
        f"over {args.rounds} rounds of the step over the dense encoder matmul {B} x {D} x {N} into a preallocated "
        f"output timed right before it (matmul median {1000 * timing['_matmul_s']:.0f} ms CPU).",
        f"- FVU: Top-k on `tiny` blocks.2.hook_resid_post (d 128, n {128 * args.expansion:,}, k 32, aux_k 64 today), "
        f"{args.tokens:,} tokens, batch 1,024, lr 1e-3, 50 warm-up steps, dead_tokens {first['dead_tokens']:,}; "
        f"held-out FVU on 35k tokens; mean over seeds {list(range(args.seeds))}; dead = latents not fired for "
        "dead_tokens at the end; AuxK steps = steps with a dead latent (where AuxK runs).",
        "",
        "| variant | step / matmul (d 768) | step CPU ms | held-out FVU (tiny) | vs today | dead at end | AuxK steps |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, _ in VARIANTS:
        runs = fvus[label]
        fvu = statistics.mean(r["fvu"] for r in runs)
        dead = statistics.mean(r["dead_frac"] for r in runs)
        steps = statistics.mean(r["auxk_steps"] for r in runs)
        per_seed = "/".join(f"{r['fvu']:.4f}" for r in runs)
        lines.append(
            f"| {label} | {timing[label]:.2f}x | {1000 * timing['_step_s'][label]:.0f} | {fvu:.4f} ({per_seed}) | "
            f"{100 * (fvu / base - 1):+.1f}% | {100 * dead:.1f}% | {steps:.0f}/{runs[0]['n_steps']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--dead-frac", type=float, default=0.5)
    ap.add_argument("--tokens", type=int, default=600_000)
    # latents die at expansion 32 with a 20-step dead window (at the defaults, expansion 8 and a tenth of the
    # run, none dies on tiny in 600k tokens and AuxK never runs)
    ap.add_argument("--expansion", type=int, default=32)
    ap.add_argument("--dead-tokens", type=int, default=20_480)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    data = tiny_acts(665_000, 35_000, ("blocks.2.hook_resid_post",))
    fvus = {}
    for label, variant in VARIANTS:
        fvus[label] = [
            train_tiny(variant, data, s, args.tokens, args.expansion, args.dead_tokens) for s in range(args.seeds)
        ]
        print(f"  {label}: {fvus[label]}", flush=True)
    timing = time_steps(args.rounds, args.dead_frac)
    text = report(timing, fvus, args, commit)
    print(text)
    if not args.no_write:
        OUT.write_text(text)


if __name__ == "__main__":
    main()
