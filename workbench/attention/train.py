"""Sparse-attention post-training: gates + the model's weights under a loss constraint (docs/methods.md §7).

`sparsify(base, out_dir, cfg)` measures the base model's held-out CE, installs gates, then descends
on open_frac + lambda * (CE - CE_target) while lambda ascends (constraint.Multiplier). Every
eval_every steps the deterministic model is evaluated on the held-out sequences; the state with the
fewest open edges among those meeting CE <= CE_target is what gets saved (if none does, the one with
the lowest CE, marked constraint_met = false). The dual step compares the training CE with the base
model's CE on the same batch (SparsifyConfig.dual_ce) or, with dual_stream "heldout", the CE difference
on a third held-out split (neither the selection nor the verdict split) every dual_every steps. Tokens come from the corpus machinery; sequence
indices and the gate noise depend only on (seed, step, rank), so a resume from a checkpoint gives
the identical result at the same CPU thread count (on another count the matmuls sum in another order: two steps
of small on 1 and 2 threads differ by 7e-9, and the trajectories part; each curves row records its threads);
under torchrun each process takes its share of every batch (DDP, gloo on CPU).
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from workbench import checkpoint
from workbench.atomic import atomic_write_text
from workbench.attention import gates as G
from workbench.attention.card import CONTROL_DIR  # control "finetune": the control at the saved state
from workbench.attention.config import RESUME_FREE, SparsifyConfig
from workbench.attention.constraint import Multiplier
from workbench.attention.control import FineTunedControl, cpu_state
from workbench.attention.report import build_report, heldout, measure, stack, summarise, write_report
from workbench.attention.verdict import admitted, dual_sequences, judge_both, paired_difference, verdict_sequences
from workbench.checkpoint import default_device, dist_info
from workbench.errors import BadValueError, DamagedFileError, UserError
from workbench.models import load, model_id
from workbench.models import save as save_model
from workbench.schedule import lr_factor

CHECKPOINT, RUN, CURVES = "checkpoint.pt", "sparsify.json", "curves.jsonl"
CONTROL_REFERENCE = "the control: the base fine-tuned in lockstep on the same batches, no gates, at the saved step"
BOTH_REFERENCE = f"both {CONTROL_REFERENCE} and the frozen base (the constraint holds against each)"


SELECT_RULE = "sparsest evaluated state with CE difference + select_z * standard error <= tolerance"
ADOPT_RULE = (
    "a kept copy of the run's checkpoint.pt, chosen after the run (--adopt; e.g. by bench/attention/sparse_choice.py)"
)


class ConstraintNotMet(UserError):
    """The run ended without any evaluated state meeting CE <= CE_target; the best one was saved anyway."""


def training_batches(corpus, ctx: int, cfg: SparsifyConfig, start_step: int, rank: int, world: int):
    """This process's [batch/world, ctx] token batch for every step from start_step on (bench/attention/finetune_control.py
    fine-tunes its control on the same stream)."""
    B, share = cfg.batch_size, cfg.batch_size // world
    it = corpus.sequences(ctx, start_step * B, split="train")
    step = start_step
    while True:
        seqs = [next(it, None) for _ in range(B)]
        if seqs[-1] is None:
            raise BadValueError(
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
    """Summary figures on this process's share of a split, plus every sequence's CE (gathered, rank order)."""
    sums = measure(model, tokens)
    seq_ce = sums.pop("seq_ce")
    if world > 1:
        for v in sums.values():
            dist.all_reduce(v)
        parts = [torch.empty_like(seq_ce) for _ in range(world)]
        dist.all_gather(parts, seq_ce)
        seq_ce = torch.cat(parts)
    return {**summarise(sums), "seq_ce": seq_ce}


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
        dual: tuple[torch.Tensor, float] | None = None,
        control: FineTunedControl | None = None,
    ):
        """model: gated; base_copy: the frozen base model (cfg.dual_ce "paired") or ce_ref_fixed ("fixed");
        dual (cfg.dual_stream "heldout"): this process's share of the dual stream and the base model's CE on it;
        control (cfg.control "finetune"): the ungated copy fine-tuned in lockstep, the reference instead of the base."""
        self.model, self.cfg, self.base, self.ce_ref_fixed, self.dual = model, cfg, base_copy, ce_ref_fixed, dual
        self.control = control
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
        refs = [self.control.step(tokens)] if self.control is not None else []  # draws no random numbers
        torch.manual_seed(cfg.seed * 1_000_000_007 + step * 1_000 + self.rank)  # gate noise: f(seed, step, rank)
        tau = cfg.tau(step)
        G.set_temperature(model, tau)
        model.train()
        if self.base is not None:  # first: its activations are freed before the gated graph is built (peak RSS)
            with torch.inference_mode():  # draws no random numbers, so the gate noise is unchanged
                refs.append(float(self.base(tokens, return_type="loss")))
        elif self.ce_ref_fixed is not None:
            refs.append(self.ce_ref_fixed)
        ce_ref = min(refs)  # under reference "both": the lower of the control's and the base's
        ce = self.net(tokens, return_type="loss")
        open_frac = G.expected_open_fraction(model)
        loss = self.mult.lagrangian(open_frac, ce, ce_ref)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip:
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], cfg.grad_clip)
        self.opt.step()
        self.sched.step()
        ce_v, open_v, ref_v = _allreduce_mean([float(ce.detach()), float(open_frac.detach()), ce_ref], self.world)
        if not (math.isfinite(ce_v) and math.isfinite(open_v)):
            raise BadValueError(
                f"the CE or open fraction became NaN/inf at step {step}; lower lr / gate_lr "
                f"(lr={cfg.lr}, gate_lr={cfg.gate_lr}); the last checkpoint is intact"
            )
        self.step_no += 1
        row = {"step": self.step_no, "ce": ce_v, "ce_base": ref_v, "open_fraction": open_v, "tau": tau}
        row["threads"] = torch.get_num_threads()  # the sums' order: a resume on another count is not bit-identical
        if self.dual is None:
            self.mult.update(ce_v, ref_v)
        elif self.step_no % cfg.dual_every == 0:
            ce_dual = _evaluate(model, self.dual[0], self.world)["ce"]  # deterministic gates, no_grad
            ref = self.dual[1]
            if self.control is not None:
                ref_control = _evaluate(self.control.reference, self.dual[0], self.world)["ce"]
                ref = min(ref, ref_control) if cfg.reference == "both" else ref_control
            row["dual_difference"] = ce_dual - ref
            self.mult.update(ce_dual, ref, steps=cfg.dual_every)
        return {**row, "lambda": self.mult.value}

    def state_dict(self) -> dict:
        return {
            "step": self.step_no,
            "model": cpu_state(self.model),
            "optim": self.opt.state_dict(),
            "sched": self.sched.state_dict(),
            "multiplier": self.mult.state_dict(),
            **({"control": self.control.state_dict()} if self.control is not None else {}),
        }

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optim"])
        self.sched.load_state_dict(state["sched"])
        self.mult.load_state_dict(state["multiplier"])
        if self.control is not None:
            self.control.load_state_dict(state["control"])
        self.step_no = state["step"]


@dataclass
class Run:
    """One sparsify run's state between its stages (prepare -> loop -> select -> save)."""

    cfg: SparsifyConfig
    out: Path
    base: str
    model: object
    data: object
    ctx: int
    device: torch.device
    record: dict
    eval_tokens: torch.Tensor
    base_eval: dict  # the base model on the selection split (ce, seq_ce)
    base_copy: object
    trainer: Sparsifier
    rank: int
    world: int
    history: dict = field(default_factory=lambda: {"curves": [], "evals": [], "best": None, "fallback": None})


