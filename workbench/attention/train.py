"""Sparse-attention post-training: gates + the model's weights under a loss constraint (docs/methods.md §7).

`sparsify(base, out_dir, cfg)` measures the base model's held-out CE, installs gates, then descends
on open_frac + lambda * (CE - CE_target) while lambda ascends (constraint.Multiplier). Every
eval_every steps the deterministic model is evaluated on the held-out sequences; the state with the
fewest open edges among those meeting CE <= CE_target is what gets saved (if none does, the one with
the lowest CE, marked constraint_met = false). The dual step compares the training CE with the base
model's CE on the same batch (SparsifyConfig.dual_ce). Tokens come from the corpus machinery; sequence
indices and the gate noise depend only on (seed, step, rank), so a resume from a checkpoint gives
the identical result; under torchrun each process takes its share of every batch (DDP, gloo on CPU).
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from workbench import checkpoint
from workbench.atomic import atomic_write_text
from workbench.attention import gates as G
from workbench.attention.config import RESUME_FREE, SparsifyConfig
from workbench.attention.constraint import Multiplier
from workbench.attention.report import build_report, heldout, measure, summarise, write_report
from workbench.checkpoint import default_device, dist_info
from workbench.errors import UserError
from workbench.schedule import lr_factor

CHECKPOINT, RUN, CURVES = "checkpoint.pt", "sparsify.json", "curves.jsonl"


class SparsifyError(UserError, ValueError):
    """Bad input for a sparsify run (corpus too short, existing folder, context too long)."""


class ConstraintNotMet(UserError):
    """The run ended without any evaluated state meeting CE <= CE_target; the best one was saved anyway."""


def _batches(corpus, ctx: int, cfg: SparsifyConfig, start_step: int, rank: int, world: int):
    """This process's [batch/world, ctx] token batch for every step from start_step on."""
    B, share = cfg.batch_size, cfg.batch_size // world
    it = corpus.sequences(ctx, start_step * B, split="train")
    step = start_step
    while True:
        seqs = [next(it, None) for _ in range(B)]
        if seqs[-1] is None:
            raise SparsifyError(
                f"the corpus {corpus.spec!r} ran out of training sequences at step {step} "
                f"(batch_size={B}, ctx_len={ctx}); lower steps or add text"
            )
        yield torch.as_tensor(np.stack([s.tokens for s in seqs[rank * share : (rank + 1) * share]]))
        step += 1


def _allreduce_mean(values: list[float], world: int) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64)
    if world > 1:
        dist.all_reduce(t)
        t /= world
    return t.tolist()


def _evaluate(model, tokens, world: int) -> dict:
    sums = measure(model, tokens)
    if world > 1:
        for v in sums.values():
            dist.all_reduce(v)
    return summarise(sums)


def _cpu_state(model) -> dict:
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


