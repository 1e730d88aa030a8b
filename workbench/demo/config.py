"""The demo's sizes (`workbench demo`'s flags) and the dictionaries it trains: light, so the CLI builds its flags
without importing the steps."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from workbench.cache.config import HarvestConfig
from workbench.config import Config
from workbench.corpus.tasks import QUERY_TASKS
from workbench.errors import BadValueError
from workbench.sae.config import SAEConfig

DEMO_HOOK = "blocks.2.hook_resid_post"
DEMO_SAES = (
    SAEConfig(architecture="topk", k=16, expansion=8),
    SAEConfig(architecture="matryoshka", k=16, expansion=8),
    SAEConfig(architecture="block_topk", expansion=8, block_size=4, n_active_blocks=4),
    SAEConfig(architecture="topk", k=16, expansion=8, scaffold_rank=8, name="topk-scaffold"),
)
DEMO_TRANSCODER = SAEConfig(architecture="topk", k=16, expansion=8)
CACHE, SPARSE, TRANSCODERS = "tiny-synthetic", "tiny-sparse", "tiny-topk"
SPARSE_RUN = "tiny-sparse-demo"  # the demo's short trainer run; circuits and compare use the embedded SPARSE
SAE_BATCH = 2048  # tokens per step of the demo's SAEs


@dataclass
class DemoConfig(Config):
    """Demo-scale sizes: every step of the workbench in minutes on two CPU cores."""

    error = BadValueError

    cache_tokens: int = field(
        default=200_000, metadata={"min": 1, "help": "activation rows in the cache (train + held-out)"}
    )
    sae_tokens: int = field(default=1_000_000, metadata={"min": 1, "help": "training tokens per SAE"})
    transcoder_tokens: int = field(
        default=400_000, metadata={"min": 1, "help": "training tokens of the transcoder set (each layer's)"}
    )
    sparsify_steps: int = field(
        default=300, metadata={"min": 1, "help": "sparse-attention post-training steps (demo scale)"}
    )
    sparsify_eval_every: int = field(
        default=50, metadata={"min": 1, "help": "steps between held-out checks of the constraint"}
    )
    sparsify_eval_sequences: int = field(default=32, metadata={"min": 1, "help": "held-out sequences of each check"})
    report_queries: int = field(
        default=40, metadata={"min": 1, "help": "queries per family for the sparse model's accuracy"}
    )
    queries: int = field(default=1, metadata={"min": 1, "help": "query circuits per task family, in each model"})
    compare_queries: int = field(
        default=1, metadata={"min": 1, "help": "queries per task family for `attention compare`"}
    )
    target_ndf: float = field(
        default=0.8,
        metadata={"min": 0, "max": 1, "open": "min", "help": "NDF the circuits of both models reach (equal NDF)"},
    )
    samples: int = field(default=2, metadata={"help": "paraphrases and resampled counterfactuals per query"})
    tasks: str = field(
        default="ioi,induction,greater_than,addition,facts", metadata={"help": "task families, comma separated"}
    )

    def check(self) -> None:
        """Token counts too small for one SAE batch would fail only after the cache is harvested."""
        self.families()  # an unknown family fails when the config is made, before any work
        train_share = 1 - HarvestConfig().heldout_fraction
        need = math.ceil(2 * SAE_BATCH / train_share)  # two batches of train rows: the sampler drops a few
        if self.cache_tokens < need:
            raise BadValueError(
                f"cache_tokens={self.cache_tokens} is too few for the demo's SAEs, whose batches take {SAE_BATCH} "
                f"train rows: --cache-tokens must be at least {need} ({train_share:.0%} of it is train); "
                "raise --cache-tokens"
            )
        for name in ("sae_tokens", "transcoder_tokens"):
            flag = "--" + name.replace("_", "-")
            if getattr(self, name) < SAE_BATCH:
                raise BadValueError(
                    f"{name}={getattr(self, name)} is less than one SAE batch: {flag} must be at least "
                    f"{SAE_BATCH}; raise {flag}"
                )

    def families(self) -> list[str]:
        out = [t.strip() for t in self.tasks.split(",") if t.strip()]
        bad = [t for t in out if t not in QUERY_TASKS]
        if bad or not out:
            raise BadValueError(f"demo tasks {bad or self.tasks!r} unknown; valid: {', '.join(QUERY_TASKS)}")
        return out
