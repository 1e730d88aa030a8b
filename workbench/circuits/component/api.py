"""One call from (model, prompt, answer[, counterfactual]) to a Circuit, and the task-level batch.

    circuit = find_circuit(model, "When Mary and John went to the park , John gave a ball to", "Mary",
                           "When Mary and John went to the park , Anna gave a ball to", budget=0.02)
    circuit.ndf, circuit.edges, circuit.save("c.json"), export.to_mib(circuit, "mib.json")

A synthetic-corpus Query can be passed as the prompt: its answer, wrong answer and counterfactual
are used, and paraphrases / resampled counterfactuals are generated for the best-of-N candidates.
For free text, pass paraphrases=[(prompt, counterfactual), ...] and counterfactuals=[...] yourself.
"""

from __future__ import annotations

import dataclasses
import time
import warnings

import numpy as np
import torch

from workbench.circuits.component.graph import Graph
from workbench.circuits.component.search import QuerySearch
from workbench.circuits.component.select import topk
from workbench.circuits.component.types import Circuit
from workbench.circuits.config import DEFAULT_TARGET_NDF, QueryConfig, SearchConfig, check_budget
from workbench.circuits.inputs import QueryInput, prepare, str_tokens
from workbench.circuits.search import Found, ZeroGapError
from workbench.errors import BadValueError
from workbench.provenance import model_id


def synthetic_samples(query, n: int, seed: int = 0) -> tuple[list[tuple[str, str]], list[str]]:
    """(paraphrases with their counterfactuals, resampled counterfactuals of the query) from the corpus."""
    from workbench.corpus import tasks

    paras = [(p.prompt, p.counterfactual) for p in tasks.paraphrases(query, n, seed) if p.prompt != query.prompt]
    return paras, tasks.counterfactuals(query, n, seed)


def resolve_wrong(model, q: QueryInput, metric: str) -> QueryInput:
    """logit_diff needs a wrong answer: the counterfactual's top prediction other than the answer (or,
    without a counterfactual, the clean runner-up). Excluding the answer makes this work for every
    task family: where the counterfactual keeps the answer (IOI with a new subject), the wrong answer
    is what the counterfactual ranks next; a counterfactual that changes nothing fails on its gap."""
    if q.wrong is not None or metric != "logit_diff":
        return q
    with torch.no_grad():
        tokens = q.cf_tokens if q.cf_tokens is not None else q.tokens
        logits = model(tokens[None].to(model.cfg.device))[0, -1].clone()
    logits[q.answer] = -float("inf")
    q.wrong = int(logits.argmax())
    q.wrong_str = str_tokens(model, torch.tensor([q.wrong]))[0]
    return q


def prediction(model, q: QueryInput, logits: torch.Tensor | None = None) -> dict:
    """What the model itself predicts after the clean prompt: its top-1 token and the answer's probability."""
    if logits is None:
        with torch.no_grad():
            logits = model(q.tokens[None].to(model.cfg.device))[0, -1]
    p = logits.detach().float().softmax(-1)
    top = int(p.argmax())
    return dict(
        top1=str_tokens(model, torch.tensor([top]))[0],
        top1_id=top,
        top1_prob=float(p[top]),
        answer_prob=float(p[q.answer]),
        predicts_answer=top == q.answer,
    )


def _not_predicted(q: QueryInput, pred: dict) -> str:
    return (
        f"the model does not predict the answer {q.answer_str!r} (p={pred['answer_prob']:.3f}); its top-1 is "
        f"{pred['top1']!r} (p={pred['top1_prob']:.3f}), so the circuit explains a logit difference the model "
        "does not act on"
    )


def retarget(model, cq):
    """A synthetic query re-targeted at the model's own top-1 where that is also correct: greater-than
    accepts any larger number, and its drawn answer is rarely the one the model gives, so without this
    every greater-than query would be skipped as not predicted."""
    from workbench.corpus import tasks

    top1 = prediction(model, prepare(model, cq.prompt, cq.answer, cq.counterfactual, cq.wrong))["top1"]
    return tasks.with_answer(cq, top1) if top1 != cq.answer and tasks.accepts(cq, top1) else cq