def prepare(base: str, out_dir, cfg: SparsifyConfig, corpus: str, resume: bool, text_field: str = "text") -> Run:
    """Load the base model and corpus, measure the selection split, install gates, restore a checkpoint."""
    from workbench.corpus import load_corpus

    rank, world = dist_info()
    cfg = cfg.resolve(world_size=world)
    out = Path(out_dir)
    ckpt = out / CHECKPOINT
    if resume and not ckpt.is_file():
        raise DamagedFileError(f"--resume given but {ckpt} does not exist; start the run without --resume")
    if not resume and out.exists() and any(out.iterdir()):
        raise BadValueError(
            f"{out} already exists and is not empty; pass --resume to continue its run or choose another folder"
        )
    device = default_device(cfg.device)
    model, tok = load(base, device=str(device))
    ctx = cfg.ctx_len or model.cfg.n_ctx
    if ctx > model.cfg.n_ctx:
        raise BadValueError(f"ctx_len={ctx} exceeds the model's n_ctx={model.cfg.n_ctx}")
    G.check_model(model)
    data = load_corpus(corpus, tok, seed=cfg.seed, text_field=text_field)
    dual, dual_split = _dual_stream(model, data, cfg, ctx, world, rank)
    record = {
        "config": {k: v for k, v in cfg.to_dict().items() if k not in RESUME_FREE},
        "base_model": model_id(model),
        "corpus": data.spec,
        "ctx_len": ctx,
        "world_size": world,
        **({"dual_split": dual_split} if dual_split else {}),
    }
    state = checkpoint.read_matching(ckpt, record) if resume else None
    if state is not None and state["step"] > cfg.steps:
        raise BadValueError(
            f"steps={cfg.steps} is smaller than the {state['step']} steps this run has finished; "
            f"pass steps >= {state['step']} (more steps extend a finished run)"
        )
    eval_tokens, _ = heldout(data, cfg.eval_sequences, ctx, rank, world)
    base_eval = _evaluate(model, eval_tokens, world)
    base_copy, ce_ref_fixed, control = None, None, None
    if cfg.control == "finetune":
        control = FineTunedControl(model, cfg)
    if cfg.dual_ce == "paired" and (control is None or cfg.reference == "both"):
        base_copy = copy.deepcopy(model).eval().requires_grad_(False)
    else:
        train_tokens = heldout(data, cfg.eval_sequences, ctx, rank, world, split="train")[0]
        ce_ref_fixed = _evaluate(model, train_tokens, world)["ce"]
    G.install(model, cfg.gates)
    trainer = Sparsifier(model, cfg, base_copy, ce_ref_fixed, rank, world, dual, control)
    run = Run(cfg, out, base, model, data, ctx, device, record, eval_tokens, base_eval, base_copy, trainer, rank, world)
    if state is not None:
        trainer.load_state_dict(state)
        run.history = {k: state[k] for k in ("curves", "evals", "best", "fallback")}
    else:
        out.mkdir(parents=True, exist_ok=True)
    trainer.wrap(device)
    return run


