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
from workbench.attention.report import (
    accuracy_guard,
    accuracy_with_intervals,
    guard_line,
    paired_sums,
    read_report,
    remembered,
    stack,
    summarise,
    untouched,
    untouched_line,
    write_report,
)
from workbench.attention.verdict import judge, verdict_sequences


def judge_state(
    base, sparse, corpus, cfg: SparsifyConfig, ctx_len: int, n_queries: int, memo: dict | None = None
) -> dict:
    """Keys per query and the CE verdict on the verdict split, the CE on the untouched split, and the accuracy
    guard on the selection and the verdict queries; `meets`: CE verdict met and the verdict queries' guard met.
    memo: a dict kept across calls with the same base, corpus, cfg and n_queries (the base is measured once)."""
    from workbench.models.card import task_accuracy

    seqs, first = verdict_sequences(corpus, cfg.eval_sequences, cfg.verdict_sequences, ctx_len, cfg.verdict_start)
    _, s, diff = paired_sums(base, sparse, stack(seqs)[0], memo, "verdict")
    verdict = judge(diff, cfg.tolerance)
    verdict["split"] = {"split": "heldout", "sequences": [first, first + len(seqs)], "ctx_len": ctx_len}
    j = cfg.judge
    guards = {}
    for use, seed in (("selection", j.selection_query_seed), ("verdict", j.verdict_query_seed)):
        base_acc = remembered(memo, ("accuracy", seed), lambda seed=seed: task_accuracy(base, n_queries, seed))
        acc = accuracy_with_intervals(base, sparse, n_queries, seed, base_acc)
        guards[use] = accuracy_guard(acc, j.accuracy_drop, seed)
    keys = summarise(s)
    return {
        **{k: keys[k] for k in ("mean_open_keys_per_query", "empty_row_fraction", "single_key_row_fraction")},
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


def format_judgement(j: dict) -> str:
    """The judgement as plain text (what `workbench attention judge` prints)."""
    v, u = j["verdict"], j["untouched"]
    lines = [
        f"open keys per query per head: {j['mean_open_keys_per_query']:.2f} (rows with no open key "
        f"{j['empty_row_fraction']:.2%}, with exactly one {j['single_key_row_fraction']:.2%})",
        f"CE verdict (held-out sequences {v['split']['sequences'][0]}-{v['split']['sequences'][1] - 1}): "
        f"{v['difference']:+.4f} [{v['ci95'][0]:+.4f}, {v['ci95'][1]:+.4f}]: {v['why']}",
        untouched_line(u) if u else "untouched split: none (untouched_sequences = 0)",
    ]
    for use, g in j["accuracy_guard"].items():
        lines.append(guard_line(g, use))
    lines.append(f"meets the goal (CE verdict and the verdict queries' guard): {'yes' if j['meets'] else 'NO'}")
    return "\n".join(lines)
