"""What a sparse-attention model costs and keeps: attention_report.json (and its table).

Held-out CE of base vs sparse (overall and per task family of the predicted token), top-1 task
accuracy per family, open-edge fraction overall / per layer / per head (open gates over causal
(query, key) pairs, averaged over held-out tokens), mean open keys per query per head, and the
attention patterns of a few example prompts per family for the app.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from workbench.atomic import atomic_write_text, read_json
from workbench.circuits.evidence import attention_patterns
from workbench.errors import UserError

REPORT = "attention_report.json"


class ReportError(UserError, ValueError):
    pass


@torch.no_grad()
def measure(
    model, tokens: torch.Tensor, task_labels: np.ndarray | None = None, n_tasks: int = 1, batch_size: int = 16
) -> dict[str, torch.Tensor]:
    """Sums over held-out sequences (all float64, so processes can all-reduce them before `summarise`).

    ce/n: next-token CE; task_ce/task_n: per family of the predicted token; open [L, H]: open
    gates (all causal pairs when the model is not gated); empty / single [L, H]: query rows with no /
    exactly one open key; pairs, queries: per head.
    """
    from workbench.attention.gates import is_gated

    L, H = model.cfg.n_layers, model.cfg.n_heads
    out = {
        "ce": torch.zeros(1, dtype=torch.float64),
        "n": torch.zeros(1, dtype=torch.float64),
        "task_ce": torch.zeros(n_tasks, dtype=torch.float64),
        "task_n": torch.zeros(n_tasks, dtype=torch.float64),
        "open": torch.zeros(L, H, dtype=torch.float64),
        "empty": torch.zeros(L, H, dtype=torch.float64),
        "single": torch.zeros(L, H, dtype=torch.float64),
        "pairs": torch.zeros(1, dtype=torch.float64),
        "queries": torch.zeros(1, dtype=torch.float64),
    }
    gated = is_gated(model)
    was_training = model.training
    model.eval()

    def count(z, hook):  # z [batch, head, query, key]
        layer, keys = int(hook.name.split(".")[1]), z.sum(-1)
        out["open"][layer] += keys.sum((0, 2)).double().cpu()
        out["empty"][layer] += (keys == 0).sum((0, 2)).double().cpu()
        out["single"][layer] += (keys == 1).sum((0, 2)).double().cpu()

    hooks = [(f"blocks.{i}.attn.hook_gate", count) for i in range(L)] if gated else []
    try:
        for s in range(0, len(tokens), batch_size):
            t = tokens[s : s + batch_size].to(model.cfg.device)
            logits = model.run_with_hooks(t, fwd_hooks=hooks)
            ce = (
                torch.nn.functional.cross_entropy(
                    logits[:, :-1].flatten(0, 1).float(), t[:, 1:].flatten(), reduction="none"
                )
                .double()
                .cpu()
            )
            out["ce"] += ce.sum()
            out["n"] += ce.numel()
            if task_labels is not None:
                lab = torch.as_tensor(task_labels[s : s + batch_size, 1:]).flatten().long()
                out["task_ce"].index_add_(0, lab, ce)
                out["task_n"].index_add_(0, lab, torch.ones_like(ce))
            b, n = t.shape
            out["pairs"] += b * n * (n + 1) / 2
            out["queries"] += b * n
            if not gated:  # every causal pair; only the first query has a single key
                out["open"] += b * n * (n + 1) / 2
                out["single"] += b
    finally:
        model.train(was_training)
    return out


def summarise(sums: dict[str, torch.Tensor], task_names: list[str] | None = None) -> dict:
    open_ = sums["open"]
    pairs, queries = float(sums["pairs"]), float(sums["queries"])
    res = {
        "ce": float(sums["ce"] / sums["n"]),
        "tokens": int(sums["n"]),
        "open_fraction": float(open_.sum() / (pairs * open_.numel())),
        "open_fraction_per_layer": (open_.sum(1) / (pairs * open_.shape[1])).tolist(),
        "open_fraction_per_head": (open_ / pairs).tolist(),
        "mean_open_keys_per_query_per_head": (open_ / queries).tolist(),
        "mean_open_keys_per_query": float(open_.sum() / (queries * open_.numel())),
        "empty_row_fraction": float(sums["empty"].sum() / (queries * open_.numel())),
        "empty_row_fraction_per_head": (sums["empty"] / queries).tolist(),
        "single_key_row_fraction": float(sums["single"].sum() / (queries * open_.numel())),
    }
    if task_names:
        res["ce_per_task"] = {
            name: float(c / n)
            for name, c, n in zip(task_names, sums["task_ce"], sums["task_n"])
            if n > 0 and name != "special"
        }
    return res


def heldout(
    corpus, n: int, ctx_len: int, rank: int = 0, world: int = 1, split: str = "heldout"
) -> tuple[torch.Tensor, np.ndarray]:
    """This process's share of the first n sequences of a split: tokens [n/world, ctx] and task labels."""
    seqs = []
    for s in corpus.sequences(ctx_len, 0, split=split):
        if len(seqs) == n:
            break
        seqs.append(s)
    if len(seqs) < n:
        raise ReportError(
            f"the corpus {corpus.spec!r} has {len(seqs)} {split} sequences of {ctx_len} tokens, fewer "
            f"than eval_sequences={n}; lower eval_sequences or add text"
        )
    seqs = seqs[rank::world]
    return (
        torch.as_tensor(np.stack([s.tokens for s in seqs])),
        np.stack([s.labels["task"] for s in seqs]).astype(np.int64),
    )