def _dual_stream(model, data, cfg: SparsifyConfig, ctx: int, world: int, rank: int):
    """dual_stream "heldout": this process's share of the dual split, the base model's CE on it, and its range."""
    if cfg.dual_stream != "heldout":
        return None, None
    seqs, first = dual_sequences(data, cfg, ctx)
    tokens = torch.as_tensor(np.stack([s.tokens for s in seqs[rank::world]]))
    split = {"split": "heldout", "sequences": [first, first + len(seqs)]}
    return (tokens, _evaluate(model, tokens, world)["ce"]), split


def _evaluate_state(run: Run, step: int) -> None:
    """Evaluate the deterministic model on the selection split against its reference (the base, or the fine-tuned
    control at this step); keep it if it is the sparsest feasible one."""
    cfg, h, control = run.cfg, run.history, run.trainer.control
    m = _evaluate(run.model, run.eval_tokens, run.world)
    ref = run.base_eval if control is None else _evaluate(control.reference, run.eval_tokens, run.world)
    ev = {"step": step, "ce": m["ce"], "open_fraction": m["open_fraction"]}
    ev.update(mean_open_keys_per_query=m["mean_open_keys_per_query"])
    ev["difference"] = paired_difference(m["seq_ce"], ref["seq_ce"])
    if control is not None:
        ev["ce_control"] = ref["ce"]
        if cfg.reference == "both":
            ev["difference_base"] = paired_difference(m["seq_ce"], run.base_eval["seq_ce"])
    ev["feasible"] = ok = admitted(ev, cfg.tolerance, cfg.select_z)
    h["evals"].append(ev)
    kept = {"state": cpu_state(run.model), **({"control_state": control.state()} if control is not None else {})}
    if ok and (h["best"] is None or ev["open_fraction"] < h["best"]["open_fraction"]):
        h["best"] = {**ev, **kept}
    if not ok and h["best"] is None and (h["fallback"] is None or ev["ce"] < h["fallback"]["ce"]):
        h["fallback"] = {**ev, **kept}
    if h["best"] is not None:
        h["fallback"] = None  # only kept while nothing feasible exists


