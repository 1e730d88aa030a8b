"""Configs for sparse-attention post-training (docs/methods.md §7); every open choice is a field saved with the model.

`GateConfig` is what a gated model needs to run (saved in its config.json); `SparsifyConfig` adds
the constrained-loss training choices (saved in the run record and the report).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from workbench.config import Config, check_device
from workbench.errors import ConfigError

ESTIMATORS = ("gumbel_st", "hard_concrete")
# "published": the authors' gate (docs/methods.md §7): logit = score + one scalar bias, no renormalisation;
# "log_prob" / "score": a learned per-head scale and bias on the log-probability / score, renormalised
GATES = ("published", "log_prob", "score")
BIAS_SHARING = ("layer", "model")
INIT_BIAS = {"published": 10.0, "log_prob": 8.0, "score": 8.0}  # open at the start: every edge that matters
EMPTY_ROWS = ("zero", "first")
TAU_SCHEDULES = ("constant", "linear", "exponential")
DUAL_CE = ("paired", "fixed")
DUAL_STREAMS = ("train", "heldout")
# what the CE cost of the gates is judged against (docs/methods.md §7, "The control"): the frozen base while the
# weights fine-tune ("none"), the frozen base with frozen weights ("frozen": only the gates learn), or an ungated
# copy fine-tuned in lockstep on the same batches ("finetune")
CONTROLS = ("none", "frozen", "finetune")
# under control "finetune", what the tolerance holds the sparse model to: the control alone, or both the control and
# the frozen base (the lower of their CEs), so a control that fine-tuning made worse cannot loosen the constraint
REFERENCES = ("control", "both")
DEFAULT_LR = 1e-4  # AdamW on the model's weights when they train (control "none" or "finetune")


POSITIVE = {"min": 0, "open": "min"}  # a float field's bounds (workbench.config): > 0
SHARE = {"min": 0, "max": 1, "open": "max"}  # [0, 1)


@dataclass
class GateConfig(Config):
    """One gate per (layer, head, query i, key j <= i); the `gate` preset says how its logit is made.

    "published" (the default, the authors' public code): logit = score_ij + b, score = q.k/sqrt(d_head)
    (TransformerLens's attention score), b one learned scalar per layer (bias_sharing "layer") or one
    for the whole model ("model"); closed edges are dropped WITHOUT renormalising (pattern = gate *
    dense softmax). "log_prob" / "score": logit = scale_h * x_ij + bias_h with x the dense
    log-probability or the score, and the pattern renormalised over the open keys.
    """

    renamed = {"gate_input": "gate"}  # models saved before the presets: gate_input was the gate

    gate: str = field(
        default="published",
        metadata={
            "help": "gate preset: the authors' gate (published) or a renormalised per-head gate",
            "choices": GATES,
        },
    )
    estimator: str = field(
        default="gumbel_st",
        metadata={  # straight-through Gumbel-sigmoid | hard-concrete
            "help": "training relaxation of the gates",
            "choices": ESTIMATORS,
        },
    )
    bias_sharing: str = field(
        default="layer",
        metadata={"help": "published gate: one bias per layer or one for the whole model", "choices": BIAS_SHARING},
    )
    init_scale: float = 1.0  # log_prob / score gates only (the published gate has no scale)
    init_bias: float | None = None  # None -> INIT_BIAS[gate]; positive, so every gate starts open
    # a row with no open edge: "zero" (the head writes nothing at that query: exact, costs no edge) |
    # "first" (key 0, the BOS, is always open and counted: 1 edge per row, 2/(n_ctx+1) of causal pairs)
    empty_row: str = field(
        default="zero",
        metadata={
            "help": "a row with no open edge: the head writes nothing there (zero) or key 0 stays open (first)",
            "choices": EMPTY_ROWS,
        },
    )
    hard_concrete_limits: tuple[float, float] = (-0.1, 1.1)  # the stretch (gamma, zeta) of Louizos et al.
    score_clamp: float = field(
        default=30.0, metadata=POSITIVE
    )  # training only: exp(score - row max of open scores) capped at e^this

    def check(self) -> None:
        lo, hi = self.hard_concrete_limits
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < 0 and hi > 1):
            raise ConfigError(
                f"hard_concrete_limits={list(self.hard_concrete_limits)} must be (gamma < 0, "
                "zeta > 1), e.g. [-0.1, 1.1]"
            )

    def fill(self) -> dict:
        """The gate preset's initial bias where none is set."""
        return {"init_bias": INIT_BIAS[self.gate]} if self.init_bias is None else {}

    @property
    def renormalise(self) -> bool:
        """Whether the pattern is renormalised over the open keys (not for the published gate)."""
        return self.gate != "published"


@dataclass
class JudgeConfig(Config):
    """How a sparse state is judged beyond the CE verdict (docs/methods.md §7): task accuracy per family against
    the base, and the CE cost on a held-out split that no run touches.

    Accuracy is measured on two disjoint uses of held-out queries: candidates are chosen on the selection
    queries (selection_query_seed) and the guard's verdict is given on the verdict queries (verdict_query_seed,
    the report's accuracy table), so the check is not in-sample. The untouched split lies after the dual
    stream's range (whether or not the run used that stream) and shares no document with the selection,
    verdict or dual splits: no training, selection, verdict or dual step ever reads it.
    """

    accuracy_drop: float = field(
        default=0.02,
        metadata={"help": "accuracy guard: most a family's top-1 accuracy may fall below the base's (0.02 = 2 points)"}
        | SHARE,
    )
    selection_query_seed: int = field(default=1, metadata={"min": 0})  # queries candidates are chosen on
    verdict_query_seed: int = field(default=0, metadata={"min": 0})  # queries the guard's verdict is given on
    untouched_sequences: int = field(
        default=512, metadata={"help": "held-out sequences of the untouched split (0: none)", "min": 0}
    )
    untouched_start: int | None = None  # its first held-out sequence; None: the first one after the dual stream

    def check(self) -> None:
        if self.selection_query_seed == self.verdict_query_seed:
            raise ConfigError(
                f"selection_query_seed={self.selection_query_seed} equals verdict_query_seed: the accuracy verdict "
                "would be in-sample; give the two different seeds"
            )


@dataclass
class SparsifyConfig(Config):
    """Minimise the expected open-edge fraction subject to held-out CE <= base CE + tolerance.

    Lagrangian per step: open_frac + lambda * v, v = CE - CE_ref - tolerance * (1 - dual_margin);
    lambda by dual ascent lambda <- max(0, lambda + multiplier_lr * v) on the batch's v or (ce_ema > 0,
    GECO) its exponential moving average. CE_ref: the base model's CE on the same batch ("paired": one
    extra no-grad forward per step, removes the batch-to-batch noise, which is larger than a 0.01-nat
    tolerance) or its mean over the first eval_sequences training sequences ("fixed"); with dual_stream
    "heldout", v is instead the deterministic model's CE difference on a third held-out split. The held-out
    check (CE <= held-out base CE + tolerance, deterministic gates) decides what is saved.
    """

    gates: GateConfig = field(default_factory=GateConfig)
    tolerance: float = field(
        default=0.01, metadata={"help": "allowed held-out CE above the base model, in nats", **POSITIVE}
    )
    steps: int = field(default=1000, metadata={"help": "optimizer steps", "min": 1})
    batch_size: int = field(default=16, metadata={"help": "sequences per step over all processes", "min": 1})
    ctx_len: int | None = field(default=None, metadata={"min": 2})  # None -> the model's n_ctx
    control: str = field(
        default="none",
        metadata={
            "help": "what the tolerance is judged against: the frozen base (none), the base with the weights frozen "
            "so only the gates learn (frozen), or an ungated copy fine-tuned in lockstep (finetune)",
            "choices": CONTROLS,
        },
    )
    reference: str = field(
        default="both",
        metadata={
            "help": "under --control finetune, what the tolerance is held to: the control alone, or both the control "
            "and the frozen base (the lower CE of the two, in the dual step, the selection and the verdict)",
            "choices": REFERENCES,
        },
    )
    control_average: float = field(
        default=0.0,
        metadata={
            "help": "under --control finetune, the decay of a running average of the control's weights that its "
            "evaluations use (selection, held-out dual, verdict, the saved control/); 0: its weights as they are",
            **SHARE,
        },
    )
    # AdamW on the model's own weights (0 freezes them: only the gates learn); None: 1e-4, or 0 under control "frozen"
    lr: float | None = field(default=None, metadata={"min": 0})
    gate_lr: float = field(default=3e-2, metadata=POSITIVE)  # AdamW on the gates' scale and bias
    weight_decay: float = field(default=0.0, metadata={"min": 0})
    warmup_steps: int = 20
    grad_clip: float = field(default=1.0, metadata={"min": 0})  # max global gradient norm (0 = off)
    lambda_init: float = field(default=1.0, metadata={"min": 0})
    multiplier_lr: float = field(default=1.0, metadata=POSITIVE)
    ce_ema: float = field(
        default=0.9, metadata=SHARE
    )  # 0: dual ascent on each batch's violation; in (0, 1): on an EMA with this decay (GECO)
    dual_ce: str = field(
        default="paired", metadata={"choices": DUAL_CE}
    )  # CE_ref of the dual step: "paired" (base CE of the same batch) | "fixed"
    # the CE difference the dual step sees: each training batch's ("train") or, every dual_every steps, the
    # deterministic model's on a third held-out split disjoint from the selection and verdict splits ("heldout":
    # lambda then follows held-out CE, which the weight updates can trade for sparsity on the training text)
    dual_stream: str = field(
        default="train",
        metadata={
            "help": "CE difference of the dual step: training batches or a held-out stream",
            "choices": DUAL_STREAMS,
        },
    )
    dual_sequences: int = field(
        default=128, metadata={"min": 1}
    )  # dual_stream "heldout": the stream's size (held-out sequences)
    dual_start: int | None = None  # its first held-out sequence; None: right after the verdict split
    dual_every: int = field(
        default=10, metadata={"min": 1}
    )  # dual_stream "heldout": steps between its evaluations (each dual step counts dual_every)
    dual_margin: float = field(
        default=0.2, metadata=SHARE
    )  # share of the tolerance held back in the dual step (sampled vs deterministic gates)
    tau_start: float = field(default=1.0, metadata=POSITIVE)  # relaxation temperature, annealed to tau_end over the run
    # None -> 1.0 for the published gate (its gradient is through sigmoid(g + noise)), else 0.1
    tau_end: float | None = field(default=None, metadata=POSITIVE)
    tau_schedule: str = field(default="exponential", metadata={"choices": TAU_SCHEDULES})
    eval_sequences: int = field(
        default=256, metadata={"min": 1}
    )  # the selection split: held-out sequences [0, n) for CE_base and choosing the saved state
    eval_every: int = field(
        default=100, metadata={"min": 1}
    )  # steps between selection-split evaluations (the sparsest feasible one is kept)
    # a state is feasible on the selection split iff CE difference + select_z * its standard error <= tolerance
    select_z: float = field(default=1.96, metadata={"min": 0})
    verdict_sequences: int = field(
        default=512, metadata={"min": 1}
    )  # the fresh verdict split the constraint is judged on (SE must be < tolerance/5)
    verdict_start: int | None = None  # its first held-out sequence; None: right after the selection split
    checkpoint_every: int = 100  # steps; 0 = only at the end
    judge: JudgeConfig = field(default_factory=JudgeConfig)  # the report's accuracy guard and untouched split
    seed: int = 0  # data order and gate noise
    device: str | None = None
    progress: bool = field(default=True, metadata={"cli": False})  # the CLI's --quiet

    def check(self) -> None:
        check_device(self.device, ConfigError)
        from workbench.attention.verdict import check_start

        check_start(self.verdict_start, self.eval_sequences)
        if self.control == "frozen" and self.lr:
            raise ConfigError(
                f"lr={self.lr} with control 'frozen': the frozen control keeps the weights fixed (lr 0, only the "
                "gates learn); drop --lr, or choose --control none|finetune to train the weights"
            )
        if self.control == "finetune" and self.lr == 0:
            raise ConfigError(
                "lr=0 with control 'finetune': a control that does not train equals the frozen base; "
                "give lr > 0, or choose --control frozen"
            )
        if self.control != "finetune" and self.control_average:
            raise ConfigError(
                f"control_average={self.control_average} with control {self.control!r}: only the fine-tuned "
                "control has weights to average; choose --control finetune or drop --control-average"
            )
        if self.control == "finetune" and self.dual_ce == "fixed":
            raise ConfigError(
                "dual_ce 'fixed' with control 'finetune': the fixed reference is the frozen base's CE, not the "
                "control's running loss; use dual_ce 'paired'"
            )

    def fill(self, world_size: int = 1) -> dict:
        """The gate preset's defaults (the gates' initial bias, tau_end); the run's number of processes must
        divide the batch and the selection split."""
        if self.batch_size % world_size:
            raise ConfigError(
                f"batch_size={self.batch_size} must be a positive multiple of the number of processes ({world_size})"
            )
        if self.dual_stream == "heldout" and self.dual_sequences % world_size:
            raise ConfigError(
                f"dual_sequences={self.dual_sequences} must be a multiple of the number of processes ({world_size})"
            )
        if self.eval_sequences % world_size:
            raise ConfigError(
                f"eval_sequences={self.eval_sequences} must be a multiple of the number of processes ({world_size})"
            )
        if self.control == "finetune" and world_size > 1:
            raise ConfigError(
                f"control 'finetune' runs in one process ({world_size} given): the control copy is not "
                "distributed; run it without torchrun"
            )
        lr = self.lr if self.lr is not None else 0.0 if self.control == "frozen" else DEFAULT_LR
        tau_end = self.tau_end if self.tau_end is not None else 1.0 if self.gates.gate == "published" else 0.1
        return {"gates": self.gates.resolve(), "tau_end": tau_end, "lr": lr}

    def tau(self, step: int) -> float:
        """The relaxation temperature at a step."""
        t = min(1.0, step / max(1, self.steps - 1))
        if self.tau_schedule == "constant":
            return self.tau_start
        if self.tau_schedule == "linear":
            return self.tau_start + t * (self.tau_end - self.tau_start)
        return self.tau_start * (self.tau_end / self.tau_start) ** t


# fields that do not change the training numbers, so a resume may change them (steps: only upwards,
# which extends a finished run; an annealed temperature then follows the new length from there on; the
# verdict and judge fields decide only what the report measures)
RESUME_FREE = ("progress", "device", "checkpoint_every", "steps", "verdict_sequences", "verdict_start", "judge")
