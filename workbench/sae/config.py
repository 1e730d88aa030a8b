"""Dataclass configs for SAE training; every open choice of methods.md is a field saved with the SAE."""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import asdict, dataclass, field

ARCHITECTURES = ("topk", "batchtopk", "matryoshka", "block_topk", "group_lasso", "block_jumprelu", "grassmannian")
BLOCK_ARCHITECTURES = ("block_topk", "group_lasso", "block_jumprelu", "grassmannian")
THRESHOLD_BLOCK_ARCHITECTURES = ("group_lasso", "block_jumprelu")  # learned per-block thresholds
TOPK_FAMILY = ("topk", "batchtopk", "matryoshka")


class ConfigError(ValueError):
    """A config value is invalid; the message names the value and the valid choices."""


def _is(value, hint) -> bool:
    """isinstance against a field's annotation (int, float, str, bool, X | None, list[int], tuple[float, float])."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_is(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin in (list, tuple):
        return isinstance(value, (list, tuple)) and all(_is(v, args[0] if origin is list else a)
                                                        for v, a in zip(value, args if origin is tuple else value))
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, origin or hint)


def check_types(obj) -> None:
    """Every field of a config dataclass holds a value of its annotated type (values from --set or JSON
    files arrive untyped); raise ConfigError naming the field, the value and the expected type."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if not _is(v, hints[f.name]):
            expected = str(hints[f.name]).replace("typing.", "").replace("<class '", "").replace("'>", "")
            raise ConfigError(f"{f.name}={v!r} is not of type {expected}")


def _choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ConfigError(f"{name}={value!r} is not valid; choose one of {list(choices)}")


