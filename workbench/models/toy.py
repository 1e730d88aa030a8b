"""Train the embedded model on the synthetic corpus, reproducibly from a seed (nanoGPT-style loop).

`workbench model train` calls `train_tiny`; the result (weights, config, tokenizer, model card with
held-out task accuracy, head-detector tables and the verbatim-overlap audit) is what
data/models/tiny holds. Training checkpoints every `checkpoint_every` steps and `resume=True`
continues from the last checkpoint to the same result: the data stream is indexed by step.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm
from transformer_lens import HookedTransformer, HookedTransformerConfig

from workbench import checkpoint
from workbench.config import Config
from workbench.corpus.synthetic import SyntheticCorpus
from workbench.corpus.vocab import vocabulary
from workbench.errors import ConfigError
from workbench.models import EMBEDDED, save
from workbench.models.card import model_card, write_card
from workbench.models.tokenizer import build_tokenizer

CHECKPOINT = "checkpoint.pt"


@dataclass
class TinyConfig(Config):
    n_layers: int = field(default=4, metadata={"min": 1})
    d_model: int = field(default=128, metadata={"min": 1})
    n_heads: int = field(default=4, metadata={"min": 1})
    d_mlp: int = field(default=512, metadata={"min": 1})
    n_ctx: int = field(default=128, metadata={"min": 24})  # task prompts are up to 20 tokens
    # rotary: relative positions make previous-token heads, and so induction heads, cheap to learn; with
    # learned absolute positions ("standard") neither formed in 4,000 steps (see the model card)
    positional_embedding: str = field(default="rotary", metadata={"choices": ("rotary", "standard")})
    steps: int = field(default=8000, metadata={"min": 1})
    batch_size: int = field(default=16, metadata={"min": 1})
    lr: float = field(default=1e-3, metadata={"min": 0, "max": 1, "open": "both"})
    warmup: int = 200
    weight_decay: float = field(default=0.05, metadata={"min": 0})
    seed: int = 0
    eval_queries: int = field(default=200, metadata={"min": 1})
    checkpoint_every: int = field(default=250, metadata={"min": 1})

    def check(self) -> None:
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if not self.warmup < self.steps:
            raise ConfigError(f"warmup must be in [0, steps={self.steps}), got {self.warmup}")


def train_command(cfg: TinyConfig) -> str:
    """The `workbench model train` line that reproduces a model: every flag whose value is not the default."""
    default = asdict(TinyConfig())
    flags = [f"--{k.replace('_', '-')} {v}" for k, v in asdict(cfg).items() if v != default[k]]
    return " ".join(["workbench model train --out DIR", *flags])


def build(cfg: TinyConfig, tokenizer, name: str = "tiny") -> HookedTransformer:
    ht = HookedTransformerConfig(
        n_layers=cfg.n_layers,
        d_model=cfg.d_model,
        n_heads=cfg.n_heads,
        d_head=cfg.d_model // cfg.n_heads,
        d_mlp=cfg.d_mlp,
        n_ctx=cfg.n_ctx,
        d_vocab=len(tokenizer),
        act_fn="gelu",
        normalization_type="LN",
        positional_embedding_type=cfg.positional_embedding,
        rotary_dim=cfg.d_model // cfg.n_heads,
        model_name=f"workbench-{name}",
        seed=cfg.seed,
        device="cpu",
        tokenizer_prepends_bos=False,
        default_prepend_bos=True,
    )
    return HookedTransformer(ht, tokenizer=tokenizer)


def _lr(step: int, cfg: TinyConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def _check_out(out: Path, overwrite: bool, resume: bool) -> None:
    """Refuse to write over anything the user did not ask to replace (the shipped model included)."""
    if resume:
        if not (out / CHECKPOINT).is_file():
            raise ConfigError(f"--resume: no {CHECKPOINT} in {out}; start without --resume")
        return
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        shipped = " (the shipped embedded model)" if out.resolve() == EMBEDDED["tiny"].resolve() else ""
        raise ConfigError(
            f"--out {out}{shipped} is not empty; pass --overwrite to replace the model files there, "
            "or choose an empty folder"
        )


def _optimizer(model: HookedTransformer, cfg: TinyConfig) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.98),
    )


_ZERO = {"seconds": 0.0, "cpu_seconds": 0.0}


class _Clock:
    """Wall and process CPU time spent training, carried across resumes. On a shared machine wall time counts the
    waits too; a checkpoint written before CPU time was recorded leaves it unknown (NaN), and the card omits it."""

    def __init__(self, before: dict):
        self.before, self.wall, self.cpu = before, time.time(), time.process_time()

    def spent(self) -> dict:
        return {
            "seconds": self.before["seconds"] + time.time() - self.wall,
            "cpu_seconds": self.before["cpu_seconds"] + time.process_time() - self.cpu,
        }


def _card_times(spent: dict) -> dict:
    times = {"train_seconds": round(spent["seconds"], 1)}
    if not math.isnan(spent["cpu_seconds"]):
        times["cpu_seconds"] = round(spent["cpu_seconds"], 1)
    return times


def _save_checkpoint(out: Path, model, opt, cfg: TinyConfig, step: int, losses: list[float], spent: dict) -> None:
    state = {
        "model": model.state_dict(),
        "opt": opt.state_dict(),
        "config": asdict(cfg),
        "step": step,
        "losses": torch.tensor(losses),
        **spent,  # "seconds" (wall) and "cpu_seconds" so far
    }
    checkpoint.write(out / CHECKPOINT, state)


def _load_checkpoint(out: Path, model, opt, cfg: TinyConfig) -> tuple[int, list[float], dict]:
    state = checkpoint.read(out / CHECKPOINT)
    diff = checkpoint.config_diff(state["config"], asdict(cfg))
    if diff:
        raise ConfigError(
            f"--resume: the checkpoint in {out} was made with another config ({'; '.join(diff)}); "
            "pass the same flags or start afresh"
        )
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    spent = {"seconds": float(state["seconds"]), "cpu_seconds": float(state.get("cpu_seconds", "nan"))}
    return int(state["step"]), state["losses"].tolist(), spent


def train_tiny(
    out_dir: str | Path,
    cfg: TinyConfig | None = None,
    progress: bool = True,
    overwrite: bool = False,
    resume: bool = False,
) -> dict:
    cfg = cfg or TinyConfig()
    out = Path(out_dir)
    _check_out(out, overwrite, resume)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    tokenizer = build_tokenizer(vocabulary())
    model = build(cfg, tokenizer, out.name)
    opt = _optimizer(model, cfg)
    start, losses, spent = _load_checkpoint(out, model, opt, cfg) if resume else (0, [], _ZERO)
    corpus = SyntheticCorpus(tokenizer, seed=cfg.seed)
    stream = corpus.sequences(cfg.n_ctx, start=start * cfg.batch_size)
    clock = _Clock(spent)
    bar = tqdm(range(start, cfg.steps), desc=f"train {out.name}", disable=not progress, initial=start, total=cfg.steps)
    for step in bar:
        tokens = torch.from_numpy(np.stack([next(stream).tokens for _ in range(cfg.batch_size)]))
        for g in opt.param_groups:
            g["lr"] = _lr(step, cfg)
        loss = model(tokens, return_type="loss")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step % 50 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-50:]):.3f}")
        if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < cfg.steps:
            _save_checkpoint(out, model, opt, cfg, step + 1, losses, clock.spent())
    model.eval()
    card = model_card(model, cfg.eval_queries, train_sequences=cfg.steps * cfg.batch_size, seed=cfg.seed)
    card.update(
        train_config=asdict(cfg),
        final_train_loss=float(np.mean(losses[-100:])),
        **_card_times(clock.spent()),
        n_params=sum(p.numel() for p in model.parameters()),
        threads=torch.get_num_threads(),
        train_command=train_command(cfg),
    )
    save(model, out, {"workbench": card})
    write_card(out, card)
    (out / CHECKPOINT).unlink(missing_ok=True)
    return card