def loop(run: Run) -> None:
    """Train to cfg.steps, evaluating every eval_every steps and checkpointing every checkpoint_every."""
    cfg, step = run.cfg, run.trainer.step_no
    bar = None
    if cfg.progress and run.rank == 0:
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.steps, initial=step, desc="attention train", unit="step")
    batches = training_batches(run.data, run.ctx, cfg, step, run.rank, run.world)
    while step < cfg.steps:
        row = run.trainer.step(next(batches).to(run.device))
        step = row["step"]
        run.history["curves"].append(row)
        if bar is not None:
            bar.set_postfix(
                ce=f"{row['ce']:.4f}",
                ce_target=f"{row['ce_base'] + cfg.tolerance:.4f}",
                lam=f"{row['lambda']:.3g}",
                open=f"{row['open_fraction']:.2%}",
            )
            bar.update(1)
        if step % cfg.eval_every == 0 or step == cfg.steps:
            _evaluate_state(run, step)
        if (cfg.checkpoint_every and step % cfg.checkpoint_every == 0) or step == cfg.steps:
            if run.rank == 0:
                checkpoint.write(
                    run.out / CHECKPOINT, {"record": run.record, **run.trainer.state_dict(), **run.history}
                )
            if run.world > 1:
                dist.barrier()
    if bar is not None:
        bar.close()


def select(run: Run) -> dict:
    """Load the kept state (the sparsest feasible one, else the lowest-CE one) into the model; its eval row."""
    chosen = run.history["best"] or run.history["fallback"]
    run.model.load_state_dict(chosen["state"])
    run.model.eval()
    if run.trainer.control is not None:
        run.trainer.control.adopt(chosen["control_state"])
    return {k: v for k, v in chosen.items() if k not in ("state", "control_state")}


def adopt_kept(run: Run, kept: str | Path) -> dict:
    """Load a kept copy of this run's checkpoint.pt as the state to save instead of select's choice: one chosen
    after the run by a rule the trainer does not apply (the accuracy guard on the selection queries too). Its
    evaluation row, marked with the file it came from; a copy from another run or an unevaluated step is refused."""
    state = checkpoint.read_matching(Path(kept), run.record)
    evaluated = [e["step"] for e in run.history["evals"]]
    if state["step"] not in evaluated:
        raise BadValueError(
            f"{kept} holds step {state['step']}, which this run did not evaluate; adopt one of the evaluated "
            f"steps: {', '.join(map(str, evaluated))}"
        )
    run.model.load_state_dict(state["model"])
    run.model.eval()
    if run.trainer.control is not None:
        run.trainer.control.load_state_dict(state["control"])
    row = run.history["evals"][evaluated.index(state["step"])]
    return {**row, "adopted_from": Path(kept).name}