@dataclass
class SAEConfig:
    """One SAE. Fields left None are resolved against the data by `resolve(d_in, n_tokens)`."""

    architecture: str = "topk"
    k: int = 32  # Top-k: latents per token; BatchTopK/Matryoshka: mean latents per token
    n_latents: int | None = None  # width (number of latents); None -> expansion * d_in
    expansion: int = 8
    d_in: int | None = None  # None -> the cache's width for the hook; a different value is an error
    name: str | None = None  # folder name; None -> derived from the fields below
    seed: int = 0
    kernel: str = "sparse"  # "sparse" (only the encoder forward is dense) | "dense" (reference)
    input_norm: str = "sqrt_d"  # "sqrt_d": scale inputs so the mean norm is sqrt(d_in) | "none"
    b_dec_init: str = "geometric_median"  # "geometric_median" | "mean" | "zeros"
    # W_enc starts as W_dec^T; "fit" then scales it so the first batch's reconstruction has the
    # least-squares size (the plain transpose overshoots: FVU > 1 at step 0) | "transpose" (as is)
    encoder_init: str = "fit"
    # AuxK (dead latents reconstruct the residual)
    aux_k: int | None = None  # None -> d_in // 2
    aux_alpha: float = 1 / 32
    dead_tokens: int | None = None  # tokens without firing before a latent counts as dead; None -> scaled to run
    dense_tau: float = 0.1  # a latent is dense when it fires on more than this fraction of tokens
    # BatchTopK / Matryoshka inference threshold theta = EMA of the smallest kept activation
    threshold_ema: float = 0.01
    # Matryoshka
    prefixes: list[int] | None = None  # nested widths m_1 < ... < m_G = n_latents
    prefix_weighting: str = "sum"  # "sum" (SAELens) | "mean" (dictionary_learning) | "mean_with_bias" (Bussmann)
    # Block-sparse (n_latents = n_blocks * block_size)
    block_size: int = 4  # divides expansion * d_in for the default expansion 8, whatever d_in
    n_active_blocks: int = 4  # block Top-k / Grassmannian: blocks kept per token; thresholded blocks: at init
    block_l0_coef: float = 3.0  # block JumpReLU: lambda on E[#active blocks] (inputs scaled to norm sqrt(d))
    group_lasso_coef: float = 0.1  # group lasso: lambda on sum_g ||z_g||_2 per token
    block_bandwidth: float = 0.1  # block JumpReLU: straight-through rectangle width
    # Scaffold: rank-r dense bottleneck beside the dictionary
    scaffold_rank: int = 0
    scaffold_init: str = "pca"  # "pca" (top-r principal components) | "random"
    scaffold_encoder_input: str = "residual"  # "residual" (x - S(x)) | "x"
    scaffold_trainable: bool = True  # False keeps the initial map fixed
    # Top-k regularisers before the selection (0 = off)
    reg_l1_off: float = 0.0  # lambda1: l1 on off-support pre-activations of batch-active units
    reg_l1_l2: float = 0.0  # lambda2: l1/l2 ratio on batch-active units
    reg_normalisation: str = "token"  # "token" (mean over tokens) | "batch" (whole-batch sums)

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

    def resolve(self, d_in: int, n_tokens: int | None = None) -> "SAEConfig":
        """Fill the None fields from the data and check every value; returns a new config."""
        check_types(self)
        if self.d_in is not None and self.d_in != d_in:
            raise ConfigError(f"SAE {self.name or self.architecture!r} has d_in={self.d_in} but the data "
                              f"has width {d_in}; set d_in={d_in} or leave it None")
        c = dataclasses.replace(self, d_in=d_in)
        if c.n_latents is None:
            c.n_latents = c.expansion * d_in
        if c.aux_k is None:
            c.aux_k = max(1, d_in // 2)
        if c.dead_tokens is None:
            # 10M tokens in the published runs; short runs use a tenth of the run (at least 1 batch-size worth)
            c.dead_tokens = int(min(10_000_000, max(1, (n_tokens or 10_000_000) // 10)))
        if c.architecture == "matryoshka" and c.prefixes is None:
            c.prefixes = _default_prefixes(c.n_latents)
        if c.prefixes is not None:
            c.prefixes = [int(p) for p in c.prefixes]
        if c.name is None:
            c.name = c.default_name()
        c.validate()
        return c

    def check_name(self) -> None:
        """The SAE is saved in <out>/<name>: a name that leads outside the output folder is refused."""
        n = self.name
        if n is not None and (n in ("", ".", "..") or "/" in n or "\\" in n or n.startswith("~")):
            raise ConfigError(f"name={n!r} must be a plain folder name (no '/', '..' or absolute path): each SAE is "
                              "saved in <out>/<name>, and names outside the output folder are refused")

    def default_name(self) -> str:
        sparsity = f"b{self.block_size}x{self.n_active_blocks}" if self.architecture in ("block_topk", "grassmannian") \
            else f"b{self.block_size}l{self.block_l0_coef:g}" if self.architecture == "block_jumprelu" \
            else f"b{self.block_size}l{self.group_lasso_coef:g}" if self.architecture == "group_lasso" else f"k{self.k}"
        parts = [self.architecture, f"n{self.n_latents}", sparsity]
        if self.scaffold_rank:
            parts.append(f"scaffold{self.scaffold_rank}")
        if self.reg_l1_off or self.reg_l1_l2:
            parts.append(f"reg{self.reg_l1_off:g}_{self.reg_l1_l2:g}")
        if self.kernel != "sparse":
            parts.append(self.kernel)
        if self.encoder_init != "fit":
            parts.append(f"enc_{self.encoder_init}")
        parts.append(f"seed{self.seed}")
        return "_".join(parts)

    def validate(self) -> None:
        check_types(self)
        _choice("architecture", self.architecture, ARCHITECTURES)
        self.check_name()
        _choice("kernel", self.kernel, ("sparse", "dense"))
        _choice("input_norm", self.input_norm, ("sqrt_d", "none"))
        _choice("b_dec_init", self.b_dec_init, ("geometric_median", "mean", "zeros"))
        _choice("encoder_init", self.encoder_init, ("fit", "transpose"))
        _choice("prefix_weighting", self.prefix_weighting, ("sum", "mean", "mean_with_bias"))
        _choice("scaffold_init", self.scaffold_init, ("pca", "random"))
        _choice("scaffold_encoder_input", self.scaffold_encoder_input, ("residual", "x"))
        _choice("reg_normalisation", self.reg_normalisation, ("token", "batch"))
        n = self.n_latents
        if n is None or n < 1 or self.d_in is None or self.d_in < 1:
            raise ConfigError(f"n_latents={n} and d_in={self.d_in} must be positive integers")
        if self.architecture in TOPK_FAMILY and not 1 <= self.k <= n:
            raise ConfigError(f"k={self.k} must be between 1 and n_latents={n}")
        if self.is_block:
            if self.block_size < 1 or n % self.block_size:
                raise ConfigError(f"block_size={self.block_size} must divide n_latents={n} "
                                  f"(valid block sizes: {[b for b in range(1, 9) if n % b == 0]})")
            if not 1 <= self.n_active_blocks <= n // self.block_size:
                raise ConfigError(f"n_active_blocks={self.n_active_blocks} must be between 1 and the number "
                                  f"of blocks {n // self.block_size}")
            if self.architecture == "grassmannian" and self.block_size > self.d_in:
                raise ConfigError(f"block_size={self.block_size} exceeds d_in={self.d_in}: a block is an "
                                  "orthonormal frame in the input space")
        if self.architecture == "matryoshka":
            p = self.prefixes or []
            if not p or any(b <= a for a, b in zip(p, p[1:])) or p[0] < 1 or p[-1] != n:
                raise ConfigError(f"prefixes={p} must be strictly increasing positive widths ending at "
                                  f"n_latents={n}, e.g. {_default_prefixes(n)}")
        elif self.prefixes is not None:
            raise ConfigError(f"prefixes={self.prefixes} only apply to architecture='matryoshka'")
        if not 0 <= self.scaffold_rank < self.d_in:
            raise ConfigError(f"scaffold_rank={self.scaffold_rank} must be between 0 and d_in-1={self.d_in - 1}")
        if (self.reg_l1_off or self.reg_l1_l2) and self.architecture not in TOPK_FAMILY:
            raise ConfigError(f"the Top-k regularisers apply to {list(TOPK_FAMILY)}, not {self.architecture!r}")
        for name in ("aux_alpha", "reg_l1_off", "reg_l1_l2", "block_l0_coef", "group_lasso_coef", "threshold_ema"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ConfigError(f"{name}={v} must be a finite non-negative number")
        if not 0 < self.dense_tau < 1:
            raise ConfigError(f"dense_tau={self.dense_tau} must be in (0, 1)")
        if self.aux_k < 1 or self.dead_tokens < 1:
            raise ConfigError(f"aux_k={self.aux_k} and dead_tokens={self.dead_tokens} must be positive")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "SAEConfig":
        return cls(**_known_fields(cls, d))


def _default_prefixes(n: int) -> list[int]:
    """Doubling widths n/16, n/8, n/4, n/2, n (fewer when n is small)."""
    out = sorted({max(1, n >> s) for s in range(4, -1, -1)})
    return out


@dataclass
class TrainConfig:
    """The shared loop for every SAE of a run (they all see the same batches)."""

    n_tokens: int = 2_000_000
    batch_size: int = 4096  # tokens per step over all ranks
    lr: float = 3e-4
    warmup_steps: int = 100
    decay_frac: float = 0.2  # the last fraction of steps decays the learning rate linearly to 0
    adam_betas: tuple[float, float] = (0.9, 0.999)
    seed: int = 0  # data order
    checkpoint_every: int = 500  # steps; 0 = only at the end
    log_every: int = 50  # steps per curve point
    on_nonfinite: str = "skip"  # a batch with NaN/inf: "skip" (counted) | "stop" (error with the step)
    # a curve point with a mean FVU above this means training diverged (zero reconstruction has FVU 1):
    # stop with the step instead of saving a broken SAE
    max_fvu: float = 10.0
    init_batches: int = 1  # batches used for b_dec / scaffold / input-scale initialisation
    device: str | None = None  # None -> cuda when available
    autocast: bool = True  # bf16 autocast on CUDA (ignored on CPU)
    progress: bool = True
    extra: dict = field(default_factory=dict)  # free-form notes recorded with the run

    def validate(self, world_size: int = 1) -> None:
        check_types(self)
        _choice("on_nonfinite", self.on_nonfinite, ("skip", "stop"))
        if self.batch_size < 1 or self.batch_size % world_size:
            raise ConfigError(f"batch_size={self.batch_size} must be a positive multiple of the number of "
                              f"processes ({world_size})")
        if self.n_tokens < self.batch_size:
            raise ConfigError(f"n_tokens={self.n_tokens} is less than one batch ({self.batch_size})")
        if not (self.lr > 0 and 0 <= self.decay_frac <= 1 and self.warmup_steps >= 0):
            raise ConfigError(f"lr={self.lr} must be > 0, decay_frac={self.decay_frac} in [0, 1], "
                              f"warmup_steps={self.warmup_steps} >= 0")
        if not self.max_fvu > 1:
            raise ConfigError(f"max_fvu={self.max_fvu} must be above 1 (the FVU of reconstructing nothing)")
        if self.log_every < 1 or self.checkpoint_every < 0 or self.init_batches < 1:
            raise ConfigError(f"log_every={self.log_every} and init_batches={self.init_batches} must be >= 1, "
                              f"checkpoint_every={self.checkpoint_every} >= 0")

    @property
    def n_steps(self) -> int:
        return self.n_tokens // self.batch_size

    def to_dict(self) -> dict:
        d = asdict(self)
        d["adam_betas"] = list(self.adam_betas)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        d = _known_fields(cls, d)
        if "adam_betas" in d:
            d["adam_betas"] = tuple(d["adam_betas"])
        return cls(**d)


def _known_fields(cls, d: dict) -> dict:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise ConfigError(f"unknown {cls.__name__} fields {unknown}; valid fields: {sorted(names)}")
    return dict(d)


def digest(obj) -> str:
    """Canonical JSON of a config, for comparing a checkpoint's config with the current one."""
    return json.dumps(obj, sort_keys=True, default=list)