def prepare_all(model, prompt, answer, counterfactual, wrong, paraphrases, counterfactuals, n_samples, seed, metric):
    if hasattr(prompt, "task") and hasattr(prompt, "counterfactual"):  # a synthetic-corpus Query
        cq = prompt
        answer = cq.answer if answer is None else answer
        wrong = cq.wrong if wrong is None else wrong
        counterfactual = cq.counterfactual if counterfactual is None else counterfactual
        if not paraphrases and not counterfactuals and n_samples:
            paraphrases, counterfactuals = synthetic_samples(cq, n_samples, seed)
        prompt = cq.prompt
    if answer is None:
        raise BadValueError("an answer is required (the token the model should predict after the prompt)")
    q = resolve_wrong(model, prepare(model, prompt, answer, counterfactual, wrong), metric)
    samples: dict[str, QueryInput] = {}
    for i, cf in enumerate(counterfactuals, 1):
        samples[f"cf{i}"] = prepare(model, prompt, q.answer, cf, q.wrong)
    for i, p in enumerate(paraphrases, 1):
        text, cf = (p, None) if isinstance(p, str) else p
        samples[f"para{i}"] = prepare(model, text, q.answer, cf, q.wrong)
    return q, samples


def _stats(values) -> tuple[float, float]:
    v = np.asarray(list(values), dtype=float)
    return (float(v.mean()), float(v.std())) if len(v) else (float("nan"), float("nan"))


FAITHFUL_NDF = 0.5  # below this a budgeted circuit recovers less than half of the gap: the budget is too small
VANISHING_SHARE = 0.01  # attribution scores summing to under 1% of the gap measure nothing


def attribution_note(scores: torch.Tensor, gap: float) -> tuple[float, str | None]:
    """(sum of |attribution scores| / the gap, a warning when that share vanishes). Attribution is a first-order
    estimate of each edge's effect; saturated attention or lookup-table MLPs flatten the gradients while the
    exact search still finds the circuit, so then the scores say nothing about the edges."""
    share = float(scores.abs().sum()) / gap if gap else float("nan")
    if not share < VANISHING_SHARE:
        return share, None
    return share, (
        f"the attribution scores sum to {share:.2%} of the gap (vanishing gradients): the stored scores are "
        "attribution estimates, not the effects the search measured; each kept edge's measured effect is its "
        "`effect`"
    )


def _edge_effects(ev, graph: Graph, found) -> dict[str, float]:
    """The measured effect of each kept edge: the circuit's NDF minus its NDF without that edge (one exact
    patched run per edge)."""
    kept = found.mask.nonzero().flatten().tolist()
    if not kept:
        return {}
    masks = found.mask[None].repeat(len(kept), 1)
    masks[torch.arange(len(kept)), kept] = False
    drops = found.ndf - ev.ndf(ev.values(masks))
    return {graph.edges[i]: float(d) for i, d in zip(kept, drops)}


def _budget_warning(found, method: dict) -> str | None:
    if method.get("target_ndf") is not None or not found.ndf < FAITHFUL_NDF:
        return None
    return (
        f"at budget {method['budget']:.4g} ({int(found.mask.sum())} edges) the best circuit reaches NDF "
        f"{found.ndf:.3f}: the budget is below the smallest faithful circuit; pass --target-ndf {DEFAULT_TARGET_NDF} "
        f"(target_ndf=) for the sparsest circuit that reaches NDF {DEFAULT_TARGET_NDF}"
    )


