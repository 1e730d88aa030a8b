"""The embedded model's card: held-out task accuracy, head-detector tables, verbatim-overlap audit; and the
shorter card of an imported model (its source, the source's quantization, the conversion check).

Every figure is measured on prompts whose defining combination is reserved from training (see
workbench.corpus.tasks), and `verbatim_overlap` checks that claim against the regenerated training
stream itself rather than trusting the construction.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import torch

from workbench.atomic import atomic_write_text
from workbench.corpus.synthetic import SyntheticCorpus
from workbench.corpus.tasks import IOI_TEMPLATES, QUERY_TASKS, accepts, queries
from workbench.corpus.vocab import vocabulary
from workbench.models import heads

HEAD_PATTERNS = ("induction_head", "previous_token_head")


def _last_logits(model, prompts: list[str]) -> torch.Tensor:
    """Logits at each prompt's last token (prompts right-padded into one batch)."""
    tok = model.tokenizer
    ids = [[tok.bos_token_id] + tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    batch = torch.full((len(ids), max(map(len, ids))), tok.pad_token_id, dtype=torch.long)
    for i, row in enumerate(ids):
        batch[i, : len(row)] = torch.tensor(row)
    logits = model(batch.to(model.cfg.device))
    return logits[torch.arange(len(ids)), torch.tensor([len(r) - 1 for r in ids])]


@torch.no_grad()
def task_accuracy(model, n: int = 200, seed: int = 0) -> dict[str, float]:
    """Top-1 accuracy at the answer position on held-out queries of each task family.

    Extra rows: `ioi_unseen_template` (the IOI template no training text uses) and
    `addition_both_digits` (greedy decoding of the whole two-digit sum on unseen operand pairs).
    """
    tok, out = model.tokenizer, {}
    for task in QUERY_TASKS:
        qs = queries(task, n, seed=seed, split="heldout")
        preds = tok.convert_ids_to_tokens(_last_logits(model, [q.prompt for q in qs]).argmax(-1).tolist())
        right = [accepts(q, p) for q, p in zip(qs, preds)]
        out[task] = float(np.mean(right))
        if task == "ioi":
            unseen = [r for q, r in zip(qs, right) if q.params["template"] == len(IOI_TEMPLATES) - 1]
            out["ioi_unseen_template"] = float(np.mean(unseen))
        if task == "addition":
            second = tok.convert_ids_to_tokens(
                _last_logits(model, [f"{q.prompt} {p}" for q, p in zip(qs, preds)]).argmax(-1).tolist()
            )
            out["addition_both_digits"] = float(
                np.mean([f"{p}{s}" == str(q.params["a"] + q.params["b"]) for q, p, s in zip(qs, preds, second)])
            )
    return out


def chance_accuracy(n: int = 200, seed: int = 0) -> dict[str, float]:
    """What a guesser that knows the answer type but not the answer would score (model-card baseline)."""
    gt = float(np.mean([(99 - q.params["x"]) / 100 for q in queries("greater_than", n, seed=seed, split="heldout")]))
    # addition: the sum of two operands in 10..49 starts with one of 2..9; both digits: one of 79 sums
    return {
        "ioi": 1 / 2,
        "ioi_unseen_template": 1 / 2,
        "induction": 1 / 8,
        "greater_than": gt,
        "addition": 1 / 8,
        "addition_both_digits": 1 / 79,
        "facts": 1 / 6,
    }


@torch.no_grad()
def head_scores(model, n_seqs: int = 20, seed: int = 0) -> dict[str, list[list[float]]]:
    """TransformerLens `detect_head` scores per (layer, head) on random-token sequences repeated twice.

    Each sequence is BOS + a span of (n_ctx - 1) // 2 uniformly random vocabulary words + the same
    span again, so it fills the context. Scores use detect_head's default 'mul' measure: the share of
    a head's attention on the pattern's entries over all rows (first-half rows cannot score for
    induction, so its maximum is about 0.5).
    """
    from transformer_lens.head_detector import detect_head

    seqs = repeated_random_text(model.cfg.n_ctx, n_seqs, seed)
    return {p: detect_head(model, seqs, p).tolist() for p in HEAD_PATTERNS}


@torch.no_grad()
def own_head_scores(model, n_seqs: int = 20, seed: int = 0) -> dict[str, list[list[float]]]:
    """The workbench's own previous-token and induction scores per (layer, head) (heads.pattern_scores, the ones
    circuit reports quote), averaged over the head detector's sequences. Unlike detect_head's 'mul' share, an
    induction score averages only the rows that have an induction target, so its maximum is 1."""
    total = {kind: np.zeros((model.cfg.n_layers, model.cfg.n_heads)) for kind in ("previous_token", "induction")}
    for text in repeated_random_text(model.cfg.n_ctx, n_seqs, seed):
        tokens = model.to_tokens(text)[0]
        scores = heads.pattern_scores(heads.attention_patterns(model, tokens), tokens)
        for kind, table in total.items():
            table += np.array(
                [[scores[f"a{li}.h{h}"][kind] for h in range(table.shape[1])] for li in range(len(table))]
            )
    return {kind: (table / n_seqs).tolist() for kind, table in total.items()}


def repeated_random_text(n_ctx: int, n_seqs: int = 20, seed: int = 0) -> list[str]:
    """The head detector's sequences: a span of (n_ctx - 1) // 2 uniformly random vocabulary words, twice."""
    rng, words = random.Random(f"head-detector/{seed}"), vocabulary()
    half = (n_ctx - 1) // 2
    return [" ".join(span + span) for span in (rng.choices(words, k=half) for _ in range(n_seqs))]


DETECTOR_THRESHOLDS = {"induction_head": 0.3, "previous_token_head": 0.5}


def detected_heads(scores: dict[str, list[list[float]]]) -> dict[str, list[str]]:
    """Heads ('aL.hH', as the circuit graph names them) whose detect_head score passes the model card's bar."""
    return {
        p: [f"a{li}.h{h}" for li, row in enumerate(scores[p]) for h, v in enumerate(row) if v >= t]
        for p, t in DETECTOR_THRESHOLDS.items()
    }


def _window_hashes(tokens: np.ndarray, length: int) -> np.ndarray:
    """Polynomial hash of every length-`length` window in each row (int64 arithmetic wraps; exact hits are
    re-checked)."""
    out = np.zeros((tokens.shape[0], tokens.shape[1] - length + 1), dtype=np.int64)
    for k in range(length):
        out = out * np.int64(1_000_003) + tokens[:, k : k + out.shape[1]]
    return out


def verbatim_overlap(tokenizer, prompts: list[str], n_sequences: int, ctx_len: int, seed: int = 0) -> list[int]:
    """How many times each prompt's tokens occur contiguously in the first n_sequences training sequences."""
    corpus = SyntheticCorpus(tokenizer, seed=seed)
    stream = corpus.sequences(ctx_len)
    train = np.stack([next(stream).tokens for _ in range(n_sequences)])
    ids = [np.asarray(tokenizer(p, add_special_tokens=False)["input_ids"], dtype=np.int64) for p in prompts]
    counts = [0] * len(prompts)
    for length in sorted({len(x) for x in ids}):
        which = [i for i, x in enumerate(ids) if len(x) == length]
        hashes = _window_hashes(train, length)
        targets = _window_hashes(np.stack([ids[i] for i in which]), length)[:, 0]
        rows, cols = np.nonzero(np.isin(hashes, targets))
        for r, c in zip(rows, cols):
            for i in which:
                if np.array_equal(train[r, c : c + length], ids[i]):
                    counts[i] += 1
    return counts


def audit(tokenizer, n: int, n_sequences: int, ctx_len: int, seed: int = 0) -> dict:
    """Verbatim overlap of every held-out evaluation prompt with the training stream, per task."""
    per_task = {}
    for task in QUERY_TASKS:
        prompts = [q.prompt for q in queries(task, n, seed=seed, split="heldout")]
        counts = verbatim_overlap(tokenizer, prompts, n_sequences, ctx_len, seed)
        per_task[task] = {"prompts": len(prompts), "found_in_training": int(sum(c > 0 for c in counts))}
    return {"training_sequences_checked": n_sequences, "ctx_len": ctx_len, "per_task": per_task}


def model_card(model, n: int, train_sequences: int, seed: int = 0) -> dict:
    return {
        "heldout_task_accuracy": task_accuracy(model, n, seed),
        "chance_accuracy": chance_accuracy(n, seed),
        "head_detector": head_scores(model, seed=seed),
        "own_head_scores": own_head_scores(model, seed=seed),
        "verbatim_audit": audit(model.tokenizer, n, train_sequences, model.cfg.n_ctx, seed),
    }


def _head_table(scores: list[list[float]]) -> str:
    head = "| layer | " + " | ".join(f"h{h}" for h in range(len(scores[0]))) + " |"
    rule = "| --- " * (len(scores[0]) + 1) + "|"
    rows = [f"| {layer} | " + " | ".join(f"{s:.3f}" for s in row) + " |" for layer, row in enumerate(scores)]
    return "\n".join([head, rule, *rows])


TRAINING_DATA = """## Training data

The synthetic corpus (`workbench/corpus/`): short stories, documents of five task families (each a
query followed by its answer) and repeated random-token sequences (a span of 4-60 uniformly random
vocabulary words followed by the same span), which is how general induction heads form. Every task
family reserves combinations that training text never contains (`workbench.corpus.tasks.is_heldout`):
one whole IOI template of eleven (`ioi_unseen_template` below) plus 1 in 6 (template, name pair)
combinations of the other ten; 1 in 8 induction spans; a third
of the start numbers of each greater-than template; 1 in 10 addition operand pairs; and for each
(entity, attribute) fact one of its three phrasings (the fact itself is seen in the other two).

Addition is written digit by digit ("2 3 plus 4 5 equals 6 8"), so the model can learn a carrying
algorithm over digits instead of a table of 1,600 two-token sums (the previous model, with one token per
number, scored 0% on unseen pairs). The query's answer is the sum's first digit, which needs the carry
from the ones digits; `addition_both_digits` decodes the whole sum greedily.

Positions are rotary: with learned absolute position embeddings the same recipe formed neither
previous-token nor induction heads in 4,000 steps (best detect_head induction score 0.017; the
second half of a repeated random sequence was predicted no better than the first); with rotary
positions both formed (by step 1,750 in a 4,000-step trial run). An earlier 4,000-step run with five
training IOI templates reached 83% on IOI (69% on the unseen template) and 89.5% on induction; the
embedded `tiny` model was then trained with ten training IOI templates for 8,000 steps.

"""  # the card's fixed account of the corpus and the recipe behind this model


def _share(x: float) -> str:
    return "n/a (no query)" if np.isnan(x) else f"{x:.1%}"


def _spent(card: dict) -> str:
    """Training time. Cards before `cpu_seconds` recorded wall time only, which counts waits on a shared machine:
    wall x threads is then an upper bound on the CPU time, and says so (tiny's card has no thread count: 2 cores)."""
    threads, s = card.get("threads", 2), card["train_seconds"]
    if "cpu_seconds" in card:
        return f"{s} s wall on {threads} CPU thread(s), {card['cpu_seconds'] / 3600:.2f} CPU hours (process CPU time)"
    return f"{s} s wall on {threads} CPU thread(s), at most {s * threads / 3600:.2f} CPU hours (CPU time not recorded)"


def _own_tables(card: dict) -> str:
    """The card's section of the workbench's own head scores (older cards have none: nothing)."""
    own = card.get("own_head_scores")
    if own is None:
        return ""
    return f"""
## Attention heads (the workbench's own scores, the same sequences)

`workbench.models.heads.pattern_scores`, the scores circuit reports quote: previous token = mean
attention from each position to the one before it; induction = mean attention from a repeated token to the
token after its previous occurrence, over the rows that have one (so its maximum is 1).

Induction:

{_head_table(own["induction"])}

Previous token:

{_head_table(own["previous_token"])}
"""


def write_card(out: Path, card: dict) -> None:
    acc, chance, c = card["heldout_task_accuracy"], card["chance_accuracy"], card["train_config"]
    audit_rows = "\n".join(
        f"| {t} | {a['prompts']} | {a['found_in_training']} |" for t, a in card["verbatim_audit"]["per_task"].items()
    )
    rows = "\n".join(f"| {t} | {_share(acc[t])} | {chance[t]:.1%} |" for t in acc)
    hd = card["head_detector"]
    atomic_write_text(
        out / "README.md",
        f"""# workbench-{out.name}{": the embedded model" if out.name == "tiny" else ""}

A TransformerLens HookedTransformer ({c["n_layers"]} layers, d_model {c["d_model"]}, {c["n_heads"]} heads,
d_mlp {c["d_mlp"]}, n_ctx {c["n_ctx"]}, {c.get("positional_embedding", "standard")} positions, LayerNorm, GELU;
{card["n_params"]:,} parameters) trained from seed
{c["seed"]} on the workbench's synthetic corpus ({c["steps"]} steps of {c["batch_size"]} x {c["n_ctx"]} tokens,
{c["steps"] * c["batch_size"] * c["n_ctx"]:,} training tokens, AdamW lr {c["lr"]}, {_spent(card)}).
Word-level tokenizer: one word, one token. Rebuild it with `{card.get("train_command", "workbench model train --out DIR")}`
(same seed, same weights up to float nondeterminism).

Final training loss: {card["final_train_loss"]:.3f} nats/token.

{TRAINING_DATA}## Held-out task accuracy (top-1 at the answer position, {c["eval_queries"]} queries per task)

| task | accuracy | chance baseline |
| --- | --- | --- |
{rows}

Chance baselines: IOI = one of the two names; induction = one of the span's words; greater-than = a
uniform random number 0-99 (any number above the start counts as correct); addition = one of the 8
possible first digits (2-9), both digits = one of the 79 sums; facts = one of the 6 values of the attribute.

## Verbatim-overlap audit

Every evaluation prompt above was searched, token for token, in the regenerated training stream (all
{card["verbatim_audit"]["training_sequences_checked"]:,} sequences of {card["verbatim_audit"]["ctx_len"]} tokens the model was trained on;
`workbench.models.card.verbatim_overlap`: a rolling hash over every window of the prompt's length,
hits re-checked exactly).

| task | held-out prompts | found verbatim in training |
| --- | --- | --- |
{audit_rows}

## Attention heads (TransformerLens `detect_head`, random tokens repeated twice)

Twenty sequences of BOS + {(c["n_ctx"] - 1) // 2} uniformly random vocabulary words + the same words again.
Scores are detect_head's default 'mul' measure (share of the head's attention on the pattern); for
induction only second-half rows can score, so the maximum is about 0.5.

Induction (attention to the token after the previous occurrence of the current token):

{_head_table(hd["induction_head"])}

Previous token:

{_head_table(hd["previous_token_head"])}
{_own_tables(card)}
```json
{json.dumps({k: v for k, v in card.items() if k not in ("head_detector", "own_head_scores")}, indent=2)}
```
""",
    )


def _quantization_line(q: dict | None) -> str:
    if not q:
        return "Source weights: unquantized (read as stored)."
    types = ", ".join(f"{n} {t}" for t, n in q["tensor_types"].items())
    return (
        f"Source quantization: **{q['file_type']}** (GGUF tensors: {types}), de-quantized to float32 on import; "
        "the weights keep the quantization's rounding, so they are not the unquantized model's."
    )


def write_import_card(out: Path, model, summary: dict, config: dict) -> None:
    """README.md of an imported model: where it came from, how it was quantized, and how faithful the conversion is."""
    c = model.cfg
    atomic_write_text(
        out / "README.md",
        f"""# {out.name}: an imported model

Imported by `workbench model import {summary["source"]}` from a {summary.get("format", "Hugging Face")} source
(sha256 {summary["source_sha256"]}): {summary["architecture"]}, {c.n_layers} layers, d_model {c.d_model},
{c.n_heads} heads ({c.n_key_value_heads or c.n_heads} key/value heads) x d_head {c.d_head}, d_mlp {c.d_mlp},
vocabulary {c.d_vocab}, {sum(p.numel() for p in model.parameters()):,} parameters, stored as {config["dtype"]}.
The tokenizer is the source's own (tokenizer.json beside the weights).

{_quantization_line(summary.get("quantization"))}

Conversion to TransformerLens without weight processing; max |logit difference| against the transformers
model on random tokens: {summary["logit_max_abs_diff"]:.2g} (tolerance {config["equivalence_tolerance"]:g}).

```json
{json.dumps(summary, indent=2)}
```
""",
    )
