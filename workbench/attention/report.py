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

from workbench.atomic import atomic_write_text
from workbench.attention.verdict import judge, paired_difference, untouched_sequences, verdict_sequences, wilson
from workbench.errors import BadValueError, DamagedFileError, MissingInputError
from workbench.models.heads import attention_patterns
from workbench.readback import read_json

REPORT = "attention_report.json"


@torch.no_grad()
def measure(
    model, tokens: torch.Tensor, task_labels: np.ndarray | None = None, n_tasks: int = 1, batch_size: int = 16
) -> dict[str, torch.Tensor]:
    """Sums over held-out sequences (all float64, so processes can all-reduce them before `summarise`).

    ce/n: next-token CE; task_ce/task_n: per family of the predicted token; open [L, H]: open
    gates (all causal pairs when the model is not gated); empty / single [L, H]: query rows with no /
    exactly one open key; pairs, queries: per head; seq_ce [sequences]: each sequence's mean CE (not a
    sum: processes gather it) for the paired CE difference of verdict.paired_difference.
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
    seq_ce = []
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
            seq_ce.append(ce.view(len(t), -1).mean(1))
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
    out["seq_ce"] = torch.cat(seq_ce) if seq_ce else torch.zeros(0, dtype=torch.float64)
    return out


EDGE_COUNT = "causal (query, key) pairs, diagonal included: T(T+1)/2 per sequence and head"


def summarise(sums: dict[str, torch.Tensor], task_names: list[str] | None = None) -> dict:
    """Per-key figures beside every percentage: open keys per query, rows with 0 / exactly 1 open key, and T."""
    open_, empty, single = sums["open"], sums["empty"], sums["single"]
    pairs, queries = float(sums["pairs"]), float(sums["queries"])
    H = open_.shape[1]
    res = {
        "ce": float(sums["ce"] / sums["n"]),
        "tokens": int(sums["n"]),
        "ctx_len": round(2 * pairs / queries - 1) if queries else 0,  # pairs / queries = (T + 1) / 2
        "edge_count": EDGE_COUNT,
        "open_fraction": float(open_.sum() / (pairs * open_.numel())),
        "open_fraction_per_layer": (open_.sum(1) / (pairs * H)).tolist(),
        "open_fraction_per_head": (open_ / pairs).tolist(),
        "mean_open_keys_per_query": float(open_.sum() / (queries * open_.numel())),
        "mean_open_keys_per_query_per_layer": (open_.sum(1) / (queries * H)).tolist(),
        "mean_open_keys_per_query_per_head": (open_ / queries).tolist(),
        "empty_row_fraction": float(empty.sum() / (queries * open_.numel())),
        "empty_row_fraction_per_layer": (empty.sum(1) / (queries * H)).tolist(),
        "empty_row_fraction_per_head": (empty / queries).tolist(),
        "single_key_row_fraction": float(single.sum() / (queries * open_.numel())),
        "single_key_row_fraction_per_layer": (single.sum(1) / (queries * H)).tolist(),
        "single_key_row_fraction_per_head": (single / queries).tolist(),
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
        raise BadValueError(
            f"the corpus {corpus.spec!r} has {len(seqs)} {split} sequences of {ctx_len} tokens, fewer "
            f"than eval_sequences={n}; lower eval_sequences or add text"
        )
    return stack(seqs[rank::world])


def stack(seqs) -> tuple[torch.Tensor, np.ndarray]:
    """Token sequences as tokens [n, ctx] and their task labels."""
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


def accuracy_with_intervals(base, sparse, n_queries: int, seed: int = 0, base_acc: dict | None = None) -> dict:
    """Top-1 accuracy per family of both models on the same held-out queries (query seed `seed`), with Wilson
    95% intervals; base_acc: the base's task_accuracy on those queries, if already measured."""
    from workbench.corpus.tasks import IOI_TEMPLATES, queries
    from workbench.models.card import task_accuracy

    base_acc = base_acc if base_acc is not None else task_accuracy(base, n_queries, seed)
    acc = {"base": base_acc, "sparse": task_accuracy(sparse, n_queries, seed)}
    unseen = sum(q.params["template"] == len(IOI_TEMPLATES) - 1 for q in queries("ioi", n_queries, seed=seed))
    counts = {t: unseen if t == "ioi_unseen_template" else n_queries for t in acc["base"]}
    return {
        **acc,
        "queries": counts,
        "ci95": {side: {t: wilson(p, counts[t]) for t, p in acc[side].items()} for side in acc},
        "difference": {t: acc["sparse"][t] - acc["base"][t] for t in acc["base"]},
    }