def _to_circuit(
    model,
    search: QuerySearch,
    found: Found,
    method: dict,
    samples: dict,
    seed: int,
    curve: dict | None,
    resampled: dict[str, float],
) -> Circuit:
    ev, q = search.ev, search.query
    pred = prediction(model, q, search.setup.clean_logits)
    if not pred["predicts_answer"]:
        warnings.warn(_not_predicted(q, pred), stacklevel=3)
    faith = dict(
        metric=search.cfg.metric,
        ablation=search.cfg.ablation,
        clean=ev.clean,
        empty=ev.empty,
        circuit=found.value,
        gap=ev.gap,
        **pred,
        nfs=found.nfs,
        ndf=found.ndf,
        selected=found.source,
        baseline_topk_ndf=found.baseline_ndf,
        ndf_candidates=found.candidates,
        ndf_resampled=resampled,
        exact_evaluations=ev.n_evaluated,
    )
    faith["ndf_candidates_mean"], faith["ndf_candidates_std"] = _stats(found.candidates.values())
    faith["ndf_resampled_mean"], faith["ndf_resampled_std"] = _stats(resampled.values())
    effects = _edge_effects(ev, search.graph, found)
    faith["attribution_share"], vanishing = attribution_note(search.scores.scores, ev.gap)
    faith["attribution_vanishes"] = vanishing is not None
    faith["warnings"] = [w for w in (_budget_warning(found, method), vanishing) if w]
    for w in faith["warnings"]:
        warnings.warn(w, stacklevel=3)
    query = {
        **q.to_dict(),
        "str_tokens": str_tokens(model, q.tokens),
        "alignment": "right-aligned on the answer position, BOS anchored; unmatched positions keep clean values",
        "samples": {n: s.to_dict() for n, s in samples.items()},
    }
    if search.setup.alignment is not None:
        query["counterfactual_position"] = search.setup.alignment.tolist()
    return Circuit(
        search.graph,
        found.mask,
        search.scores.scores,
        query,
        method,
        model_id(model),
        seed,
        faith,
        curve,
        search.scores.per_position,
        effects,
    )


def find_circuit(
    model,
    prompt,
    answer=None,
    counterfactual=None,
    *,
    query: QueryConfig | None = None,
    strategy: str = "search",
    cfg: SearchConfig | None = None,
    means: torch.Tensor | None = None,
    paraphrases=(),
    counterfactuals=(),
    curve: bool = True,
    **options,
) -> Circuit:
    """The sparsest circuit reaching target_ndf, or the most faithful one within budget (fraction of edges;
    default 2%, or one edge on graphs of fewer than 50 edges; a budget below one edge is refused).

    query (QueryConfig) holds the per-query values (budget, target_ndf, wrong, n_samples, seed); strategy:
    "search" (best-of-N over query / resampled-counterfactual / paraphrase attributions, then exact refinement)
    or "topk" (plain top-k of the query's own attribution scores: the baseline). cfg (SearchConfig) holds the
    attribution, ablation, metric and refinement choices. options set fields of either (e.g. budget=0.02,
    seed=1, steps=3, min_gap=0.0).
    """
    query, options = QueryConfig.take(query, options)
    cfg = dataclasses.replace(cfg or SearchConfig(), **options)
    if strategy not in ("search", "topk"):
        raise BadValueError(f"unknown strategy {strategy!r}; valid: search, topk")
    if query.target_ndf is not None and strategy == "topk":
        raise BadValueError("target_ndf needs strategy='search' (top-k has a fixed budget)")
    query = query.budgeted(Graph.from_model(model).n_edges)
    budget, target_ndf, n_samples, seed = query.budget, query.target_ndf, query.n_samples, query.seed
    q, samples = prepare_all(
        model,
        prompt,
        answer,
        counterfactual,
        query.wrong,
        paraphrases,
        counterfactuals,
        n_samples if strategy == "search" else 0,
        seed,
        cfg.metric,
    )
    torch.manual_seed(seed)
    search = QuerySearch(model, q, samples if strategy == "search" else {}, cfg, means)
    if strategy == "topk":
        mask = topk(search.graph, search.absolute["query"], max(1, int(budget * search.graph.n_edges)))
        v = float(search.ev.values(mask[None])[0])
        ndf_v = float(search.ev.ndf(v))
        found = Found(mask, v, ndf_v, float(search.ev.nfs(v)), "query/topk", {}, ndf_v)
    else:
        found = search.at_budget(budget) if target_ndf is None else search.sparsest(target_ndf)
    resampled = search.ndf_under(found.mask, {n: s for n, s in samples.items() if n.startswith("cf")})
    method_info = dict(
        name="query-search" if strategy == "search" else f"{cfg.method}-topk",
        strategy=strategy,
        budget=budget,
        target_ndf=target_ndf,
        metric=cfg.metric,
        ablation=cfg.ablation,
        attribution=search.scores.settings(),
        search=search.cfg.to_dict(),
        samples=sorted(samples),
    )
    return _to_circuit(model, search, found, method_info, samples, seed, search.curve() if curve else None, resampled)


