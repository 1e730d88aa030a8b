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

from workbench.attention.card import CONTROL_DIR
from workbench.attention.config import SparsifyConfig
from workbench.attention.report import (
    accuracy_guard,
    accuracy_with_intervals,
    guard_line,
    interval,
    paired_sums,
    read_report,
    reference_side,
    remembered,
    stack,
    summarise,
    untouched,
    untouched_line,
    write_report,
)
from workbench.attention.verdict import judge, judge_both, verdict_sequences


def judge_state(
    base,
    sparse,
    corpus,
    cfg: SparsifyConfig,
    ctx_len: int,
    n_queries: int,
    memo: dict | None = None,
    frozen=None,
    reference: str = "base",
) -> dict:
    """Keys per query and the CE verdict on the verdict split, the CE on the untouched split, and the accuracy
    guard on the selection and the verdict queries; `meets`: CE verdict met and the verdict queries' guard met.
    base: the reference every difference is taken against, named by `reference` ("control": a fair run's
    fine-tuned control at the state's step).
    frozen: under reference "both", the frozen base, whose CE verdict (and untouched CE) is added as against_base;
    the verdict is met only if both are.
    memo: a dict kept across calls with the same base (or frozen), corpus, cfg and n_queries: that model is measured
    once; with `frozen` given the reference is a new control for every state, so only the frozen base is memoised."""
    from workbench.models.card import task_accuracy

    ref_memo, seen = (None if frozen is not None else memo), {}  # seen: the sparse state's sums, once per split
    seqs, first = verdict_sequences(corpus, cfg.eval_sequences, cfg.verdict_sequences, ctx_len, cfg.verdict_start)
    tokens = stack(seqs)[0]
    _, s, diff = paired_sums(base, sparse, tokens, ref_memo, "verdict", seen)
    verdict = judge(diff, cfg.tolerance)
    spread = untouched(base, sparse, corpus, cfg, ctx_len, memo=ref_memo, seen=seen)
    if frozen is not None:
        verdict = judge_both(verdict, paired_sums(frozen, sparse, tokens, memo, "verdict", seen)[2], cfg.tolerance)
        if spread:
            spread["against_base"] = untouched(frozen, sparse, corpus, cfg, ctx_len, memo=memo, seen=seen)
    verdict["split"] = {"split": "heldout", "sequences": [first, first + len(seqs)], "ctx_len": ctx_len}
    j = cfg.judge
    guards = {}
    for use, seed in (("selection", j.selection_query_seed), ("verdict", j.verdict_query_seed)):
        base_acc = remembered(ref_memo, ("accuracy", seed), lambda seed=seed: task_accuracy(base, n_queries, seed))
        acc = accuracy_with_intervals(base, sparse, n_queries, seed, base_acc)
        guards[use] = accuracy_guard(acc, j.accuracy_drop, seed)
    keys = summarise(s)
    return {
        **{k: keys[k] for k in ("mean_open_keys_per_query", "empty_row_fraction", "single_key_row_fraction")},
        "verdict": verdict,
        "untouched": spread,
        "accuracy_guard": guards,
        "judge_config": j.to_dict(),
        "reference": reference,
        "meets": verdict["constraint_met"] and guards["verdict"]["met"],
    }


def judge_folder(folder: str | Path, judge_cfg=None, base_spec: str | None = None, n_queries: int | None = None):
    """judge_state for a saved sparse model folder: its base, corpus and splits from its attention_report.json;
    judge_cfg (a JudgeConfig) replaces the one saved with it. A fair run (`--control finetune`) is judged against
    its saved control/ (and, under reference "both", the frozen base too), as its report was."""
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
    if reference_side(r) == "base":
        return judge_state(base.eval(), sparse.eval(), corpus, cfg, r["heldout"]["ctx_len"], n)
    control = load(str(Path(folder) / CONTROL_DIR), device="cpu")[0].eval()
    frozen = base.eval() if cfg.reference == "both" else None
    return judge_state(control, sparse.eval(), corpus, cfg, r["heldout"]["ctx_len"], n, None, frozen, "control")


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
    v, u, ref = j["verdict"], j["untouched"], j.get("reference", "base")
    lines = [
        f"open keys per query per head: {j['mean_open_keys_per_query']:.2f} (rows with no open key "
        f"{j['empty_row_fraction']:.2%}, with exactly one {j['single_key_row_fraction']:.2%})",
        f"CE verdict (held-out sequences {v['split']['sequences'][0]}-{v['split']['sequences'][1] - 1}), sparse - "
        f"{ref}: {interval(v)}: {v['why']}",
    ]
    if "against_base" in v:
        lines.append(f"  sparse - frozen base on the same split: {interval(v['against_base'])}")
    lines.append(untouched_line(u, ref) if u else "untouched split: none (untouched_sequences = 0)")
    if u and "against_base" in u:
        lines.append(f"  sparse - frozen base on the untouched split: {interval(u['against_base'])}")
    for use, g in j["accuracy_guard"].items():
        lines.append(guard_line(g, use, ref))
    lines.append(f"meets the goal (CE verdict and the verdict queries' guard): {'yes' if j['meets'] else 'NO'}")
    return "\n".join(lines)