PER_KEY = (
    "ctx_len",
    "edge_count",
    "open_fraction",
    "open_fraction_per_layer",
    "open_fraction_per_head",
    "mean_open_keys_per_query",
    "mean_open_keys_per_query_per_layer",
    "mean_open_keys_per_query_per_head",
    "empty_row_fraction",
    "empty_row_fraction_per_layer",
    "empty_row_fraction_per_head",
    "single_key_row_fraction",
    "single_key_row_fraction_per_layer",
    "single_key_row_fraction_per_head",
)


def build_report(
    base, sparse, corpus, info: dict, cfg, ctx_len: int | None = None, n_queries: int = 200, examples_per_task: int = 2
) -> dict:
    """The full report of a sparse model against its base (single process), judged on the fresh verdict split.

    cfg: the run's SparsifyConfig (tolerance, the selection split's size, the verdict split, the judge: the
    accuracy guard on the verdict queries and the untouched split).
    """
    ctx_len = ctx_len or sparse.cfg.n_ctx
    seqs, start = verdict_sequences(corpus, cfg.eval_sequences, cfg.verdict_sequences, ctx_len, cfg.verdict_start)
    tokens, labels = stack(seqs)
    names = list(corpus.label_names["task"])
    base_sums, sparse_sums = (measure(m, tokens, labels, len(names)) for m in (base, sparse))
    verdict = judge(paired_difference(sparse_sums.pop("seq_ce"), base_sums.pop("seq_ce")), cfg.tolerance)
    verdict["split"] = {"split": "heldout", "sequences": [start, start + len(seqs)], "ctx_len": ctx_len}
    base_m, sparse_m = summarise(base_sums, names), summarise(sparse_sums, names)
    synthetic_vocab = corpus.spec.startswith("synthetic")
    seed = cfg.judge.verdict_query_seed
    acc = accuracy_with_intervals(base, sparse, n_queries, seed) if synthetic_vocab else {}
    return {
        **info,
        "constraint_met": verdict["constraint_met"],
        "verdict": verdict,
        "heldout": {"sequences": len(seqs), "first": start, "ctx_len": ctx_len, "corpus": corpus.spec},
        "ce": {"base": base_m["ce"], "sparse": sparse_m["ce"], "increase": sparse_m["ce"] - base_m["ce"]},
        "ce_per_task": {"base": base_m.get("ce_per_task", {}), "sparse": sparse_m.get("ce_per_task", {})},
        "task_accuracy": {k: acc[k] for k in ("base", "sparse")} if acc else {},
        "task_accuracy_queries": n_queries if acc else 0,
        "task_accuracy_detail": {k: acc[k] for k in ("queries", "ci95", "difference")} if acc else {},
        "accuracy_guard": accuracy_guard(acc, cfg.judge.accuracy_drop, seed) if acc else None,
        "untouched": untouched(base, sparse, corpus, cfg, ctx_len, required=False),
        **{k: sparse_m[k] for k in PER_KEY},
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
    """A saved report that `format_report` can print; a missing file is a MissingInputError, a damaged or
    incomplete one a DamagedFileError."""
    path = Path(folder) / REPORT
    if not path.is_file():
        raise MissingInputError(
            f"{path} does not exist; {folder} is not a sparse-attention model folder "
            "(make one with `workbench attention train`)"
        )
    way_out = "remake it with `workbench attention train`"
    r = read_json(path, DamagedFileError, way_out, "attention report")
    try:
        format_report(r)  # every part the tables print is there, of the right type
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        raise DamagedFileError(f"{path} is incomplete or damaged ({type(e).__name__}: {e}); {way_out}") from None
    return r


def _saved_state_line(r: dict) -> str:
    """Which state was saved: the selection rule's, or a kept checkpoint adopted after the run (train.adopt_kept)."""
    adopted = r.get("selected_eval", {}).get("adopted_from")
    return (
        f"  saved state: step {r.get('selected_step', '?')}, chosen on the selection split (held-out sequences "
        f"0-{r.get('config', {}).get('eval_sequences', 0) - 1})"
        + (f"; adopted after the run from {adopted}" if adopted else "")
    )


def reference_side(r: dict) -> str:
    """What a report's differences are taken against: the fine-tuned control (`--control finetune`), else the
    base (the frozen base; `--control frozen` keeps the weights, so its reference is the base as well)."""
    return "control" if r.get("control") == "finetune" else "base"


def _verdict_lines(r: dict) -> list[str]:
    v = r.get("verdict")
    ref = reference_side(r)
    if not v:  # a report written before verdicts on a fresh split
        met = "met" if r.get("constraint_met") else "NOT MET"
        return [f"constraint {met} (judged on the selection split, CE target {r.get('ce_target', float('nan')):.4f})"]
    lo, hi = v["ci95"]
    first, end = v["split"]["sequences"]
    return [
        f"constraint {'met' if v['constraint_met'] else 'NOT MET'}: {v['why']}",
        f"  fresh verdict split: held-out sequences {first}-{end - 1} (n = {v['n']}), CE difference sparse - {ref} "
        f"{v['difference']:+.4f} (SE {v['se']:.4f}, 95% interval [{lo:+.4f}, {hi:+.4f}])",
        *([_against_base_line(v["against_base"])] if v.get("against_base") else []),
        _saved_state_line(r),
        *([untouched_line(r["untouched"], ref)] if r.get("untouched") else []),
        *([guard_line(r["accuracy_guard"], reference=ref)] if r.get("accuracy_guard") else []),
    ]


def _against_base_line(b: dict) -> str:
    """Under reference "both": the verdict's second difference, against the frozen base on the same split."""
    lo, hi = b["ci95"]
    return (
        f"  and against the frozen base: CE difference sparse - base {b['difference']:+.4f} (SE {b['se']:.4f}, 95% "
        f"interval [{lo:+.4f}, {hi:+.4f}]): {'met' if b['constraint_met'] else 'NOT met'}"
    )


def format_report(r: dict) -> str:
    """The report as plain-text tables (what `workbench attention report` prints)."""
    T = r.get("ctx_len") or r.get("heldout", {}).get("ctx_len", 0)
    gate = r.get("config", {}).get("gates", {})
    lines = [
        f"{r.get('model', '?')} from {r.get('base_model', '?')} (gate {gate.get('gate', gate.get('gate_input', '?'))})",
        *_verdict_lines(r),
        f"CE on the verdict split: {reference_side(r)} {r['ce']['base']:.4f}  sparse {r['ce']['sparse']:.4f}  "
        f"({r['ce']['increase']:+.4f})",
        f"open edges: {r['mean_open_keys_per_query']:.2f} open keys per query per head = {r['open_fraction']:.2%} of "
        f"causal pairs at T = {T} (count: {r.get('edge_count', 'T(T+1)/2 causal pairs per head')})",
        *(
            [
                f"query rows with no open key: {r['empty_row_fraction']:.2%} (empty_row="
                f"{gate.get('empty_row', '?')}); with exactly one: {r['single_key_row_fraction']:.2%}"
            ]
            if "empty_row_fraction" in r
            else []
        ),
    ]
    return "\n".join([*lines, "", *_task_lines(r), "", *_head_lines(r, T), *_induction_lines(r)])


def _task_lines(r: dict) -> list[str]:
    acc = r.get("task_accuracy") or {}
    ci = (r.get("task_accuracy_detail") or {}).get("ci95", {})
    ref = reference_side(r)  # the columns named "base" in the report hold the reference's figures
    lines = [
        f"{'family':<22}{'CE ' + ref:>12}{'CE sparse':>11}{'acc ' + ref:>12}{'acc sparse':>12}"
        f"{'  95% interval (sparse)':<24}"
    ]
    f = lambda v, fmt: format(v, fmt) if v is not None else "-"  # noqa: E731
    for t in sorted(set(r["ce_per_task"]["base"]) | set(acc.get("base", {}))):
        cb, cs = r["ce_per_task"]["base"].get(t), r["ce_per_task"]["sparse"].get(t)
        ab, as_ = acc.get("base", {}).get(t), acc.get("sparse", {}).get(t)
        iv = ci.get("sparse", {}).get(t)
        cell = f"  [{iv[0]:.1%}, {iv[1]:.1%}]" if iv else ""
        lines.append(f"{t:<22}{f(cb, '.4f'):>12}{f(cs, '.4f'):>11}{f(ab, '.1%'):>12}{f(as_, '.1%'):>12}{cell}")
    if acc:
        seed = (r.get("accuracy_guard") or {}).get("query_seed", 0)
        lines.append(
            f"(accuracy on {r.get('task_accuracy_queries', '?')} held-out queries per family, query seed {seed})"
        )
    return lines


def _head_lines(r: dict, T: int) -> list[str]:
    """Per layer and head: open keys per query, the open % at T, and rows with 0 / exactly 1 open key."""
    keys, frac = r["mean_open_keys_per_query_per_head"], r["open_fraction_per_head"]
    empty = r.get("empty_row_fraction_per_head") or [[float("nan")] * len(k) for k in keys]
    single = r.get("single_key_row_fraction_per_head") or [[float("nan")] * len(k) for k in keys]
    layer_keys = r.get("mean_open_keys_per_query_per_layer") or [sum(k) / len(k) for k in keys]
    lines = [f"per layer / head: open keys per query (open % of causal pairs at T = {T}; rows with 0 | 1 key):"]
    for i, lf in enumerate(r["open_fraction_per_layer"]):
        lines.append(f"  layer {i}: {layer_keys[i]:.2f} keys/query ({lf:.2%})")
        lines.append(
            "    "
            + "  ".join(
                f"h{h} {k:.2f} ({v:.2%}; {e:.0%} | {s1:.0%})"
                for h, (k, v, e, s1) in enumerate(zip(keys[i], frac[i], empty[i], single[i]))
            )
        )
    return lines


def _induction_lines(r: dict) -> list[str]:
    ih = r.get("induction_heads") or {}
    if not ih:
        return []
    lines = [
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
    return lines


# ------------------------------------------------------------------ the whole goal's parts (judge.py uses them too)


def accuracy_guard(acc: dict, max_drop: float, seed: int) -> dict:
    """The guard on one set of queries: each row's difference sparse - base (a share), the worst task family, and
    whether every family is within max_drop (a gain never fails it). The families are the query tasks; the
    sub-rows (the unseen IOI template, both digits of the addition) are reported, not gated. Differences are
    rounded to 1e-9 so that 85.5% - 87.5% counts as exactly 2 points; a row with no query (NaN: the unseen IOI
    template in a handful of queries) is left out."""
    from workbench.corpus.tasks import QUERY_TASKS

    diff = {t: round(d, 9) for t, d in acc["difference"].items() if d == d}
    worst = min((t for t in diff if t in QUERY_TASKS), key=diff.get)
    return {
        "max_drop": max_drop,
        "query_seed": seed,
        "queries": acc["queries"],
        "base": acc["base"],
        "sparse": acc["sparse"],
        "difference": diff,
        "worst": worst,
        "met": diff[worst] >= -max_drop,
    }


def remembered(memo: dict | None, key, compute):
    """A model's figure `key`, computed once per memo (judging many states of one run against one base, or one
    state against two references)."""
    if memo is None:
        return compute()
    if key not in memo:
        memo[key] = compute()
    return memo[key]


def paired_sums(base, sparse, tokens, memo: dict | None, key: str, seen: dict | None = None) -> tuple[dict, dict, dict]:
    """Sums of both models on tokens (the base's memoised under key in memo, the sparse model's in seen: one
    state compared with two references is measured once) and the paired difference sparse - base."""
    b = dict(remembered(memo, key, lambda: measure(base, tokens)))
    s = dict(remembered(seen, key, lambda: measure(sparse, tokens)))
    return b, s, paired_difference(s.pop("seq_ce"), b.pop("seq_ce"))


def untouched(
    base, sparse, corpus, cfg, ctx_len: int, required: bool = True, memo: dict | None = None, seen: dict | None = None
) -> dict | None:
    """The paired CE difference sparse - base on the untouched split with its 95% interval (None: size 0).

    required False (a training run's report): a corpus too short for the split gives {"unavailable": why}, which
    the report prints, instead of failing a finished run. memo, seen: see paired_sums and judge.judge_state."""
    if cfg.judge.untouched_sequences == 0:
        return None
    try:
        seqs, first = untouched_sequences(corpus, cfg, ctx_len)
    except BadValueError as e:
        if required:
            raise
        return {"unavailable": str(e)}
    b, s, diff = paired_sums(base, sparse, stack(seqs)[0], memo, "untouched", seen)
    split = {"split": "heldout", "sequences": [first, first + len(seqs)], "ctx_len": ctx_len}
    return {**diff, "split": split, "ce": {"base": summarise(b)["ce"], "sparse": summarise(s)["ce"]}}


def _pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def interval(d: dict) -> str:
    """A paired difference and its 95% interval as the tables print it: +0.0027 [+0.0010, +0.0044]."""
    return f"{d['difference']:+.4f} [{d['ci95'][0]:+.4f}, {d['ci95'][1]:+.4f}]"


def untouched_line(u: dict, reference: str = "base") -> str:
    if "unavailable" in u:
        return f"untouched split: not measured ({u['unavailable']})"
    first, end = u["split"]["sequences"]
    return (
        f"untouched split (held-out sequences {first}-{end - 1}, n = {u['n']}, read by no run): CE difference "
        f"sparse - {reference} {u['difference']:+.4f} (95% interval [{u['ci95'][0]:+.4f}, {u['ci95'][1]:+.4f}])"
    )


def guard_line(g: dict, use: str = "verdict", reference: str = "base") -> str:
    drops = ", ".join(f"{t} {_pts(d)}" for t, d in g["difference"].items())
    return (
        f"accuracy guard on the {use} queries (seed {g['query_seed']}): every task family within "
        f"{100 * g['max_drop']:g} points of {reference}: {'met' if g['met'] else 'NOT met'} (sparse - {reference}, "
        f"points: {drops})"
    )
