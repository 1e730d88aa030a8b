"""Train the embedded model on the synthetic corpus, reproducibly from a seed (nanoGPT-style loop).

`workbench model train` calls `train_tiny`; the result (weights, config, tokenizer, model card with
held-out task accuracy) is what data/models/tiny holds.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm
from transformer_lens import HookedTransformer, HookedTransformerConfig

from workbench.corpus.synthetic import QUERY_TASKS, SyntheticCorpus, queries, vocabulary
from workbench.models import save
from workbench.models.tokenizer import build_tokenizer


@dataclass
class TinyConfig:
    n_layers: int = 4
    d_model: int = 128
    n_heads: int = 4
    d_mlp: int = 512
    n_ctx: int = 64
    steps: int = 4000
    batch_size: int = 32
    lr: float = 1e-3
    warmup: int = 200
    weight_decay: float = 0.05
    seed: int = 0
    eval_queries: int = 200


def build(cfg: TinyConfig, tokenizer) -> HookedTransformer:
    ht = HookedTransformerConfig(
        n_layers=cfg.n_layers, d_model=cfg.d_model, n_heads=cfg.n_heads, d_head=cfg.d_model // cfg.n_heads,
        d_mlp=cfg.d_mlp, n_ctx=cfg.n_ctx, d_vocab=len(tokenizer), act_fn="gelu", normalization_type="LN",
        model_name="workbench-tiny", seed=cfg.seed, device="cpu", tokenizer_prepends_bos=False,
        default_prepend_bos=True)
    return HookedTransformer(ht, tokenizer=tokenizer)


def _lr(step: int, cfg: TinyConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def _checks(n: int, seed: int):
    """(row name, queries, is-correct) for the model card. Addition is reported three ways: exact on
    pairs never seen in training, within +-2 on those pairs, and exact on pairs seen in training."""
    exact = lambda q, pred: pred == q.answer  # noqa: E731
    correct = {"greater_than": lambda q, pred: pred.isdigit() and int(pred) > q.params["x"]}  # any larger number
    rows = [(t, queries(t, n, seed=seed, split="heldout"), correct.get(t, exact)) for t in QUERY_TASKS]
    unseen = rows[QUERY_TASKS.index("addition")][1]
    rows.append(("addition_within_2", unseen, lambda q, pred: pred.isdigit() and abs(int(pred) - int(q.answer)) <= 2))
    rows.append(("addition_seen_pairs", queries("addition", n, seed=seed, split="train"), exact))
    return rows


@torch.no_grad()
def task_accuracy(model: HookedTransformer, n: int = 200, seed: int = 0) -> dict[str, float]:
    """Top-1 accuracy on held-out queries of each task family (prompts padded on the right)."""
    tok = model.tokenizer
    out = {}
    for name, qs, correct in _checks(n, seed):
        ids = [[tok.bos_token_id] + tok(q.prompt, add_special_tokens=False)["input_ids"] for q in qs]
        width = max(map(len, ids))
        batch = torch.full((len(ids), width), tok.pad_token_id, dtype=torch.long)
        for i, row in enumerate(ids):
            batch[i, : len(row)] = torch.tensor(row)
        logits = model(batch.to(model.cfg.device))
        last = logits[torch.arange(len(ids)), torch.tensor([len(r) - 1 for r in ids])]
        preds = tok.convert_ids_to_tokens(last.argmax(-1).tolist())
        out[name] = float(np.mean([correct(q, p) for q, p in zip(qs, preds)]))
    return out


def chance_accuracy() -> dict[str, float]:
    """What a guesser that knows the answer type but not the answer would score (model card baseline)."""
    gt = float(np.mean([(99 - q.params["x"]) / 100 for q in queries("greater_than", 200, split="heldout")]))
    return {"ioi": 1 / 2, "induction": 1 / 8, "greater_than": gt, "addition": 1 / 79, "facts": 1 / 6,
            "addition_within_2": 5 / 79, "addition_seen_pairs": 1 / 79}


def train_tiny(out_dir: str | Path, cfg: TinyConfig = TinyConfig(), progress: bool = True) -> dict:
    torch.manual_seed(cfg.seed)
    tokenizer = build_tokenizer(vocabulary())
    model = build(cfg, tokenizer)
    corpus = SyntheticCorpus(tokenizer, seed=cfg.seed)
    stream = corpus.sequences(cfg.n_ctx)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(0.9, 0.98))
    t0, losses = time.time(), []
    bar = tqdm(range(cfg.steps), desc="train tiny", disable=not progress)
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
    model.eval()
    acc = task_accuracy(model, cfg.eval_queries)
    card = {"train_config": asdict(cfg), "final_train_loss": float(np.mean(losses[-100:])),
            "train_seconds": round(time.time() - t0, 1), "heldout_task_accuracy": acc, "chance_accuracy": chance_accuracy(),
            "n_params": sum(p.numel() for p in model.parameters())}
    save(model, out_dir, {"workbench": card})
    write_card(Path(out_dir), card)
    return card


def write_card(out: Path, card: dict) -> None:
    acc, chance = card["heldout_task_accuracy"], card["chance_accuracy"]
    rows = "\n".join(f"| {t} | {acc[t]:.1%} | {chance[t]:.1%} |" for t in acc)
    c = card["train_config"]
    (out / "README.md").write_text(f"""# workbench-tiny: the embedded model

A TransformerLens HookedTransformer ({c['n_layers']} layers, d_model {c['d_model']}, {c['n_heads']} heads,
d_mlp {c['d_mlp']}, n_ctx {c['n_ctx']}, LayerNorm, GELU; {card['n_params']:,} parameters) trained from seed
{c['seed']} on the workbench's synthetic corpus ({c['steps']} steps of {c['batch_size']} x {c['n_ctx']} tokens,
AdamW lr {c['lr']}, {card['train_seconds']} s on CPU). Word-level tokenizer: one word, one token.
Rebuild it with `workbench model train` (same seed, same weights up to float nondeterminism).

Final training loss: {card['final_train_loss']:.3f} nats/token.

## Held-out task accuracy (top-1 at the answer position, {c['eval_queries']} queries per task)

| task | accuracy | chance baseline |
| --- | --- | --- |
{rows}

Chance baselines: IOI = picking one of the two names; induction = one of the span's words;
greater-than = a uniform random number 0-99 (any number above the start counts as correct);
addition = one of the 79 possible sums. The `addition` row uses operand pairs never seen in
training (10% of pairs are reserved); `addition_within_2` scores the same predictions as right when
they are within 2 of the sum, and `addition_seen_pairs` uses pairs that occur in training. The model
places unseen sums on the number line (almost always within 2) but does not get them exactly: it
has memorised a table rather than learnt carrying. facts = one of the 6 values of the attribute.

```json
{json.dumps(card, indent=2)}
```
""")
