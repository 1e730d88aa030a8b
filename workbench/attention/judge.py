"""A sparse state judged against the whole goal (docs/methods.md §7), not only the CE verdict: every task
family's accuracy within JudgeConfig.accuracy_drop of the base's, and the CE cost on a split no run touched.

Candidates are compared on the selection queries (JudgeConfig.selection_query_seed) and the guard's verdict
is given on the verdict queries (verdict_query_seed, the report's accuracy table), so neither figure is
in-sample for the other. The untouched split (verdict.untouched_sequences) is read by nothing else: its
paired CE difference is the cost of the state on text no training, selection, verdict or dual step saw.

    workbench attention judge W/models/tiny-sparse [--write]   # prints (and records) the judgement
"""

from __future__ import annotations

from pathlib import Path

from workbench.attention.config import SparsifyConfig
from workbench.attention.report import accuracy_with_intervals, measure, read_report, stack, summarise, write_report
from workbench.attention.verdict import judge, paired_difference, untouched_sequences, verdict_sequences
from workbench.errors import BadValueError


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


def _base(memo: dict | None, key, compute):
    """The base model's figure `key`, computed once per memo (judging many states of one run against one base)."""
    if memo is None:
        return compute()
    if key not in memo:
        memo[key] = compute()
    return memo[key]


def _paired(base, sparse, tokens, memo: dict | None, key: str) -> tuple[dict, dict, dict]:
    """Sums of both models on tokens (the base's memoised under key) and the paired difference sparse - base."""
    b = dict(_base(memo, key, lambda: measure(base, tokens)))
    s = measure(sparse, tokens)
    return b, s, paired_difference(s.pop("seq_ce"), b.pop("seq_ce"))


def untouched(
    base, sparse, corpus, cfg: SparsifyConfig, ctx_len: int, required: bool = True, memo: dict | None = None
) -> dict | None:
    """The paired CE difference sparse - base on the untouched split with its 95% interval (None: size 0).

    required False (a training run's report): a corpus too short for the split gives {"unavailable": why}, which
    the report prints, instead of failing a finished run. memo: see judge_state."""
    if cfg.judge.untouched_sequences == 0:
        return None
    try:
        seqs, first = untouched_sequences(corpus, cfg, ctx_len)
    except BadValueError as e:
        if required:
            raise
        return {"unavailable": str(e)}
    b, s, diff = _paired(base, sparse, stack(seqs)[0], memo, "untouched")
    split = {"split": "heldout", "sequences": [first, first + len(seqs)], "ctx_len": ctx_len}
    return {**diff, "split": split, "ce": {"base": summarise(b)["ce"], "sparse": summarise(s)["ce"]}}


def judge_state(
    base, sparse, corpus, cfg: SparsifyConfig, ctx_len: int, n_queries: int, memo: dict | None = None
) -> dict:
    """Keys per query and the CE verdict on the verdict split, the CE on the untouched split, and the accuracy
    guard on the selection and the verdict queries; `meets`: CE verdict met and the verdict queries' guard met.
    memo: a dict kept across calls with the same base, corpus, cfg and n_queries (the base is measured once)."""
    from workbench.models.card import task_accuracy

    seqs, first = verdict_sequences(corpus, cfg.eval_sequences, cfg.verdict_sequences, ctx_len, cfg.verdict_start)
    _, s, diff = _paired(base, sparse, stack(seqs)[0], memo, "verdict")
    verdict = judge(diff, cfg.tolerance)
    verdict["split"] = {"split": "heldout", "sequences": [first, first + len(seqs)], "ctx_len": ctx_len}
    j = cfg.judge
    guards = {}
    for use, seed in (("selection", j.selection_query_seed), ("verdict", j.verdict_query_seed)):
        base_acc = _base(memo, ("accuracy", seed), lambda seed=seed: task_accuracy(base, n_queries, seed))
        acc = accuracy_with_intervals(base, sparse, n_queries, seed, base_acc)
        guards[use] = accuracy_guard(acc, j.accuracy_drop, seed)
    return {
        "mean_open_keys_per_query": summarise(s)["mean_open_keys_per_query"],
        "verdict": verdict,
        "untouched": untouched(base, sparse, corpus, cfg, ctx_len, memo=memo),
        "accuracy_guard": guards,
        "judge_config": j.to_dict(),
        "meets": verdict["constraint_met"] and guards["verdict"]["met"],
    }


def judge_folder(folder: str | Path, judge_cfg=None, base_spec: str | None = None, n_queries: int | None = None):
    """judge_state for a saved sparse model folder: its base, corpus and splits from its attention_report.json;
    judge_cfg (a JudgeConfig) replaces the one saved with it."""
    from workbench.corpus import load_corpus
    from workbench.models import load

    r = read_report(folder)
    cfg = SparsifyConfig.from_dict(r["config"])
    if judge_cfg is not None:
        cfg = SparsifyConfig.from_dict({**r["config"], "judge": judge_cfg.to_dict()})
    base, tok = load(base_spec or r["base_spec"], device="cpu")
    sparse, _ = load(str(folder), device="cpu")
    corpus = load_corpus(r["corpus"], tok, seed=cfg.seed)
    n = n_queries or r.get("task_accuracy_queries") or 200
    return judge_state(base.eval(), sparse.eval(), corpus, cfg, r["heldout"]["ctx_len"], n)


def record(folder: str | Path, judgement: dict) -> dict:
    """Write the judgement's untouched split and verdict-query guard into the folder's attention_report.json
    (the card, if any, is rewritten from it by card.rewrite)."""
    r = read_report(folder)
    r["config"] = {**r["config"], "judge": judgement["judge_config"]}
    r["untouched"] = judgement["untouched"]
    r["accuracy_guard"] = judgement["accuracy_guard"]["verdict"]
    write_report(r, folder)
    return r


def _pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def format_judgement(j: dict) -> str:
    """The judgement as plain text (what `workbench attention judge` prints)."""
    v, u = j["verdict"], j["untouched"]
    lines = [
        f"open keys per query per head: {j['mean_open_keys_per_query']:.2f}",
        f"CE verdict (held-out sequences {v['split']['sequences'][0]}-{v['split']['sequences'][1] - 1}): "
        f"{v['difference']:+.4f} [{v['ci95'][0]:+.4f}, {v['ci95'][1]:+.4f}]: {v['why']}",
        untouched_line(u) if u else "untouched split: none (untouched_sequences = 0)",
    ]
    for use, g in j["accuracy_guard"].items():
        lines.append(guard_line(g, use))
    lines.append(f"meets the goal (CE verdict and the verdict queries' guard): {'yes' if j['meets'] else 'NO'}")
    return "\n".join(lines)


def untouched_line(u: dict) -> str:
    if "unavailable" in u:
        return f"untouched split: not measured ({u['unavailable']})"
    first, end = u["split"]["sequences"]
    return (
        f"untouched split (held-out sequences {first}-{end - 1}, n = {u['n']}, read by no run): CE difference "
        f"sparse - base {u['difference']:+.4f} (95% interval [{u['ci95'][0]:+.4f}, {u['ci95'][1]:+.4f}])"
    )


def guard_line(g: dict, use: str = "verdict") -> str:
    drops = ", ".join(f"{t} {_pts(d)}" for t, d in g["difference"].items())
    return (
        f"accuracy guard on the {use} queries (seed {g['query_seed']}): every task family within "
        f"{100 * g['max_drop']:g} points of base: {'met' if g['met'] else 'NOT met'} (sparse - base, points: {drops})"
    )