def save(run: Run, chosen: dict, report_queries: int) -> dict | None:
    """Write the model, its run record and curves, and the report with the verdict on the fresh split (rank 0)."""
    cfg = run.cfg
    info = {
        "model": run.out.name,
        "base_model": run.record["base_model"],
        "base_spec": run.base,
        "selection_feasible": run.history["best"] is not None,
        "ce_base": run.base_eval["ce"],
        "ce_target": run.base_eval["ce"] + cfg.tolerance,
        "tolerance": cfg.tolerance,
        "selected_step": chosen["step"],
        "selected_eval": chosen,
        "selection": {
            "split": "heldout",
            "sequences": [0, cfg.eval_sequences],
            "rule": ADOPT_RULE if "adopted_from" in chosen else SELECT_RULE,
        },
        "evals": run.history["evals"],
        **({"dual_split": run.record["dual_split"]} if "dual_split" in run.record else {}),
        "config": cfg.to_dict(),
        "world_size": run.world,
        "corpus": run.data.spec,
        "final_lambda": run.trainer.mult.value,
        "control": cfg.control,
        "reference": _reference_name(run),
    }
    if run.rank != 0:
        return None
    save_model(run.model, run.out)
    reference = _reference(run, info)
    report = build_report(
        reference, run.model, run.data, {**info, "model_id": model_id(run.model)}, cfg, run.ctx, report_queries
    )
    if run.trainer.control is not None and cfg.reference == "both":
        report["verdict"] = judge_both(report["verdict"], info["against_base"]["sparse - base"], cfg.tolerance)
        report["constraint_met"] = report["verdict"]["constraint_met"]
    atomic_write_text(run.out / RUN, json.dumps({**info, "verdict": report["verdict"]}, indent=1))
    atomic_write_text(run.out / CURVES, "".join(json.dumps(r) + "\n" for r in run.history["curves"]))
    write_report(report, run.out)
    return report


def _reference_name(run: Run) -> str:
    if run.trainer.control is None:
        return "the base model"
    return BOTH_REFERENCE if run.cfg.reference == "both" else CONTROL_REFERENCE


def _reference(run: Run, info: dict):
    """The model the verdict compares with: the frozen base, or (control "finetune") the control at the saved state,
    written beside the sparse model as control/ (for circuit comparisons), with the verdict against the base too."""
    base = run.base_copy if run.base_copy is not None else load(run.base, device=str(run.device))[0]
    if run.trainer.control is None:
        return base
    control = run.trainer.control.reference.eval()
    save_model(control, run.out / CONTROL_DIR)
    info["control_model"] = model_id(control)
    seqs, start = verdict_sequences(
        run.data, run.cfg.eval_sequences, run.cfg.verdict_sequences, run.ctx, run.cfg.verdict_start
    )
    tokens = stack(seqs)[0]
    vs = {
        name: measure(m, tokens)["seq_ce"] for name, m in (("sparse", run.model), ("base", base), ("control", control))
    }
    info["against_base"] = {
        "split": {"split": "heldout", "sequences": [start, start + len(seqs)]},
        "sparse - base": paired_difference(vs["sparse"], vs["base"]),
        "control - base": paired_difference(vs["control"], vs["base"]),
    }
    return control


def sparsify(
    base: str,
    out_dir: str | Path,
    cfg: SparsifyConfig | None = None,
    corpus: str = "synthetic",
    resume: bool = False,
    report_queries: int = 200,
    text_field: str = "text",
    adopt: str | Path | None = None,
) -> dict:
    """Train gates (and weights) on `base` (a model spec) and save a gated workbench model in out_dir.

    Returns the report (also out_dir/attention_report.json); report["constraint_met"] says whether the
    saved model meets the constraint on the fresh verdict split (upper 95% bound within the tolerance).
    Resuming a finished run with more steps extends it; with the same steps it redoes select and save.
    adopt: a kept copy of the run's checkpoint.pt whose state is saved instead of the selection rule's.
    """
    run = prepare(base, out_dir, cfg or SparsifyConfig(), corpus, resume, text_field)
    loop(run)
    report = save(run, adopt_kept(run, adopt) if adopt else select(run), report_queries)
    if run.world > 1:
        shared = [report]
        dist.broadcast_object_list(shared, src=0)
        report = shared[0]
    return report
