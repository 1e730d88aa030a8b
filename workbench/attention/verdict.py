"""Honest verdicts (docs/methods.md §7): the saved state is chosen on one held-out split (the selection
split, held-out sequences [0, eval_sequences)) and the constraint is judged on another, fresh one (the
verdict split), from the paired per-sequence CE difference sparse - base and its 95% interval.

The constraint is met only if the interval's upper bound is within the tolerance and the split is
large enough to say so (standard error under a fifth of the tolerance); task accuracies carry a
Wilson 95% interval.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from workbench.errors import BadValueError

Z95 = 1.959964


def paired_difference(sparse_ce: torch.Tensor, base_ce: torch.Tensor) -> dict:
    """Mean per-sequence CE difference (sparse - base), its standard error and 95% interval."""
    d = (sparse_ce.double() - base_ce.double()).cpu()
    n = d.numel()
    mean = float(d.mean())
    se = float(d.std(unbiased=True) / math.sqrt(n)) if n > 1 else math.inf
    return {"n": n, "difference": mean, "se": se, "ci95": [mean - Z95 * se, mean + Z95 * se]}


def feasible(diff: dict, tolerance: float, z: float) -> bool:
    """Selection rule: mean difference + z standard errors within the tolerance (z = 0: the mean alone)."""
    return diff["difference"] + z * diff["se"] <= tolerance


def admitted(ev: dict, tolerance: float, z: float) -> bool:
    """The selection rule for one evaluation row: feasible against its reference and, where the row holds one (a
    fine-tuned control under reference "both"), against the frozen base too."""
    return all(feasible(ev[k], tolerance, z) for k in ("difference", "difference_base") if k in ev)


def sparsest_within(evals: list[dict], tolerance: float, z: float) -> dict | None:
    """The sparsest evaluation row (lowest open fraction) that the selection rule admits at `tolerance`, or
    None: what a run trained at another tolerance would keep for this one (the frontier over tolerances)."""
    rows = [e for e in evals if admitted(e, tolerance, z)]
    return min(rows, key=lambda e: e["open_fraction"], default=None)


def judge(diff: dict, tolerance: float) -> dict:
    """The verdict of a paired difference on the fresh split."""
    se_ok = diff["se"] < tolerance / 5
    met = se_ok and diff["ci95"][1] <= tolerance
    why = (
        f"upper 95% bound {diff['ci95'][1]:+.4f} {'<=' if diff['ci95'][1] <= tolerance else '>'} tolerance {tolerance}"
        if se_ok
        else f"inconclusive: standard error {diff['se']:.4f} is not under tolerance/5 = {tolerance / 5:.4f} "
        "(raise verdict_sequences)"
    )
    return {**diff, "tolerance": tolerance, "se_below_fifth_of_tolerance": se_ok, "constraint_met": met, "why": why}


def judge_both(verdict: dict, against_base: dict, tolerance: float) -> dict:
    """The verdict against a fine-tuned control under reference "both": met only if the verdict against the frozen
    base (the same split) is met too; both are kept."""
    base = judge(against_base, tolerance)
    met = verdict["constraint_met"] and base["constraint_met"]
    why = f"against the control: {verdict['why']}; against the frozen base: {base['why']}"
    return {**verdict, "constraint_met": met, "why": why, "against_base": base}


def _docs(seqs) -> set[int]:
    """The documents of packed sequences (position 0 is the BOS, which every sequence starts with)."""
    return {int(d) for s in seqs for d in np.unique(s.doc_ids[1:])}


def check_start(start: int | None, selection: int) -> None:
    """An explicit verdict start must lie after the selection split [0, selection)."""
    if start is not None and start < selection:
        raise BadValueError(
            f"verdict_start={start} overlaps the selection split (held-out sequences 0-{selection - 1}); "
            f"use verdict_start >= {selection} or None (right after it)"
        )


def verdict_sequences(corpus, selection: int, n: int, ctx_len: int, start: int | None = None) -> tuple[list, int]:
    """n held-out sequences sharing no document with the selection split [0, selection).

    start None: the first held-out sequence after the selection split that shares no document with it
    (a packed document can straddle the boundary).
    """
    check_start(start, selection)
    selection_docs = _docs(_first(corpus, selection, ctx_len))
    return _fresh_run(corpus, ctx_len, n, selection, start, selection_docs, ("verdict", "the selection split"))


def dual_sequences(corpus, cfg, ctx_len: int) -> tuple[list, int]:
    """The dual stream (cfg.dual_stream "heldout"): cfg.dual_sequences held-out sequences disjoint from the
    selection split and the verdict split, by index and by document; start None: right after the verdict."""
    selection, n, start = cfg.eval_sequences, cfg.dual_sequences, cfg.dual_start
    verdict, first = verdict_sequences(corpus, selection, cfg.verdict_sequences, ctx_len, cfg.verdict_start)
    end = first + len(verdict)
    if start is not None and (start < selection or (start < end and start + n > first)):
        raise BadValueError(
            f"dual_start={start} (held-out sequences {start}-{start + n - 1}) overlaps the selection split "
            f"(0-{selection - 1}) or the verdict split ({first}-{end - 1}); use dual_start >= {end} or None"
        )
    taken = _docs(_first(corpus, selection, ctx_len)) | _docs(verdict)
    names = ("dual", "the selection or verdict split")
    return _fresh_run(corpus, ctx_len, n, end if start is None else start, start, taken, names)


def untouched_sequences(corpus, cfg, ctx_len: int) -> tuple[list, int]:
    """cfg.judge.untouched_sequences held-out sequences no run reads: after the dual stream's range (whether or
    not the run used it) and sharing no document with the selection, verdict or dual splits; start None: the
    first such sequence after the dual stream."""
    n, start = cfg.judge.untouched_sequences, cfg.judge.untouched_start
    selection = _first(corpus, cfg.eval_sequences, ctx_len)
    verdict, _ = verdict_sequences(corpus, cfg.eval_sequences, cfg.verdict_sequences, ctx_len, cfg.verdict_start)
    dual, first = dual_sequences(corpus, cfg, ctx_len)
    end = first + len(dual)
    if start is not None and start < end:
        raise BadValueError(
            f"untouched_start={start} lies before the end of the dual stream (held-out sequences {first}-{end - 1}), "
            f"inside or next to the splits the runs read; use untouched_start >= {end} or None"
        )
    taken = _docs(selection) | _docs(verdict) | _docs(dual)
    return _fresh_run(corpus, ctx_len, n, end, start, taken, ("untouched", "the selection, verdict or dual split"))


def _first(corpus, n: int, ctx_len: int) -> list:
    """The selection split: held-out sequences [0, n)."""
    return [s for _, s in zip(range(n), corpus.sequences(ctx_len, 0, split="heldout"))]


def _fresh_run(corpus, ctx_len: int, n: int, index: int, start: int | None, taken: set[int], names: tuple[str, str]):
    """n held-out sequences from `start` on (None: from the first one at or after `index` sharing no document
    with `taken`, past a straddling document); any sequence sharing a taken document is refused."""
    (what, against), seqs, first = names, [], None
    for i, s in enumerate(corpus.sequences(ctx_len, index, split="heldout"), start=index):
        if len(seqs) == n:
            break
        if start is not None and i < start:
            continue
        if start is None and not seqs and _docs([s]) & taken:
            continue  # auto start: step past sequences continuing a taken document
        check_fresh([s], taken, i, what, against)
        first = i if first is None else first
        seqs.append(s)
    if len(seqs) < n:
        raise BadValueError(
            f"the corpus {corpus.spec!r} has only {len(seqs)} held-out sequences of {ctx_len} tokens for the {what} split after {against}, fewer than {what}_sequences={n}; lower it or add text"
        )
    return seqs, first


def check_fresh(seqs, taken: set[int], index: int = 0, what: str = "verdict", against: str = "the selection split"):
    """Refuse verdict (or dual-stream) sequences holding documents of the selection (or verdict) split.

    Training text cannot enter: verdict text is read only from the held-out split, whose documents
    every corpus keeps apart from the training split's (synthetic: held-out queries; files: every 20th).
    """
    docs = _docs(seqs)
    if docs & taken:
        raise BadValueError(
            f"{what} sequence {index} shares documents {sorted(docs & taken)[:3]} with {against}; raise {what}_start"
        )


def wilson(p: float, n: int) -> list[float]:
    """Wilson 95% interval of a proportion p measured on n queries."""
    if n <= 0:
        return [0.0, 1.0]
    den = 1 + Z95**2 / n
    mid = (p + Z95**2 / (2 * n)) / den
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / den
    return [max(0.0, mid - half), min(1.0, mid + half)]