class Sparsifier:
    """One gated model's optimiser, schedule and multiplier, and `step(tokens)`: what the loop and bench run."""

    def __init__(
        self,
        model,
        cfg: SparsifyConfig,
        base_copy=None,
        ce_ref_fixed: float | None = None,
        rank: int = 0,
        world: int = 1,
    ):
        """model: gated; base_copy: the frozen base model (cfg.dual_ce "paired") or ce_ref_fixed ("fixed")."""
        self.model, self.cfg, self.base, self.ce_ref_fixed = model, cfg, base_copy, ce_ref_fixed
        self.rank, self.world = rank, world
        gate_params = [p for n, p in model.named_parameters() if ".attn.gate." in n]
        weights = [p for n, p in model.named_parameters() if ".attn.gate." not in n]
        for p in weights:
            p.requires_grad_(cfg.lr > 0)
        groups = [{"params": gate_params, "lr": cfg.gate_lr, "weight_decay": 0.0}]
        if cfg.lr > 0:
            groups.append({"params": weights, "lr": cfg.lr, "weight_decay": cfg.weight_decay})
        self.opt = torch.optim.AdamW(groups)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: lr_factor(s, cfg.warmup_steps))
        self.mult = Multiplier(cfg)
        self.net = model
        self.step_no = 0

    def wrap(self, device: torch.device) -> None:
        """DistributedDataParallel over the processes (after any state is loaded: it broadcasts rank 0's)."""
        if self.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            self.net = DistributedDataParallel(self.model, device_ids=[device.index] if device.type == "cuda" else None)

    def step(self, tokens: torch.Tensor) -> dict:
        """One descent step on the Lagrangian and one dual-ascent step on lambda; returns the curve row."""
        cfg, model, step = self.cfg, self.model, self.step_no
        torch.manual_seed(cfg.seed * 1_000_000_007 + step * 1_000 + self.rank)  # gate noise: f(seed, step, rank)
        tau = cfg.tau(step)
        G.set_temperature(model, tau)
        model.train()
        ce = self.net(tokens, return_type="loss")
        open_frac = G.expected_open_fraction(model)
        if self.base is not None:
            with torch.no_grad():
                ce_ref = float(self.base(tokens, return_type="loss"))
        else:
            ce_ref = self.ce_ref_fixed
        loss = self.mult.lagrangian(open_frac, ce, ce_ref)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip:
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], cfg.grad_clip)
        self.opt.step()
        self.sched.step()
        ce_v, open_v, ref_v = _allreduce_mean([float(ce.detach()), float(open_frac.detach()), ce_ref], self.world)
        if not (math.isfinite(ce_v) and math.isfinite(open_v)):
            raise SparsifyError(
                f"the CE or open fraction became NaN/inf at step {step}; lower lr / gate_lr "
                f"(lr={cfg.lr}, gate_lr={cfg.gate_lr}); the last checkpoint is intact"
            )
        lam = self.mult.update(ce_v, ref_v)
        self.step_no += 1
        return {"step": self.step_no, "ce": ce_v, "ce_base": ref_v, "lambda": lam, "open_fraction": open_v, "tau": tau}

    def state_dict(self) -> dict:
        return {
            "step": self.step_no,
            "model": _cpu_state(self.model),
            "optim": self.opt.state_dict(),
            "sched": self.sched.state_dict(),
            "multiplier": self.mult.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optim"])
        self.sched.load_state_dict(state["sched"])
        self.mult.load_state_dict(state["multiplier"])
        self.step_no = state["step"]


def sparsify(
    base: str,
    out_dir: str | Path,
    cfg: SparsifyConfig | None = None,
    corpus: str = "synthetic",
    resume: bool = False,
    report_queries: int = 100,
) -> dict:
    """Train gates (and weights) on `base` (a model spec) and save a gated workbench model in out_dir.

    Returns the report (also out_dir/attention_report.json); report["constraint_met"] says whether
    the saved model meets CE <= base CE + tolerance on the held-out sequences.
    """
    from workbench.corpus import load_corpus
    from workbench.models import load, model_id, save

    cfg = cfg or SparsifyConfig()
    rank, world = dist_info()
    cfg.validate(world)
    out = Path(out_dir)
    ckpt = out / CHECKPOINT
    if resume and not ckpt.is_file():
        raise checkpoint.CheckpointError(f"--resume given but {ckpt} does not exist; start the run without --resume")
    if not resume and out.exists() and any(out.iterdir()):
        raise SparsifyError(
            f"{out} already exists and is not empty; pass --resume to continue its run or choose another folder"
        )
    device = default_device(cfg.device)
    model, tok = load(base, device=str(device))
    base_id = model_id(model)
    ctx = cfg.ctx_len or model.cfg.n_ctx
    if ctx > model.cfg.n_ctx:
        raise SparsifyError(f"ctx_len={ctx} exceeds the model's n_ctx={model.cfg.n_ctx}")
    G.check_model(model)
    data = load_corpus(corpus, tok, seed=cfg.seed)
    record = {
        "config": {k: v for k, v in cfg.to_dict().items() if k not in RESUME_FREE},
        "base_model": base_id,
        "corpus": data.spec,
        "ctx_len": ctx,
        "world_size": world,
    }
    if resume:
        state = checkpoint.read_matching(ckpt, record)
    eval_tokens, _ = heldout(data, cfg.eval_sequences, ctx, rank, world)
    ce_base = _evaluate(model, eval_tokens, world)["ce"]
    target = ce_base + cfg.tolerance
    base_copy, ce_ref_fixed = None, None
    if cfg.dual_ce == "paired":
        base_copy = copy.deepcopy(model).eval().requires_grad_(False)
    else:
        ce_ref_fixed = _evaluate(model, heldout(data, cfg.eval_sequences, ctx, rank, world, split="train")[0], world)[
            "ce"
        ]
    G.install(model, cfg.gates)
    trainer = Sparsifier(model, cfg, base_copy, ce_ref_fixed, rank, world)
    curves, evals = [], []
    best = fallback = None  # {"step", "ce", "open_fraction", "state"}
    if resume:
        trainer.load_state_dict(state)
        curves, evals, best, fallback = (state[k] for k in ("curves", "evals", "best", "fallback"))
    else:
        out.mkdir(parents=True, exist_ok=True)
    trainer.wrap(device)
    step = trainer.step_no
    bar = None
    if cfg.progress and rank == 0:
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.steps, initial=step, desc="attention sparsify", unit="step")
    batches = _batches(data, ctx, cfg, step, rank, world)
    while step < cfg.steps:
        row = trainer.step(next(batches).to(device))
        step = row["step"]
        curves.append(row)
        if bar is not None:
            bar.set_postfix(
                ce=f"{row['ce']:.4f}",
                ce_target=f"{row['ce_base'] + cfg.tolerance:.4f}",
                lam=f"{row['lambda']:.3g}",
                open=f"{row['open_fraction']:.2%}",
            )
            bar.update(1)
        if step % cfg.eval_every == 0 or step == cfg.steps:
            m = _evaluate(model, eval_tokens, world)
            ev = {"step": step, "ce": m["ce"], "open_fraction": m["open_fraction"], "feasible": m["ce"] <= target}
            evals.append(ev)
            if ev["feasible"] and (best is None or ev["open_fraction"] < best["open_fraction"]):
                best = {**ev, "state": _cpu_state(model)}
            if not ev["feasible"] and best is None and (fallback is None or ev["ce"] < fallback["ce"]):
                fallback = {**ev, "state": _cpu_state(model)}
            if best is not None:
                fallback = None  # only kept while nothing feasible exists
        if (cfg.checkpoint_every and step % cfg.checkpoint_every == 0) or step == cfg.steps:
            if rank == 0:
                checkpoint.write(
                    ckpt,
                    {
                        "record": record,
                        **trainer.state_dict(),
                        "curves": curves,
                        "evals": evals,
                        "best": best,
                        "fallback": fallback,
                    },
                )
            if world > 1:
                dist.barrier()
    if bar is not None:
        bar.close()
    chosen = best or fallback
    model.load_state_dict(chosen["state"])
    model.eval()
    info = {
        "model": out.name,
        "base_model": base_id,
        "base_spec": base,
        "constraint_met": best is not None,
        "ce_base": ce_base,
        "ce_target": target,
        "tolerance": cfg.tolerance,
        "selected_step": chosen["step"],
        "selected_eval": {k: v for k, v in chosen.items() if k != "state"},
        "evals": evals,
        "config": cfg.to_dict(),
        "world_size": world,
        "corpus": data.spec,
        "final_lambda": trainer.mult.value,
    }
    report = None
    if rank == 0:
        save(model, out)
        atomic_write_text(out / RUN, json.dumps(info, indent=1))
        atomic_write_text(out / CURVES, "".join(json.dumps(r) + "\n" for r in curves))
        base_model = base_copy if base_copy is not None else load(base, device=str(device))[0]
        report = build_report(
            base_model, model, data, {**info, "model_id": model_id(model)}, cfg.eval_sequences, ctx, report_queries
        )
        write_report(report, out)
    if world > 1:
        shared = [report]
        dist.broadcast_object_list(shared, src=0)
        report = shared[0]
    return report
