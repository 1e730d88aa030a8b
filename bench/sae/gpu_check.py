"""The workbench's CUDA paths in one short run: what CI (CPU only) never executes.

    python bench/sae/gpu_check.py --out DIR            # on a machine with a GPU (~4 min on an H200)
    python bench/sae/gpu_check.py --device cpu --quick # a smoke run of the same code on the CPU

1. sparse kernels on the device: every architecture's loss and gradients against the dense
   reference in fp32, and under bf16 autocast;
2. Top-k step time (k = 32, 16x expansion, batch 4096) against the one dense encoder matmul,
   fp32 and bf16 autocast, sparse and dense kernels, plus the other architectures;
3. a short real run: harvest the embedded model's residual stream on the device, train Top-k,
   Matryoshka, block Top-k and a scaffold SAE from that cache with autocast, evaluate them;
4. one query circuit found on the device.
Each section records its error instead of stopping the others. Writes gpu.md and gpu.json to --out.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

from workbench.sae.architectures import build
from workbench.sae.config import ARCHITECTURES, SAEConfig, TrainConfig
from workbench.sae.scores import UNDEFINED, shown
from workbench.sae.trainer import Trainer


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device, n: int, warm: int = 3) -> float:
    """Median seconds of fn() over n calls after warm-up."""
    for _ in range(warm):
        fn()
    out = []
    for _ in range(n):
        _sync(device)
        t = time.perf_counter()
        fn()
        _sync(device)
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def kernels(device, quick: bool) -> list[dict]:
    """Sparse vs dense kernels: same init, same batch, dead latents on so AuxK runs."""
    d, n = (64, 512) if quick else (256, 4096)
    x = torch.randn(1024, d, generator=torch.Generator().manual_seed(0)).to(device) * 3 + 1
    rows = []
    for arch in ARCHITECTURES:
        for amp in (False, True):
            saes = []
            for kernel in ("sparse", "dense"):
                cfg = SAEConfig(
                    arch, k=32, n_latents=n, n_active_blocks=8, block_size=4, kernel=kernel, scaffold_rank=4
                ).resolve(d, 10**6)
                sae = build(cfg).to(device)
                sae.init_from_batch(x)
                saes.append(sae)
            dead = torch.zeros(saes[0].cfg.n_units, dtype=torch.bool, device=device)
            dead[::3] = True
            outs = []
            for sae in saes:
                ctx = (
                    torch.autocast(device.type, dtype=torch.bfloat16)
                    if amp
                    else torch.autocast(device.type, enabled=False)
                )
                with ctx:
                    out = sae(x, dead)
                out["loss"].backward()
                outs.append(out)
            grads = [[p.grad.float().flatten() for p in s.parameters() if p.grad is not None] for s in saes]
            cos = min(float(torch.nn.functional.cosine_similarity(a, b, dim=0)) for a, b in zip(*grads) if a.norm() > 0)
            rel = max(float((a - b).norm() / b.norm().clamp_min(1e-12)) for a, b in zip(*grads))
            l0, l1 = float(outs[0]["loss"]), float(outs[1]["loss"])
            rows.append(
                {
                    "arch": arch,
                    "autocast_bf16": amp,
                    "loss_sparse": l0,
                    "loss_dense": l1,
                    "loss_rel_diff": abs(l0 - l1) / abs(l1),
                    "grad_min_cosine": cos,
                    "grad_max_rel_diff": rel,
                }
            )
    return rows


def step_times(device, quick: bool) -> list[dict]:
    shapes = [(64, 1024)] if quick else [(768, 12288), (2048, 32768)]
    B = 512 if quick else 4096
    rows = []
    for d, n in shapes:
        x = torch.randn(8, B, d, device=device)
        variants = [
            ("topk", {}),
            ("topk", {"kernel": "dense"}),
            ("batchtopk", {}),
            ("matryoshka", {}),
            ("block_topk", {"block_size": 4, "n_active_blocks": 8}),
            ("group_lasso", {"block_size": 4}),
            ("block_jumprelu", {"block_size": 4}),
            ("grassmannian", {"block_size": 4, "n_active_blocks": 8}),
            ("topk", {"scaffold_rank": 16}),
        ]
        for amp in (True, False):
            w = torch.randn(n, d, device=device)
            if amp:
                xb, wb = x[0].bfloat16(), w.bfloat16()
                mm = timed(lambda: xb @ wb.T, device, 20)
            else:
                mm = timed(lambda: x[0] @ w.T, device, 20)
            for arch, extra in variants if amp else variants[:2]:  # fp32: Top-k with either kernel
                cfg = SAEConfig(arch, k=32, n_latents=n, **extra).resolve(d, 10**7)
                tr = Trainer(
                    [cfg],
                    TrainConfig(
                        n_tokens=10**7, batch_size=B, warmup_steps=0, progress=False, device=str(device), autocast=amp
                    ),
                    device,
                )
                tr.initialise(x[0])
                i = iter(range(10**6))
                dead_after = tr.saes[0].cfg.dead_tokens
                s = timed(lambda: tr.train_step(x[next(i) % 8]), device, 10 if quick else 20)  # noqa: F821 (tr is bound; deleted later)
                peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else math.nan
                rows.append(
                    {
                        "d_in": d,
                        "n_latents": n,
                        "batch": B,
                        "arch": arch,
                        **extra,
                        "autocast_bf16": amp,
                        "step_ms": s * 1e3,
                        "tokens_per_s": B / s,
                        "encoder_matmul_ms": mm * 1e3,
                        "step_over_matmul": s / mm,
                        "peak_gib": peak,
                        "dead_tokens": dead_after,
                    }
                )
                del tr
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats(device)
    return rows


def training_run(device, quick: bool, work: Path) -> dict:
    from workbench.cache import harvest
    from workbench.corpus import load_corpus
    from workbench.models import load
    from workbench.sae import evaluate, train

    hook = "blocks.2.hook_resid_post"
    model, tok = load("tiny", device=str(device))
    t = time.time()
    n_cache = 60_000 if quick else 500_000
    harvest(
        model,
        load_corpus("synthetic", tok),
        [hook],
        work / "cache",
        n_cache,
        batch_size=256,
        progress=False,
        overwrite=True,
    )
    harvest_s = time.time() - t
    cfgs = [
        SAEConfig("topk", k=16, n_latents=1024),
        SAEConfig("matryoshka", k=16, n_latents=1024),
        SAEConfig("block_topk", n_latents=1020, block_size=3, n_active_blocks=5),
        SAEConfig("topk", k=16, n_latents=1024, scaffold_rank=8),
    ]
    tc = TrainConfig(
        n_tokens=100_000 if quick else 2_000_000,
        batch_size=1024,
        lr=1e-3,
        warmup_steps=50,
        checkpoint_every=200,
        progress=False,
        device=str(device),
        autocast=True,
    )
    t = time.time()
    folders = train(work / "cache", hook, cfgs, tc, work / "saes")
    train_s = time.time() - t
    evals = {}
    for f in folders:
        m = evaluate(f, work / "cache", "tiny", max_tokens=10_000, n_sequences=64, device=str(device))
        r, s = m["reconstruction"], m["splice"]
        evals[f.name] = {
            "fvu": r["fvu"],
            "l0": r["l0"],
            "n_dead": r["n_dead"],
            "n_dense": r["n_dense"],
            **{k: s[k] for k in ("ce_loss_recovered", "ce_loss_recovered" + UNDEFINED) if k in s},
            "ce_no_scaffold": s.get("ce_no_scaffold"),
        }
    return {
        "cache_tokens": n_cache,
        "harvest_s": harvest_s,
        "train_tokens": tc.n_tokens,
        "n_saes": len(cfgs),
        "train_s": train_s,
        "train_tokens_per_s_per_sae": tc.n_tokens * len(cfgs) / train_s,
        "eval": evals,
    }


def circuit(device) -> dict:
    from workbench.circuits.component.api import find_circuit
    from workbench.corpus import tasks
    from workbench.models import load

    model, tok = load("tiny", device=str(device))
    q = tasks.queries("ioi", n=1, seed=3, tokenizer=tok)[0]
    t = time.time()
    c = find_circuit(model, q.prompt, q.answer, q.counterfactual, wrong=q.wrong, budget=0.05)
    return {"prompt": q.prompt, "ndf": c.ndf, "n_edges": len(c.edges), "seconds": time.time() - t}


def report(res: dict) -> str:
    lines = ["# CUDA check", "", f"- Commit: {res['commit']}", f"- {res['env']}", ""]
    if "kernels" in res:
        lines += [
            "## Sparse vs dense kernels on the device",
            "",
            "| architecture | bf16 autocast | loss rel. diff | min grad cosine | max grad rel. diff |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['arch']} | {r['autocast_bf16']} | {r['loss_rel_diff']:.2e} | {r['grad_min_cosine']:.5f} | "
            f"{r['grad_max_rel_diff']:.2e} |"
            for r in res["kernels"]
        ]
    if "steps" in res:
        lines += [
            "",
            "## Step time (k = 32, 16x expansion)",
            "",
            "| d_in x n | batch | architecture | bf16 | step ms | tokens/s | encoder matmul ms | step / matmul | peak GiB |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in res["steps"]:
            extra = {k: v for k, v in r.items() if k in ("kernel", "block_size", "n_active_blocks", "scaffold_rank")}
            name = r["arch"] + (" " + " ".join(f"{k}={v}" for k, v in extra.items()) if extra else "")
            lines.append(
                f"| {r['d_in']} x {r['n_latents']} | {r['batch']} | {name} | {r['autocast_bf16']} | "
                f"{r['step_ms']:.2f} | {r['tokens_per_s']:,.0f} | {r['encoder_matmul_ms']:.3f} | "
                f"{r['step_over_matmul']:.2f} | {r['peak_gib']:.2f} |"
            )
    if "training" in res:
        t = res["training"]
        lines += [
            "",
            "## Harvest + training + evaluation on the device",
            "",
            f"Harvest {t['cache_tokens']:,} tokens: {t['harvest_s']:.1f} s. Train {t['n_saes']} SAEs on "
            f"{t['train_tokens']:,} tokens each (bf16 autocast): {t['train_s']:.1f} s "
            f"({t['train_tokens_per_s_per_sae']:,.0f} tokens/s summed over SAEs).",
            "",
            "| SAE | FVU | L0 | dead | dense | CE recovered | CE without scaffold |",
            "|---|---|---|---|---|---|---|",
        ]
        for k, v in t["eval"].items():
            lines.append(
                f"| {k} | {v['fvu']:.3f} | {v['l0']:.1f} | {v['n_dead']} | {v['n_dense']} | "
                f"{shown(v, 'ce_loss_recovered', '.4f')} | {v['ce_no_scaffold'] if v['ce_no_scaffold'] is None else round(v['ce_no_scaffold'], 3)} |"
            )
    if "circuit" in res:
        c = res["circuit"]
        lines += [
            "",
            "## Query circuit on the device",
            "",
            f"IOI query, budget 5%: NDF {c['ndf']:.3f} with {c['n_edges']} edges in {c['seconds']:.1f} s.",
        ]
    for k, v in res.get("errors", {}).items():
        lines += ["", f"## {k}: FAILED", "", "```", v.strip()[-3000:], "```"]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=Path("bench/work/gpu"))
    p.add_argument("--only", nargs="*", default=["kernels", "steps", "training", "circuit"])
    args = p.parse_args()
    device = torch.device(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    env = f"torch {torch.__version__}"
    if device.type == "cuda":
        env += f", {torch.cuda.get_device_name(device)}, CUDA {torch.version.cuda}"
    res: dict = {"commit": harness.commit(), "env": env, "errors": {}}
    sections = {
        "kernels": lambda: kernels(device, args.quick),
        "steps": lambda: step_times(device, args.quick),
        "training": lambda: training_run(device, args.quick, args.out / "work"),
        "circuit": lambda: circuit(device),
    }
    for name in args.only:
        t = time.time()
        try:
            res[name] = sections[name]()
        except Exception:  # keep going: one failed section must not hide the others
            res["errors"][name] = traceback.format_exc()
        print(f"{name}: {time.time() - t:.1f} s{' FAILED' if name in res['errors'] else ''}", flush=True)
        (args.out / "gpu.json").write_text(json.dumps(res, indent=1, default=str))
        (args.out / "gpu.md").write_text(report(res))
    print(report(res))


if __name__ == "__main__":
    main()