@torch.no_grad()
def example_patterns(model, tokenizer, per_task: int = 2, seed: int = 0) -> dict:
    """Attention patterns [layer][head][query][key] (4 decimals) of a few held-out prompts per task family."""
    from workbench.corpus import tasks

    out = {}
    for task in tasks.QUERY_TASKS:
        rows = []
        for q in tasks.queries(task, per_task, seed=seed):
            toks = model.to_tokens(q.prompt).to(model.cfg.device)
            pats = attention_patterns(model, toks)
            rows.append(
                {
                    "prompt": q.prompt,
                    "answer": q.answer,
                    "str_tokens": model.to_str_tokens(toks[0]),
                    "patterns": np.round(pats.float().cpu().numpy(), 4).tolist(),
                }
            )
        out[task] = rows
    return out


@torch.no_grad()
def induction_heads(model, n: int = 20, seed: int = 0) -> list[list[dict]]:
    """Per layer and head, on the repeated half of induction prompts ([BOS] span span[:cut]): mean
    attention on the previous token and on the induction target (the token after the current token's
    first occurrence), the share of queries putting >= 0.9 on that one key (a clean single-key
    pattern), and the mean number of keys with nonzero attention."""
    from workbench.corpus import tasks

    L, H = model.cfg.n_layers, model.cfg.n_heads
    acc = torch.zeros(L, H, 5, dtype=torch.float64)  # prev, induction, prev clean, induction clean, keys
    count = 0
    for q in tasks.queries("induction", n, seed=seed):
        span = len(q.params["span"])
        toks = model.to_tokens(q.prompt).to(model.cfg.device)
        pats = attention_patterns(model, toks).double()
        qpos = torch.arange(span + 1, toks.shape[1])  # queries in the repeat
        prev, ind = pats[:, :, qpos, qpos - 1], pats[:, :, qpos, qpos - span + 1]
        acc[..., 0] += prev.sum(-1)
        acc[..., 1] += ind.sum(-1)
        acc[..., 2] += (prev >= 0.9).sum(-1)
        acc[..., 3] += (ind >= 0.9).sum(-1)
        acc[..., 4] += (pats[:, :, qpos] > 0).sum((-1, -2))
        count += len(qpos)
    acc /= max(count, 1)
    keys = ("prev_token_attention", "induction_attention", "prev_token_clean", "induction_clean", "open_keys")
    return [[{k: round(float(v), 4) for k, v in zip(keys, acc[layer, h])} for h in range(H)] for layer in range(L)]


def build_report(
    base,
    sparse,
    corpus,
    info: dict,
    eval_sequences: int = 64,
    ctx_len: int | None = None,
    n_queries: int = 100,
    examples_per_task: int = 2,
) -> dict:
    """The full report of a sparse model against its base (single process)."""
    from workbench.models.card import task_accuracy

    ctx_len = ctx_len or sparse.cfg.n_ctx
    tokens, labels = heldout(corpus, eval_sequences, ctx_len)
    names = list(corpus.label_names["task"])
    base_m = summarise(measure(base, tokens, labels, len(names)), names)
    sparse_m = summarise(measure(sparse, tokens, labels, len(names)), names)
    synthetic_vocab = corpus.spec.startswith("synthetic")
    acc = {}
    if synthetic_vocab:
        acc = {"base": task_accuracy(base, n_queries), "sparse": task_accuracy(sparse, n_queries)}
    return {
        **info,
        "heldout": {"sequences": eval_sequences, "ctx_len": ctx_len, "corpus": corpus.spec},
        "ce": {"base": base_m["ce"], "sparse": sparse_m["ce"], "increase": sparse_m["ce"] - base_m["ce"]},
        "ce_per_task": {"base": base_m.get("ce_per_task", {}), "sparse": sparse_m.get("ce_per_task", {})},
        "task_accuracy": acc,
        "task_accuracy_queries": n_queries if acc else 0,
        **{
            k: sparse_m[k]
            for k in (
                "open_fraction",
                "open_fraction_per_layer",
                "open_fraction_per_head",
                "mean_open_keys_per_query_per_head",
                "mean_open_keys_per_query",
                "empty_row_fraction",
                "empty_row_fraction_per_head",
                "single_key_row_fraction",
            )
        },
        "induction_heads": {"base": induction_heads(base), "sparse": induction_heads(sparse)}
        if synthetic_vocab
        else {},
        "examples": {
            "base": example_patterns(base, base.tokenizer, examples_per_task) if synthetic_vocab else {},
            "sparse": example_patterns(sparse, sparse.tokenizer, examples_per_task) if synthetic_vocab else {},
        },
    }