def evaluate_task(
    model,
    task: str,
    n: int = 20,
    budgets=(0.01, 0.02, 0.05),
    *,
    query: QueryConfig | None = None,
    cfg: SearchConfig | None = None,
    means=None,
    progress: bool = True,
    require_prediction: bool = True,
    **options,
) -> dict:
    """Search vs plain top-k on n generated queries of one task: NDF at each budget, CPR, CMD, spreads.

    Queries whose gap |L(M(q)) - L(M(q'))| is below min_gap are skipped and listed (NDF is undefined
    there), and so, with require_prediction, are queries whose answer is not the model's top-1 (a
    circuit for an answer the model does not give explains nothing it does). query (its seed and n_samples),
    cfg and options as for find_circuit.
    """
    query, options = QueryConfig.take(query, options)
    cfg = dataclasses.replace(cfg or SearchConfig(), **options)
    seed, n_samples = query.seed, query.n_samples
    from workbench.corpus import tasks

    for b in budgets:
        check_budget(b, Graph.from_model(model).n_edges)
    rows, skipped = [], []
    qs = tasks.queries(task, n, seed=seed, tokenizer=model.tokenizer)
    it = qs
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(qs, desc=f"circuits {task}")
    for cq in it:
        t0 = time.perf_counter()
        try:
            cq = retarget(model, cq)
            q, samples = prepare_all(model, cq, None, None, None, (), (), n_samples, seed, cfg.metric)
            pred = prediction(model, q)
            if require_prediction and not pred["predicts_answer"]:
                skipped.append({"prompt": cq.prompt, "reason": _not_predicted(q, pred), **pred})
                continue
            search = QuerySearch(model, q, samples, cfg, means)
        except ZeroGapError as e:
            skipped.append({"prompt": cq.prompt, "reason": str(e)})
            continue
        row = {"prompt": cq.prompt, "answer": cq.answer, "gap": search.ev.gap, "answer_prob": pred["answer_prob"]}
        for b in budgets:
            f = search.at_budget(b)
            row[f"search_ndf@{b}"], row[f"topk_ndf@{b}"] = f.ndf, f.baseline_ndf
            row[f"edges@{b}"] = int(f.mask.sum())
            row[f"candidates_ndf_std@{b}"] = _stats(f.candidates.values())[1]
            if b == budgets[len(budgets) // 2]:
                res = search.ndf_under(f.mask, {k: s for k, s in samples.items() if k.startswith("cf")})
                row["resampled_ndf_mean"], row["resampled_ndf_std"] = _stats(res.values())
        c = search.curve()
        row.update(
            search_cpr=c["search_cpr"],
            topk_cpr=c["topk_cpr"],
            search_cmd=c["search_cmd"],
            topk_cmd=c["topk_cmd"],
            seconds=time.perf_counter() - t0,
        )
        rows.append(row)
    keys = [k for k in (rows[0] if rows else {}) if k not in ("prompt", "answer")]
    agg = {k: _stats(r[k] for r in rows) for k in keys}
    return dict(
        task=task,
        n=n,
        n_used=len(rows),
        skipped=skipped,
        budgets=list(budgets),
        settings=cfg.to_dict(),
        require_prediction=require_prediction,
        n_samples=n_samples,
        rows=rows,
        mean={k: v[0] for k, v in agg.items()},
        std={k: v[1] for k, v in agg.items()},
    )


def format_summary_table(summaries) -> str:
    """A markdown table: per task, mean ± std NDF at each budget (search vs top-k), CPR, CMD, seconds/query."""
    if isinstance(summaries, dict):
        summaries = [summaries]
    budgets = summaries[0]["budgets"]
    head = (
        ["task", "n"]
        + [f"NDF@{100 * b:g}% search / top-k" for b in budgets]
        + ["CPR search / top-k", "CMD search / top-k", "s/query"]
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def ms(s, k):
        return f"{s['mean'].get(k, float('nan')):.3f}±{s['std'].get(k, float('nan')):.3f}"

    for s in summaries:
        cells = [s["task"], f"{s['n_used']}/{s['n']}"]
        cells += [f"{ms(s, f'search_ndf@{b}')} / {ms(s, f'topk_ndf@{b}')}" for b in budgets]
        cells += [
            f"{ms(s, 'search_cpr')} / {ms(s, 'topk_cpr')}",
            f"{ms(s, 'search_cmd')} / {ms(s, 'topk_cmd')}",
            f"{s['mean'].get('seconds', float('nan')):.2f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
