"""What one intervention does (`InterventionConfig`) and how a graph is checked by interventions (`CheckConfig`),
as dataclasses without torch, so the CLI builds its flags cheaply; each is saved with its result.

Semantics (docs/methods.md, "Interventions"): `live` runs the real model with the dictionary's reconstruction
error kept (the change of its decoded output is added to the activation), so an empty intervention reproduces the
clean run exactly and everything downstream responds; `frozen` is circuit-tracer's `feature_intervention`:
attention patterns and normalisation scales held at the clean run's values. In either, the MLP outputs of `constrained_layers` can be
held at the clean run's too (circuit-tracer's constrained layers; live, a path patching: an effect then reaches the
logits only through the paths left open).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.config import Config
from workbench.errors import BadValueError

OPS = ("set", "scale", "steer", "ablate")
ABLATE_TO = ("zero", "mean", "counterfactual")
SEMANTICS = ("live", "frozen")
SPECIAL_POSITIONS = ("all", "generated")
# |value| at most this: a code or a strength of 1e6 already saturates every next token of the embedded models, and
# 1e308 overflows float32 to inf (KL nan)
MAX_VALUE = 1e6


def parse_positions(text: str) -> tuple[str, ...] | tuple[int, ...]:
    """'all' | 'generated' | '0,3,-1' (prompt positions; negative counts from the prompt's end)."""
    s = str(text).strip()
    if s in SPECIAL_POSITIONS:
        return (s,)
    if s and any(not p.strip() for p in s.split(",")):
        raise BadValueError(f"positions {text!r} has an empty element; use all, generated or e.g. 0,3,-1")
    try:
        out = tuple(int(p) for p in s.split(",") if p.strip())
    except ValueError:
        raise BadValueError(
            f"positions {text!r} is not 'all', 'generated' or a comma-separated list of prompt positions (e.g. 0,3,-1)"
        ) from None
    if not out:
        raise BadValueError(f"positions {text!r} names no position; use all, generated or e.g. 0,3,-1")
    return out


def parse_feature(text: str) -> tuple[int | None, int | str]:
    """'[layer:]index' -> (layer or None, index); the index may be 'scaffold' (a scaffolded SAE's dense part)."""
    layer, _, index = str(text).strip().rpartition(":")
    try:
        unit = "scaffold" if index == "scaffold" else int(index)
        at = int(layer) if layer else None
    except ValueError:
        raise BadValueError(
            f"feature {text!r} is not [layer:]index (e.g. 17, 2:17, or scaffold for a scaffolded SAE's dense part)"
        ) from None
    if (isinstance(unit, int) and unit < 0) or (at is not None and at < 0):
        raise BadValueError(f"feature {text!r} has a negative layer or index")
    return at, unit


def read_prompts(path) -> list[tuple[str, str | None]]:
    """A batch of prompts (`workbench intervene --prompts FILE`): one per line, or JSON lines {"prompt": ...,
    "counterfactual": ...} (the counterfactual optional, for --ablate-to counterfactual); blank lines skipped."""
    import json
    from pathlib import Path

    from workbench.errors import MissingInputError

    path = Path(path)
    if not path.is_file():
        raise MissingInputError(f"prompts file {str(path)!r} does not exist (one prompt a line, or JSON lines)")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadValueError(
            f"prompts file {str(path)!r} is not UTF-8 text: byte {e.start} is {raw[e.start : e.start + 1]!r}; "
            "convert it to UTF-8"
        ) from None
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if not line.lstrip().startswith("{"):
            out.append((line.strip(), None))
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError as e:
            raise BadValueError(
                f"{path}:{i} is not a JSON object ({e.msg}); give a prompt a line or JSON lines"
            ) from None
        if not isinstance(d, dict) or not isinstance(d.get("prompt"), str) or set(d) - {"prompt", "counterfactual"}:
            raise BadValueError(f'{path}:{i} must be {{"prompt": "...", "counterfactual": "..." (optional)}}')
        out.append((d["prompt"], d.get("counterfactual")))
    if not out:
        raise BadValueError(f"prompts file {str(path)!r} holds no prompt")
    return out


@dataclass
class InterventionConfig(Config):
    error = BadValueError

    features: list[str] = field(
        default_factory=list,
        metadata={
            "help": "units intervened on, each [layer:]index (a block's index for block-sparse SAEs, or "
            "scaffold); none: the clean run"
        },
    )
    op: str = field(default="ablate", metadata={"choices": OPS, "help": "what is done to each unit's code"})
    value: list[float] | None = field(
        default=None,
        metadata={
            "help": "set: the code; scale: the factor; steer: the multiple of the decoder direction added "
            "(a block: one number or one per coordinate)",
            "min": -MAX_VALUE,
            "max": MAX_VALUE,
        },
    )
    strengths: list[float] | None = field(
        default=None,
        metadata={
            "help": "a sweep beside value, run in the same batch: each one number put in as value is (steer: the "
            "strength); per strength the target's logit and probability change and the KL at the last position, "
            "and its continuation",
            "min": -MAX_VALUE,
            "max": MAX_VALUE,
        },
    )
    target: str | None = field(
        default=None,
        metadata={
            "help": "the sweep's next token followed (a token of the vocabulary, or its id); default: the one the "
            "largest |strength| raises most"
        },
    )
    ablate_to: str = field(default="zero", metadata={"choices": ABLATE_TO, "help": "ablate: the code put in"})
    counterfactual: str | None = field(
        default=None, metadata={"help": "ablate_to counterfactual: the prompt whose codes are put in (right-aligned)"}
    )
    positions: str = field(
        default="all",
        metadata={"help": "all (every prompt and generated token), generated, or prompt positions e.g. 0,3,-1"},
    )
    semantics: str = field(default="live", metadata={"choices": SEMANTICS, "help": "live or frozen (module doc)"})
    frozen_norm: bool = field(
        default=True,
        metadata={
            "flag": "--live-norm",
            "negate": True,
            "help": "frozen: leave the normalisation scales live (held by default; circuit-tracer 0.5's "
            "feature_intervention holds only the patterns unless every layer is constrained)",
        },
    )
    constrained_layers: list[int] = field(
        default_factory=list, metadata={"help": "layers whose MLP outputs are held at the clean run's"}
    )
    continue_tokens: int = field(
        default=20, metadata={"flag": "--continue", "help": "tokens generated, clean and intervened", "min": 0}
    )
    sample: bool = field(default=False, metadata={"help": "sample the continuations (else greedy)"})
    seed: int = field(default=0, metadata={"help": "the sampling seed (both continuations use it)", "min": 0})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature", "min": 0, "open": "min"})
    top_k: int = field(default=10, metadata={"help": "next tokens reported per position", "min": 1})
    mean_sequences: int = field(
        default=64, metadata={"help": "ablate_to mean: cache sequences the mean code is taken over", "min": 1}
    )

    def check(self) -> None:
        for f in self.features:
            parse_feature(f)
        parse_positions(self.positions)
        if self.op in ("set", "scale", "steer") and not self.value:
            raise BadValueError(f"op {self.op} needs a value (e.g. --value 5, or one per coordinate of a block)")
        if self.op == "ablate" and self.value:
            raise BadValueError(f"op ablate takes no value (got {self.value}); choose --ablate-to {list(ABLATE_TO)}")
        if self.strengths is not None and (self.op == "ablate" or not self.strengths):
            raise BadValueError(
                f"strengths {self.strengths} sweep the value of op set, scale or steer (got op {self.op}); give "
                "one or more numbers, e.g. --strengths 0,4,8,16"
            )
        if self.target is not None and self.strengths is None:
            raise BadValueError(f"target {self.target!r} is the token a sweep follows; give --strengths too")
        if self.op == "ablate" and self.ablate_to == "counterfactual" and not self.counterfactual:
            raise BadValueError("ablate_to counterfactual needs the counterfactual prompt (--counterfactual)")
        if self.counterfactual and not (self.op == "ablate" and self.ablate_to == "counterfactual"):
            raise BadValueError("a counterfactual prompt applies only to --op ablate --ablate-to counterfactual")
        if not self.frozen_norm and self.semantics == "live":
            raise BadValueError(
                "--live-norm (frozen_norm false) has no effect with --semantics live (the normalisation is live "
                "already); use it with --semantics frozen"
            )
        if self.positions == "generated" and self.continue_tokens == 0:
            raise BadValueError("positions generated with no continuation intervenes nowhere; set --continue N")

    @property
    def position_spec(self) -> tuple:
        return parse_positions(self.positions)

    def check_context(self, prompt_tokens: int, n_ctx: int) -> None:
        """The continuation must fit the model's context after the prompt (it would stop short, silently)."""
        room = n_ctx - prompt_tokens
        if self.continue_tokens > room:
            raise BadValueError(
                f"continue_tokens={self.continue_tokens} does not fit the model's context: the prompt takes "
                f"{prompt_tokens} of its {n_ctx} tokens, so at most {max(room, 0)} (--continue {max(room, 0)})"
            )


@dataclass
class CheckConfig(Config):
    """How a graph's nodes and edges are checked against the real model (docs/methods.md §12): each is measured
    frozen (its direct effect, along the graph's own path) and live (its total effect), and given a verdict word by
    these thresholds on |measured| / |predicted|."""

    error = BadValueError

    fraction: float = field(
        default=0.5,
        metadata={
            "help": "over-predicted (not confirmed) when |measured| is below this fraction of |predicted|",
            "min": 0,
            "max": 1,
            "open": "min",
        },
    )
    under: float = field(
        default=2.0,
        metadata={
            "help": "under-predicted (not confirmed) when |measured| exceeds this multiple of |predicted|",
            "min": 1,
            "open": "min",
        },
    )
    absent: float = field(
        default=0.05,
        metadata={"help": "absent when |measured| is at most this fraction of |predicted|", "min": 0, "max": 1},
    )
    semantics: str = field(
        default="frozen",
        metadata={
            "choices": SEMANTICS,
            "help": "the reading that gives each verdict (both are measured unless both_readings is off): frozen, "
            "the direct effect with "
            "patterns and scales at the clean run's as the graph assumes; live, the total effect",
        },
    )
    both_readings: bool = field(
        default=True,
        metadata={
            "help": "measure every node and edge in both semantics (frozen and live); off: only in --semantics "
            "(half the interventions, no through-attention part)"
        },
    )
    edge_target: str = field(
        default="mlp_active",
        metadata={
            "choices": ("mlp_active", "mlp", "encoder"),
            "help": "an edge into a feature read in the real MLP output's change as the feature's coefficient in a "
            "least-squares fit on the decoder rows of the features active there (mlp_active: the code the graph "
            "predicts, co-active features with overlapping rows not counted as it), as the change along its own "
            "row alone (mlp: overlapping co-active features counted as it), or as its transcoder's pre-activation "
            "(encoder: blind to a transcoder's shortcut)",
        },
    )
    top_edges: int = field(default=20, metadata={"help": "edges checked, largest |weight| first", "min": 0})
    top_qk: int = field(
        default=20,
        metadata={
            "help": "QK parts checked (a graph built with --qk): the largest |part| of a source on a head's "
            "attention score, over its entries' query and key sides",
            "min": 0,
        },
    )
    metric: str = field(
        default="target",
        metadata={
            "choices": ("target", "difference"),
            "help": "the target logit (minus the mean logit), or target minus the graph's second logit",
        },
    )

    def check(self) -> None:
        if not self.absent < self.fraction:
            raise BadValueError(
                f"absent={self.absent} must be below fraction={self.fraction} (absent: |measured| at most that share "
                "of |predicted|; over-predicted: below fraction)"
            )