def write_report(report: dict, folder: str | Path) -> Path:
    path = Path(folder) / REPORT
    atomic_write_text(path, json.dumps(report, indent=1))
    return path


def read_report(folder: str | Path) -> dict:
    """A saved report that `format_report` can print; a missing, damaged or incomplete file is a ReportError."""
    path = Path(folder) / REPORT
    if not path.is_file():
        raise ReportError(
            f"{path} does not exist; {folder} is not a sparse-attention model folder "
            "(make one with `workbench attention train`)"
        )
    way_out = "remake it with `workbench attention sparsify`"
    r = read_json(path, ReportError, way_out)
    try:
        format_report(r)  # every part the tables print is there, of the right type
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        raise ReportError(f"{path} is incomplete or damaged ({type(e).__name__}: {e}); {way_out}") from None
    return r


def format_report(r: dict) -> str:
    """The report as plain-text tables (what `workbench attention report` prints)."""
    met = "met" if r.get("constraint_met") else "NOT MET"
    lines = [
        f"{r.get('model', '?')} from {r.get('base_model', '?')}: constraint {met} "
        f"(CE target {r.get('ce_target', float('nan')):.4f} = base {r.get('ce_base', float('nan')):.4f} + "
        f"tolerance {r.get('tolerance', float('nan'))})",
        f"held-out CE: base {r['ce']['base']:.4f}  sparse {r['ce']['sparse']:.4f}  (+{r['ce']['increase']:.4f})",
        f"open edges: {r['open_fraction']:.2%} of causal pairs; mean open keys per query per head "
        f"{r['mean_open_keys_per_query']:.2f}",
        *(
            [
                f"query rows with no open key: {r['empty_row_fraction']:.2%} (empty_row="
                f"{r.get('config', {}).get('gates', {}).get('empty_row', '?')}); with exactly one: "
                f"{r['single_key_row_fraction']:.2%}"
            ]
            if "empty_row_fraction" in r
            else []
        ),
        "",
        f"{'family':<14}{'CE base':>9}{'CE sparse':>11}{'acc base':>10}{'acc sparse':>12}",
    ]
    acc = r.get("task_accuracy") or {}
    tasks = sorted(set(r["ce_per_task"]["base"]) | set(acc.get("base", {})))
    for t in tasks:
        cb, cs = r["ce_per_task"]["base"].get(t), r["ce_per_task"]["sparse"].get(t)
        ab, as_ = acc.get("base", {}).get(t), acc.get("sparse", {}).get(t)
        f = lambda v, fmt: format(v, fmt) if v is not None else "-"  # noqa: E731
        lines.append(f"{t:<14}{f(cb, '.4f'):>9}{f(cs, '.4f'):>11}{f(ab, '.1%'):>10}{f(as_, '.1%'):>12}")
    lines += ["", "open fraction per layer / head (mean open keys per query):"]
    for i, (lf, heads, keys) in enumerate(
        zip(r["open_fraction_per_layer"], r["open_fraction_per_head"], r["mean_open_keys_per_query_per_head"])
    ):
        cells = "  ".join(f"h{h} {v:6.2%} ({k:.2f})" for h, (v, k) in enumerate(zip(heads, keys)))
        lines.append(f"  layer {i}: {lf:6.2%}   {cells}")
    ih = r.get("induction_heads") or {}
    if ih:
        lines += [
            "",
            "induction prompts, repeated half: attention on the previous token / the induction target "
            "(share of queries with >= 0.9 on it), open keys per query; base -> sparse:",
        ]
        for i, (lb, ls) in enumerate(zip(ih["base"], ih["sparse"])):
            for h, (b, s) in enumerate(zip(lb, ls)):
                lines.append(
                    f"  a{i}.h{h}: prev {b['prev_token_attention']:.2f} ({b['prev_token_clean']:.0%}) -> "
                    f"{s['prev_token_attention']:.2f} ({s['prev_token_clean']:.0%})   induction "
                    f"{b['induction_attention']:.2f} ({b['induction_clean']:.0%}) -> "
                    f"{s['induction_attention']:.2f} ({s['induction_clean']:.0%})   keys "
                    f"{b['open_keys']:.1f} -> {s['open_keys']:.1f}"
                )
    return "\n".join(lines)
