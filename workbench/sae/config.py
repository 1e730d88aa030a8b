"""Dataclass configs for SAE training; every open choice of docs/methods.md §1–§5 is a field saved with the SAE."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from workbench.config import Config, check_device
from workbench.errors import ConfigError

ARCHITECTURES = (
    "topk",
    "batchtopk",
    "matryoshka",
    "block_topk",
    "group_lasso",
    "block_jumprelu",
    "grassmannian",
    "jumprelu",
    "gated",
    "standard",
)
BLOCK_ARCHITECTURES = ("block_topk", "group_lasso", "block_jumprelu", "grassmannian")
THRESHOLD_BLOCK_ARCHITECTURES = ("group_lasso", "block_jumprelu")  # learned per-block thresholds
# the penalised architectures: lambda (this config field) times a sparsity term; target_l0 steers them
COEF_FIELDS = {
    "group_lasso": "group_lasso_coef",
    "block_jumprelu": "block_l0_coef",
    "jumprelu": "l0_coef",
    "gated": "l1_coef",
    "standard": "l1_coef",
}
THRESHOLD_CONTROLLED = ("block_jumprelu", "jumprelu")  # target_l0's "auto" controller scales their thresholds
TOPK_FAMILY = ("topk", "batchtopk", "matryoshka")
POSITIVE = {"min": 0, "open": "min"}  # a float field's bounds (workbench.config): > 0


@dataclass
class SAEConfig(Config):
    """One SAE. Fields left None are resolved against the data by `resolve(d_in, n_tokens)`."""

    architecture: str = field(
        default="topk", metadata={"flag": "--arch", "choices": ARCHITECTURES, "help": "SAE architecture"}
    )
    k: int = field(
        default=32,
        metadata={"min": 1, "help": "Top-k: latents per token; BatchTopK/Matryoshka: mean latents per token"},
    )
    n_latents: int | None = field(
        default=None, metadata={"min": 1, "help": "width (number of latents); None: expansion x d_in"}
    )
    expansion: int = field(
        default=8, metadata={"min": 1, "help": "n_latents = expansion x d_in when n_latents is None"}
    )
    d_in: int | None = field(
        default=None,
        metadata={
            "min": 1,
            "help": "None: the cache's width for the hook; a different value is an error",
            "cli": False,
        },
    )
    name: str | None = field(
        default=None, metadata={"help": "folder name; None: derived from the fields below", "cli": False}
    )
    # Transcoder (docs/methods.md §10): read one hook, reconstruct another (the MLP's input -> its output)
    transcoder: bool = field(
        default=False,
        metadata={
            "help": "read the input hook and reconstruct a target hook (set by the trainer's target)",
            "cli": False,
        },
    )
    d_out: int | None = field(
        default=None,
        metadata={
            "min": 1,
            "help": "transcoder: the target's width; None: the cache's width for the target hook",
            "cli": False,
        },
    )
    skip: bool = field(
        default=False,
        metadata={
            "help": "transcoder: a linear path W_skip x beside the sparse code (a skip transcoder; W_skip starts at 0)"
        },
    )
    seed: int = field(default=0, metadata={"help": "SAE initialisation seed"})
    kernel: str = field(
        default="sparse",
        metadata={
            "choices": ("sparse", "dense"),
            "help": "sparse: only the encoder forward is dense; dense: the reference",
        },
    )
    input_norm: str = field(
        default="sqrt_d",
        metadata={"choices": ("sqrt_d", "none"), "help": "sqrt_d: scale inputs so the mean norm is sqrt(d_in)"},
    )
    b_dec_init: str = field(
        default="geometric_median",
        metadata={"choices": ("geometric_median", "mean", "zeros"), "help": "initial decoder bias"},
    )
    encoder_init: str = field(
        default="fit",
        metadata={
            "choices": ("fit", "transpose"),
            "help": "W_enc starts as W_dec^T; fit scales it so the first batch's reconstruction has the least-squares "
            "size (the plain transpose overshoots: FVU > 1 at step 0)",
        },
    )
    # AuxK (dead latents reconstruct the residual)
    aux_k: int | None = field(default=None, metadata={"min": 1, "help": "AuxK latents; None: d_in // 2"})
    aux_alpha: float = field(default=1 / 32, metadata={"min": 0, "help": "weight of the AuxK loss"})
    aux_rows: float = field(
        default=1.0,
        metadata={
            "min": 0,
            "max": 1,
            "open": "min",
            "help": "fraction of each batch's rows AuxK runs on (the first ceil(aux_rows x B); batches come "
            "shuffled); its loss is normalised over those rows, so its expected size is unchanged",
        },
    )
    dead_tokens: int | None = field(
        default=None,
        metadata={
            "min": 1,
            "help": "tokens without firing before a latent counts as dead; None: a tenth of the run, at most 10M",
        },
    )
    dense_tau: float = field(
        default=0.1,
        metadata={
            "min": 0,
            "max": 1,
            "open": "both",
            "help": "a latent is dense when it fires on more than this fraction of tokens",
        },
    )
    threshold_ema: float = field(
        default=0.01,
        metadata={
            "min": 0,
            "max": 1,
            "help": "BatchTopK/Matryoshka inference threshold: EMA rate of the smallest kept activation",
        },
    )
    # Matryoshka
    prefixes: list[int] | None = field(default=None, metadata={"help": "nested widths m_1 < ... < m_G = n_latents"})
    prefix_weighting: str = field(
        default="sum",
        metadata={
            "choices": ("sum", "mean", "mean_with_bias"),
            "help": "sum (SAELens), mean (dictionary_learning) or mean_with_bias (Bussmann) over the prefix losses",
        },
    )
    # Block-sparse (n_latents = n_blocks * block_size)
    block_size: int = field(
        default=4,
        metadata={
            "min": 1,
            "help": "latents per block of the block-sparse architectures (4 divides expansion x d_in for the default "
            "expansion 8, whatever d_in)",
        },
    )
    n_active_blocks: int = field(
        default=4,
        metadata={"min": 1, "help": "block Top-k / Grassmannian: blocks kept per token; thresholded blocks: at init"},
    )
    block_l0_coef: float = field(
        default=3.0,
        metadata={"min": 0, "help": "block JumpReLU: lambda on E[#active blocks] (inputs scaled to norm sqrt(d))"},
    )
    group_lasso_coef: float = field(
        default=0.1, metadata={"min": 0, "help": "group lasso: lambda on sum_g ||z_g||_2 per token"}
    )
    block_bandwidth: float = field(
        default=0.1, metadata={**POSITIVE, "help": "block JumpReLU: straight-through rectangle width"}
    )
    # JumpReLU, gated and standard (ReLU + L1) SAEs (docs/methods.md §3b)
    l0_coef: float = field(
        default=1.0,
        metadata={
            "min": 0,
            "help": "JumpReLU: lambda on the L0 (rajamanoharan2024) or on sum tanh(c |f| ||W_dec||) (anthropic2025)",
        },
    )
    l1_coef: float = field(
        default=0.1,
        metadata={"min": 0, "help": "gated / standard: lambda on the L1 of the (gate) codes times ||W_dec,i||"},
    )
    jumprelu_recipe: str = field(
        default="rajamanoharan2024",
        metadata={
            "choices": ("rajamanoharan2024", "anthropic2025"),
            "help": "rajamanoharan2024: L0 penalty, unit-norm decoder, straight-through gradient to the threshold "
            "only; anthropic2025 (Circuits Updates, January 2025): tanh(c |f| ||W_dec||) penalty, free decoder "
            "norms, straight-through gradient to the pre-activation too, and the pre-activation penalty",
        },
    )
    jumprelu_bandwidth: float = field(
        default=0.1, metadata={**POSITIVE, "help": "JumpReLU: straight-through rectangle width epsilon"}
    )
    tanh_c: float = field(
        default=4.0, metadata={**POSITIVE, "help": "JumpReLU anthropic2025: c in tanh(c |f| ||W_dec||)"}
    )
    pre_act_coef: float = field(
        default=3e-6,
        metadata={
            "min": 0,
            "help": "JumpReLU anthropic2025: lambda_p on sum_i relu(theta_i - h_i) ||W_dec,i|| (revives dead latents)",
        },
    )
    l1_decoder: str = field(
        default="weighted",
        metadata={
            "choices": ("weighted", "unit"),
            "help": "standard: weighted = free decoder norms, L1 of f_i ||W_dec,i|| (Anthropic, April 2024); "
            "unit = unit-norm decoder rows, plain L1 (Bricken et al. 2023)",
        },
    )
    target_l0: float | None = field(
        default=None,
        metadata={
            **POSITIVE,
            "help": "group lasso / block JumpReLU / JumpReLU / gated / standard: hold the mean L0 (latents per token) here by moving the sparsity "
            "coefficient; None: the coefficient stays fixed (and L0 drifts)",
        },
    )
    l0_control: str = field(
        default="auto",
        metadata={
            "choices": ("auto", "log", "threshold"),
            "help": "target_l0's controller. log: moves lambda multiplicatively (dual ascent in log space); "
            "threshold: lambda stays fixed and every block's learned threshold is scaled by exp(rate * err) "
            "after each step; auto: threshold for block JumpReLU and JumpReLU (whose thresholds, "
            "moved by Adam at most lr a step, hold L0 wherever lambda goes), log for the others",
        },
    )
    l0_control_rate: float = field(
        default=0.02,
        metadata={
            **POSITIVE,
            "help": "target_l0's controller, integral part: after every step I *= exp(rate * err) (log) or "
            "theta *= exp(rate * err) (threshold), err = clamp(L0 / target_l0 - 1, -1, 1) with L0 from that "
            "step's batch",
        },
    )
    l0_control_gain: float = field(
        default=1.0,
        metadata={
            "min": 0,
            "help": "target_l0's log controller, proportional part: the coefficient is I * exp(gain * err)",
        },
    )
    # Scaffold: rank-r dense bottleneck beside the dictionary
    scaffold_rank: int = field(default=0, metadata={"help": "rank-r dense bottleneck beside the dictionary, 0 = none"})
    scaffold_init: str = field(
        default="pca", metadata={"choices": ("pca", "random"), "help": "pca: the top-r principal components"}
    )
    scaffold_encoder_input: str = field(
        default="residual",
        metadata={"choices": ("residual", "x"), "help": "the sparse encoder reads x - S(x) (residual) or x"},
    )
    scaffold_trainable: bool = field(default=True, metadata={"help": "train the scaffold (else it keeps its init)"})
    # Top-k regularisers before the selection (0 = off)
    reg_l1_off: float = field(
        default=0.0, metadata={"min": 0, "help": "lambda1: l1 on off-support pre-activations of batch-active units"}
    )
    reg_l1_l2: float = field(default=0.0, metadata={"min": 0, "help": "lambda2: l1/l2 ratio on batch-active units"})
    reg_normalisation: str = field(
        default="token",
        metadata={"choices": ("token", "batch"), "help": "token: mean over tokens; batch: whole-batch sums"},
    )

    @property
    def is_block(self) -> bool:
        return self.architecture in BLOCK_ARCHITECTURES

    @property
    def unit_size(self) -> int:
        """Latents per unit that fires as one (a block, or a single latent)."""
        return self.block_size if self.is_block else 1

    @property
    def n_units(self) -> int:
        return self.n_latents // self.unit_size

    @property
    def out_width(self) -> int:
        """Width of what the dictionary reconstructs: the target's (transcoder) or the input's."""
        return self.d_out if self.transcoder else self.d_in

    def fill(self, d_in: int, n_tokens: int | None = None, d_out: int | None = None) -> dict:
        """The fields the data decides: the input's width d_in (d_out: the target's, transcoders), and the
        defaults that follow from it and the run's length; a width set that the data contradicts is an error."""
        who = self.name or self.architecture
        if self.d_in is not None and self.d_in != d_in:
            raise ConfigError(
                f"SAE {who!r} has d_in={self.d_in} but the data has width {d_in}; set d_in={d_in} or leave it None"
            )
        if self.transcoder and d_out is None and self.d_out is None:
            raise ConfigError(f"transcoder {who!r} needs the target's width d_out")
        if self.d_out is not None and d_out is not None and self.d_out != d_out:
            raise ConfigError(
                f"transcoder {who!r} has d_out={self.d_out} but the target "
                f"has width {d_out}; set d_out={d_out} or leave it None"
            )
        if not self.transcoder and (self.skip or self.d_out is not None):
            raise ConfigError(
                f"skip={self.skip} and d_out={self.d_out} apply to transcoders only (train with a target hook)"
            )
        n = self.n_latents if self.n_latents is not None else self.expansion * d_in
        out = {"d_in": d_in, "d_out": (self.d_out or d_out) if self.transcoder else None, "n_latents": n}
        if self.aux_k is None:
            out["aux_k"] = max(1, d_in // 2)
        if self.dead_tokens is None:
            # 10M tokens in the published runs; short runs use a tenth of the run (at least 1 batch-size worth)
            out["dead_tokens"] = int(min(10_000_000, max(1, (n_tokens or 10_000_000) // 10)))
        if self.l0_control == "auto" and self.architecture in COEF_FIELDS:
            out["l0_control"] = "threshold" if self.architecture in THRESHOLD_CONTROLLED else "log"
        if self.architecture == "matryoshka" and self.prefixes is None:
            out["prefixes"] = _default_prefixes(n)
        if self.name is None:
            out["name"] = dataclasses.replace(self, **out).default_name()
        return out

    def check_name(self) -> None:
        """The SAE is saved in <out>/<name>: a name that leads outside the output folder is refused."""
        n = self.name
        if n is not None and (n in ("", ".", "..") or "/" in n or "\\" in n or n.startswith("~")):
            raise ConfigError(
                f"name={n!r} must be a plain folder name (no '/', '..' or absolute path): each SAE is "
                "saved in <out>/<name>, and names outside the output folder are refused"
            )

    def default_name(self) -> str:
        sparsity = (
            f"b{self.block_size}x{self.n_active_blocks}"
            if self.architecture in ("block_topk", "grassmannian")
            else f"b{self.block_size}t{self.target_l0:g}"
            if self.target_l0 is not None and self.is_block
            else f"t{self.target_l0:g}"
            if self.target_l0 is not None
            else f"l{getattr(self, COEF_FIELDS[self.architecture]):g}"
            if self.architecture in ("jumprelu", "gated", "standard")
            else f"b{self.block_size}l{self.block_l0_coef:g}"
            if self.architecture == "block_jumprelu"
            else f"b{self.block_size}l{self.group_lasso_coef:g}"
            if self.architecture == "group_lasso"
            else f"k{self.k}"
        )
        parts = [self.architecture, f"n{self.n_latents}", sparsity]
        if self.scaffold_rank:
            parts.append(f"scaffold{self.scaffold_rank}")
        if self.skip:
            parts.append("skip")
        if self.reg_l1_off or self.reg_l1_l2:
            parts.append(f"reg{self.reg_l1_off:g}_{self.reg_l1_l2:g}")
        if self.architecture == "jumprelu" and self.jumprelu_recipe != "rajamanoharan2024":
            parts.append(self.jumprelu_recipe)
        if self.architecture == "standard" and self.l1_decoder != "weighted":
            parts.append(f"l1{self.l1_decoder}")
        if self.kernel != "sparse":
            parts.append(self.kernel)
        if self.encoder_init != "fit":
            parts.append(f"enc_{self.encoder_init}")
        parts.append(f"seed{self.seed}")
        return "_".join(parts)

    def check(self) -> None:
        """Every value that is set; those that depend on n_latents, d_in or d_out once resolve() fills them."""
        self.check_name()
        n = self.n_latents
        if self.architecture in TOPK_FAMILY and n is not None and self.k > n:
            raise ConfigError(f"k={self.k} must be between 1 and n_latents={n}")
        if self.is_block and n is not None:
            self._check_blocks(n)
        if self.target_l0 is not None:
            self._check_target_l0(n)
        if self.architecture == "matryoshka":
            p = self.prefixes
            if p is not None and (
                not p or any(b <= a for a, b in zip(p, p[1:])) or p[0] < 1 or (n is not None and p[-1] != n)
            ):
                raise ConfigError(
                    f"prefixes={p} must be strictly increasing positive widths ending at "
                    f"n_latents={n}" + (f", e.g. {_default_prefixes(n)}" if n is not None else "")
                )
        elif self.prefixes is not None:
            raise ConfigError(f"prefixes={self.prefixes} only apply to architecture='matryoshka'")
        if self.d_in is not None and not self.scaffold_rank < self.d_in:
            raise ConfigError(f"scaffold_rank={self.scaffold_rank} must be between 0 and d_in-1={self.d_in - 1}")
        if (self.reg_l1_off or self.reg_l1_l2) and self.architecture not in TOPK_FAMILY:
            raise ConfigError(f"the Top-k regularisers apply to {list(TOPK_FAMILY)}, not {self.architecture!r}")
        if self.transcoder:
            self._check_transcoder()

    def _check_blocks(self, n: int) -> None:
        if n % self.block_size:
            raise ConfigError(
                f"block_size={self.block_size} must divide n_latents={n} "
                f"(valid block sizes: {[b for b in range(1, 9) if n % b == 0]})"
            )
        if not self.n_active_blocks <= n // self.block_size:
            raise ConfigError(
                f"n_active_blocks={self.n_active_blocks} must be between 1 and the number of blocks {n // self.block_size}"
            )
        if self.architecture == "grassmannian" and self.d_in is not None and self.block_size > self.d_in:
            raise ConfigError(
                f"block_size={self.block_size} exceeds d_in={self.d_in}: a block is an orthonormal frame in the input space"
            )

    def _check_target_l0(self, n: int | None) -> None:
        if self.architecture not in COEF_FIELDS:
            raise ConfigError(
                f"target_l0 applies to {list(COEF_FIELDS)} (the other architectures fix their "
                f"L0 by k or n_active_blocks), not {self.architecture!r}"
            )
        if n is not None and self.target_l0 > n:
            raise ConfigError(f"target_l0={self.target_l0} must be in (0, n_latents={n}]")
        coef = COEF_FIELDS[self.architecture]
        if not getattr(self, coef) > 0:
            raise ConfigError(
                f"target_l0's log controller moves {coef} multiplicatively and the threshold controller "
                f"keeps it, so {coef}={getattr(self, coef)} must be > 0"
            )

    def _check_transcoder(self) -> None:
        if self.architecture == "grassmannian":
            raise ConfigError(
                "architecture='grassmannian' cannot be a transcoder: its encoder is tied to its decoder frames, "
                f"which live in the output space; choose one of {[a for a in ARCHITECTURES if a != 'grassmannian']}"
            )
        if self.scaffold_rank and self.scaffold_encoder_input == "residual":
            raise ConfigError(
                "scaffold_encoder_input='residual' is undefined for a transcoder (its scaffold writes the output "
                "space, not the input the encoder reads); set scaffold_encoder_input='x'"
            )
        if self.d_out is not None and self.scaffold_rank >= self.d_out:
            raise ConfigError(f"scaffold_rank={self.scaffold_rank} must be below d_out={self.d_out}")


CLT_ARCHITECTURES = ("topk", "batchtopk", "matryoshka", "block_topk", "jumprelu", "standard")
BATCH_RANKED = ("batchtopk", "matryoshka")  # one threshold at inference (JumpReLU); a shared budget ranks the batch


@dataclass
class CLTConfig(SAEConfig):
    """One CLT: the SAEConfig fields apply to every layer's member (k is per layer, or the per-layer share of the
    shared budget); n_layers is the CLT's number of layers (resolved from the run's layers)."""

    transcoder: bool = field(default=True, metadata={"help": "a CLT is a transcoder", "cli": False})
    n_layers: int | None = field(
        default=None, metadata={"min": 1, "help": "layers the CLT spans (the run's layers)", "cli": False}
    )
    clt_loss: str = field(
        default="sum",
        metadata={
            "choices": ("sum", "mean"),
            "help": "CLT: the reconstruction losses of the target layers summed (CLT-Forge) or averaged",
        },
    )
    clt_sparsity: str = field(
        default="per_layer",
        metadata={
            "choices": ("per_layer", "shared"),
            "help": "CLT: k latents per layer (per token, or per token on average for BatchTopK), or one budget of "
            "k x n_layers shared by all layers",
        },
    )
    threshold_per_latent: bool = field(
        default=False,
        metadata={
            "help": "BatchTopK CLT: one inference threshold per latent (a circuit-tracer CLT's JumpReLU, imported) "
            "instead of one per layer (what training learns)",
            "cli": False,
        },
    )

    @property
    def n_units(self) -> int:
        """Every layer's units, layer by layer (the trainer's dead/dense counters)."""
        return (self.n_layers or 1) * (self.n_latents // self.unit_size)

    def fill(self, d_in: int, n_tokens: int | None = None, d_out: int | None = None, n_layers: int | None = None):
        out = super().fill(d_in, n_tokens, d_out)
        out["n_layers"] = self.n_layers if n_layers is None else n_layers
        if self.name is None:
            out["name"] = "clt_" + out["name"] + (f"_{self.clt_sparsity}" if self.clt_sparsity != "per_layer" else "")
        return out

    def check(self) -> None:
        super().check()
        if self.architecture not in CLT_ARCHITECTURES:
            raise ConfigError(
                f"architecture={self.architecture!r} is not trained as a CLT yet; choose one of {list(CLT_ARCHITECTURES)}"
            )
        if self.clt_sparsity == "shared" and self.architecture not in TOPK_FAMILY:
            raise ConfigError(
                f"clt_sparsity='shared' applies to {list(TOPK_FAMILY)}, not to {self.architecture!r} (block and "
                "penalised CLTs have no budget to share)"
            )
        if self.threshold_per_latent and self.architecture != "batchtopk":
            raise ConfigError(f"threshold_per_latent applies to batchtopk CLTs, not to {self.architecture!r}")

    def member(self, i: int) -> SAEConfig:
        """Layer i's member: a transcoder into the targets of layers i..n_layers-1 (no skip: the CLT holds it)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(SAEConfig)}
        L = self.n_layers
        k = self.k * L if self.clt_sparsity == "shared" else self.k
        return SAEConfig(
            **{
                **fields,
                "transcoder": True,
                "skip": False,
                "d_out": (L - i) * self.d_out,
                "k": min(k, self.n_latents),
                "name": f"{self.name}-{i}",
                "seed": self.seed + i,
                "input_norm": "none",  # the CLT sets each member's input scale
            }
        )


def _default_prefixes(n: int) -> list[int]:
    """Doubling widths n/16, n/8, n/4, n/2, n (fewer when n is small)."""
    out = sorted({max(1, n >> s) for s in range(4, -1, -1)})
    return out


def at_k(cfgs: list[SAEConfig]) -> tuple[list[SAEConfig], list[str]]:
    """SAEs trained "at k" (`sae train --k`): the penalised architectures (group lasso, block JumpReLU, JumpReLU,
    gated, standard) without a target_l0 get target_l0 = k, since their fixed coefficient alone leaves L0 wherever it drifts (saved with the SAE);
    returns the configs and notes that say so and name the architectures k does not reach."""
    out, steered, fixed = [], {}, set()
    for c in cfgs:
        if c.architecture in COEF_FIELDS and c.target_l0 is None:
            c = dataclasses.replace(c, target_l0=float(c.k))
            steered.setdefault(c.k, set()).add(c.architecture)
        elif c.architecture in BLOCK_ARCHITECTURES and c.architecture not in COEF_FIELDS:
            fixed.add(c.architecture)
        out.append(c)
    notes = [
        f"{', '.join(sorted(archs))}: target_l0 = k = {k} (their sparsity coefficient is steered to that L0; "
        "--set target_l0=X for another)"
        for k, archs in steered.items()
    ]
    if fixed:
        notes.append(f"--k does not apply to {', '.join(sorted(fixed))}: their L0 is n_active_blocks x block_size")
    return out, notes


@dataclass
class TrainConfig(Config):
    """The shared loop for every SAE of a run (they all see the same batches)."""

    n_tokens: int = field(default=2_000_000, metadata={"flag": "--tokens", "min": 1, "help": "training tokens"})
    batch_size: int = field(default=4096, metadata={"min": 1, "help": "tokens per step over all ranks"})
    lr: float = field(default=3e-4, metadata={**POSITIVE, "help": "peak Adam learning rate"})
    warmup_steps: int = field(default=100, metadata={"help": "linear learning-rate warm-up steps"})
    decay_frac: float = field(
        default=0.2,
        metadata={"min": 0, "max": 1, "help": "the last fraction of steps decays the learning rate linearly to 0"},
    )
    adam_betas: tuple[float, float] = (0.9, 0.999)
    seed: int = field(default=0, metadata={"flag": "--data-seed", "help": "seed of the data order"})
    checkpoint_every: int = field(default=500, metadata={"help": "steps between checkpoints; 0 = only at the end"})
    log_every: int = field(default=50, metadata={"min": 1, "help": "steps per curve point"})
    on_nonfinite: str = field(
        default="skip",
        metadata={"choices": ("skip", "stop"), "help": "a batch with NaN/inf: skip it (counted) or stop with the step"},
    )
    max_fvu: float = field(
        default=10.0,
        metadata={
            "min": 1,
            "open": "min",
            "help": "stop with the step when a curve point's mean FVU exceeds this: training diverged (reconstructing "
            "nothing has FVU 1)",
        },
    )
    init_batches: int = field(
        default=1, metadata={"min": 1, "help": "batches used for b_dec / scaffold / input-scale initialisation"}
    )
    device: str | None = field(default=None, metadata={"help": "torch device; None: cuda when available"})
    autocast: bool = field(default=True, metadata={"help": "bf16 autocast on CUDA (ignored on CPU)"})
    memory_budget_mib: float | None = field(
        default=None,
        metadata={
            **POSITIVE,
            "help": "transcoder sets (--transcoders): the memory one pass over the cache may use (MiB); the layers "
            "that do not fit together train on further passes. None: half the free memory of the training device",
        },
    )
    progress: bool = field(default=True, metadata={"cli": False})
    extra: dict = field(default_factory=dict)  # free-form notes recorded with the run

    def check(self) -> None:
        check_device(self.device, ConfigError)
        if self.n_tokens < self.batch_size:
            raise ConfigError(f"n_tokens={self.n_tokens} is less than one batch ({self.batch_size})")

    def fill(self, world_size: int = 1) -> dict:
        """Nothing to fill: the run's number of processes must divide the batch."""
        if self.batch_size % world_size:
            raise ConfigError(
                f"batch_size={self.batch_size} must be a positive multiple of the number of processes ({world_size})"
            )
        return {}

    @property
    def n_steps(self) -> int:
        return self.n_tokens // self.batch_size


@dataclass
class EvalConfig(Config):
    """How `evaluate` measures a saved SAE on the cache's held-out split; saved in metrics.json."""

    max_tokens: int = field(
        default=20_000, metadata={"flag": "--tokens", "min": 1, "help": "held-out tokens to evaluate on"}
    )
    n_sequences: int = field(
        default=64, metadata={"min": 1, "help": "held-out sequences the spliced-model metrics run"}
    )
    batch_size: int = field(default=16, metadata={"min": 1, "help": "sequences per forward pass of the spliced model"})
    device: str | None = field(default=None, metadata={"help": "torch device; None: cuda when available"})
    probe_ks: tuple[int, ...] = (1, 2, 5)  # k of the k-sparse probes
    absorption_main: int = field(
        default=1, metadata={"min": 1, "help": "latents that count as a feature's main latent in the absorption score"}
    )
    mdl_precision: float = field(
        default=0.01, metadata={**POSITIVE, "help": "quantisation step of the description length"}
    )

    def check(self) -> None:
        check_device(self.device, ConfigError)
