"""Circuits of a base model and its sparse-attention version on the same queries (issue: 100x fewer edges?).

For each query and NDF target, two counts per model:
  component level: edges of the sparsest query circuit (workbench.circuits QuerySearch.sparsest) and
    the heads + MLPs it involves;
  token level: attention entries (layer, head, query pos, key pos) that must stay so that the model,
    with every other entry removed the way the sparse model's gate removes it, keeps NDF >= target.
    Published gate: a removed entry leaves the dense softmax and the rest are not renormalised (so
    "keep every open entry" is the sparse model itself); renormalised presets (log_prob, score): the
    pattern is renormalised over the kept entries. Either way a row with none writes nothing. Entries
    are ranked by |A * dL/dA| (attention attribution on the clean run) and the smallest top-k reaching
    the target is found by a geometric then binary search, the same way and under the same removal
    rule for both models (an upper bound on the true minimum).
NDF uses the same clean and counterfactual values as the circuit search (logit difference).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from workbench.attention import claims
from workbench.attention.card import CONTROL_DIR
from workbench.attention.claims import LEVELS
from workbench.circuits.config import DEFAULT_SAMPLES, QueryConfig
from workbench.errors import BadValueError
from workbench.models import load

TARGETS = (0.8, 0.9)


def check_same_vocab(base, sparse) -> None:
    vb, vs = base.tokenizer.get_vocab(), sparse.tokenizer.get_vocab()
    if base.cfg.d_vocab != sparse.cfg.d_vocab or vb != vs:
        raise BadValueError(
            f"the models have different vocabularies (base {base.cfg.model_name!r}: d_vocab "
            f"{base.cfg.d_vocab}, {len(vb)} tokens; sparse {sparse.cfg.model_name!r}: d_vocab "
            f"{sparse.cfg.d_vocab}, {len(vs)} tokens); compare a sparse model with the base it came from"
        )


def _logit_diff(logits: torch.Tensor, answer: int, wrong: int) -> torch.Tensor:
    last = logits[:, -1].float()
    return last[:, answer] - last[:, wrong]


def renormalises(model) -> bool:
    """Whether removing attention entries renormalises the rest, as the model's own gate does (an
    ungated model: no, the published gate's rule)."""
    from workbench.attention import gates as G

    return G.is_gated(model) and G.gates(model)[0].cfg.renormalise


def _run_kept(model, tokens: torch.Tensor, keep: torch.Tensor | None, renormalise: bool) -> torch.Tensor:
    """Logits with only the kept entries [b, L, H, q, k] of each pattern (None: the model as is)."""
    hooks = []
    if keep is not None:

        def fn(pattern, hook):
            p = pattern * keep[:, int(hook.name.split(".")[1])].to(pattern.dtype)
            if not renormalise:
                return p
            s = p.sum(-1, keepdim=True)
            return p / torch.where(s > 0, s, torch.ones_like(s))

        hooks = [(f"blocks.{i}.attn.hook_pattern", fn) for i in range(model.cfg.n_layers)]
    return model.run_with_hooks(tokens.expand(1 if keep is None else keep.shape[0], -1), fwd_hooks=hooks)


def attention_scores(model, tokens: torch.Tensor, answer: int, wrong: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(|A * dL/dA| [L, H, q, k], candidate entries: causal and not closed by a gate) on the clean run."""
    pats = {}

    def keep_grad(pattern, hook):
        pattern.retain_grad()
        pats[hook.name] = pattern
        return pattern

    names = [f"blocks.{i}.attn.hook_pattern" for i in range(model.cfg.n_layers)]
    with torch.enable_grad():
        logits = model.run_with_hooks(tokens, fwd_hooks=[(n, keep_grad) for n in names])
        _logit_diff(logits, answer, wrong).sum().backward()
    A = torch.stack([pats[n][0].detach() for n in names])
    grad = torch.stack([pats[n].grad[0] for n in names])
    model.zero_grad(set_to_none=True)
    n = tokens.shape[-1]
    causal = torch.ones(n, n, dtype=torch.bool, device=A.device).tril()
    return (A * grad).abs(), causal & (A > 0)


@torch.no_grad()
def token_edges(
    model,
    tokens: torch.Tensor,
    answer: int,
    wrong: int,
    clean: float,
    empty: float,
    targets=TARGETS,
    max_batch: int = 32,
    renormalise: bool | None = None,
) -> dict:
    """Fewest top-ranked attention entries keeping NDF >= each target (see the module doc).
    renormalise: the removal rule; None follows the model's own gate (`renormalises`)."""
    from workbench.circuits.metrics import ndf

    renormalise = renormalises(model) if renormalise is None else renormalise

    tokens = tokens.reshape(1, -1).to(model.cfg.device)
    score, cand = attention_scores(model, tokens, answer, wrong)
    flat = torch.where(cand, score, torch.full_like(score, -1.0)).flatten()
    n_cand = int(cand.sum())
    order = torch.argsort(flat, descending=True)[:n_cand]
    memo: dict[int, float] = {}

    def values(ks: list[int]) -> None:
        ks = [k for k in dict.fromkeys(ks) if k not in memo]
        for i in range(0, len(ks), max_batch):
            chunk = ks[i : i + max_batch]
            keep = torch.zeros(len(chunk), flat.numel(), dtype=torch.bool, device=flat.device)
            for r, k in enumerate(chunk):
                keep[r, order[:k]] = True
            v = _logit_diff(
                _run_kept(model, tokens, keep.reshape(len(chunk), *score.shape), renormalise), answer, wrong
            )
            memo.update(zip(chunk, ndf(v.cpu().numpy(), clean, empty).tolist()))

    grid = sorted({0, n_cand} | {int(round(1.25**i)) for i in range(80) if 1.25**i < n_cand})
    values(grid)
    out = {
        "candidates": n_cand,
        "causal_entries": int(score.shape[0] * score.shape[1] * tokens.shape[-1] * (tokens.shape[-1] + 1) // 2),
        "ndf_all_kept": memo[n_cand],
        "renormalised": renormalise,
    }
    for t in targets:
        hits = [k for k in grid if memo[k] >= t]
        if not hits:
            out[str(t)] = {"entries": None, "ndf": max(memo[k] for k in grid)}
            continue
        hi = hits[0]
        lo = max([k for k in grid if k < hi], default=-1)
        while hi - lo > 1:  # NDF need not be monotone in k: this finds a hit with a miss just below it
            mid = (lo + hi) // 2
            values([mid])
            lo, hi = (lo, mid) if memo[mid] >= t else (mid, hi)
        out[str(t)] = {"entries": hi, "ndf": memo[hi]}
    return out


def _nodes(graph, mask: torch.Tensor) -> tuple[list[str], list[str]]:
    src, dst = graph.edge_index
    nodes = set()
    for s, d in zip(src[mask].tolist(), dst[mask].tolist()):
        nodes.add(graph.writers[s])
        nodes.update(graph.reader_node(graph.readers[d]))
    heads = sorted(n for n in nodes if n.startswith("a"))
    mlps = sorted(n for n in nodes if n.startswith("m"))
    return heads, mlps


def query_side(
    model,
    cq,
    targets=TARGETS,
    n_samples: int = DEFAULT_SAMPLES,
    ig_steps: int = 5,
    seed: int = 0,
    renormalise: bool | None = None,
) -> dict:
    """Component-level and token-level counts for one model on one synthetic query (renormalise: the
    token level's removal rule, see token_edges)."""
    from workbench.circuits.component.api import prepare_all
    from workbench.circuits.component.search import QuerySearch, SearchConfig
    from workbench.circuits.search import ZeroGapError

    try:
        q, samples = prepare_all(model, cq, None, None, None, (), (), n_samples, seed, "logit_diff")
        search = QuerySearch(model, q, samples, SearchConfig(steps=ig_steps))
    except ZeroGapError as e:
        return {"skipped": str(e)}
    torch.manual_seed(seed)
    res = {
        "clean": search.ev.clean,
        "counterfactual": search.ev.empty,
        "gap": search.ev.gap,
        "graph_edges": search.graph.n_edges,
        "component": {},
        "token": None,
    }
    for t in targets:
        f = search.sparsest(t)
        heads, mlps = _nodes(search.graph, f.mask)
        res["component"][str(t)] = {"edges": int(f.mask.sum()), "ndf": f.ndf, "heads": heads, "mlps": mlps}
    ev = search.ev
    res["token"] = token_edges(model, q.tokens, q.answer, q.wrong, ev.clean, ev.empty, targets, renormalise=renormalise)
    return res


def _ratio(a: list, b: list) -> float | None:
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y]
    return float(np.mean([x for x, _ in pairs]) / np.mean([y for _, y in pairs])) if pairs else None


def query_row(
    models: dict,
    cq,
    targets=TARGETS,
    n_samples: int = DEFAULT_SAMPLES,
    ig_steps: int = 5,
    seed: int = 0,
    renormalise: bool = False,
    known: dict | None = None,
) -> dict:
    """One synthetic query on each model (models: side -> model, "base" first), every model asked for the
    base model's answer (retarget); per side also its own top-1 and whether the task accepts it, so a
    circuit of a query the model gets wrong can be told apart, and the seconds it took (to plan larger runs).
    known: sides already measured (kept as is)."""
    import time

    from workbench.circuits.component.api import prediction, retarget
    from workbench.circuits.inputs import prepare
    from workbench.corpus import tasks

    asked = retarget(models["base"], cq)
    row = {
        "prompt": cq.prompt,
        "answer": asked.answer,
        "task_answer": cq.answer,
        "wrong": asked.wrong,
        "counterfactual": asked.counterfactual,
    }
    for side, model in models.items():
        if known and side in known:
            row[side] = known[side]
            continue
        t0 = time.perf_counter()
        top1 = prediction(model, prepare(model, cq.prompt, cq.answer, cq.counterfactual, cq.wrong))["top1"]
        side_res = query_side(model, asked, targets, n_samples, ig_steps, seed, renormalise)
        correct = tasks.accepts(cq, top1)
        row[side] = {**side_res, "top1": top1, "correct": correct, "seconds": time.perf_counter() - t0}
    return row


def compare(
    base,
    sparse,
    task: str,
    n: int = 20,
    targets=TARGETS,
    seed: int = 0,
    n_samples: int = DEFAULT_SAMPLES,
    ig_steps: int = 5,
    progress: bool = True,
    split: str = "heldout",
    control=None,
) -> dict:
    """Per-query counts on both models and, per target, the base/sparse ratios (of the means over queries
    answered by both), on queries of `split` (heldout: combinations the training text never contains).
    The token level removes entries by the sparse model's rule on both models. sparse None: the base model
    alone (its circuit sizes; the token level by its own rule, the published gate's on an ungated model).
    control: the base fine-tuned like the sparse model without gates (saved_control), measured beside both so
    base - sparse splits into base - control (training) and control - sparse (the gates)."""
    from workbench.corpus import tasks

    if control is not None and sparse is None:
        raise BadValueError("a control splits base - sparse: pass the sparse model too")
    models = {"base": base, "control": control, "sparse": sparse}
    models = {side: m for side, m in models.items() if m is not None}
    for side in list(models)[1:]:
        check_same_vocab(base, models[side])
    for t in targets:
        QueryConfig(target_ndf=t)  # its one range check
    qs = tasks.queries(task, n, seed=seed, tokenizer=base.tokenizer, split=split)
    it = qs
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(qs, desc=f"compare {task}")
    rule = renormalises(models[list(models)[-1]])
    rows = [query_row(models, cq, targets, n_samples, ig_steps, seed, rule) for cq in it]
    cfg = {"task": task, "n": n, "targets": list(targets), "seed": seed, "split": split, "samples": n_samples}
    return compare_result(models, rows, {**cfg, "ig_steps": ig_steps}, rule)


def saved_control(sparse_dir, device: str = "cpu") -> object | None:
    """The control a sparse-attention run saved beside its model (`attention train --control finetune`: the base
    fine-tuned in lockstep without gates, the folder control/), loaded; None when the run has none."""
    folder = Path(sparse_dir) / CONTROL_DIR
    return load(str(folder), device=device)[0] if (folder / "config.json").is_file() else None


def compare_result(models: dict, rows: list[dict], cfg: dict, rule: bool) -> dict:
    """compare's JSON from its per-query rows: cfg (task, n, targets, seed, split, samples, ig_steps) and, per
    target, each side's means over the queries with a gap on every model (and base/sparse ratios of them).
    models: "base", optionally "control" (the base fine-tuned without gates, bench/circuits/circuit_claims.py) and
    "sparse"; a row has one side per model."""
    from workbench.provenance import model_id

    base = models["base"]
    used = [r for r in rows if not any("skipped" in r[side] for side in models)]
    summary = {str(t): _target_summary(used, str(t), "sparse" in models) for t in cfg["targets"]}
    return {
        **cfg,
        "n_used": len(used),
        "base_model": model_id(models["base"]),
        "sparse_model": model_id(models["sparse"]) if "sparse" in models else None,
        "control_model": model_id(models["control"]) if "control" in models else None,
        "components": {"heads": base.cfg.n_layers * base.cfg.n_heads, "mlps": base.cfg.n_layers},
        "token_removal": "renormalised over the kept entries" if rule else "dropped, not renormalised (published gate)",
        "summary": summary,
        "queries": rows,
    }


def _target_summary(used: list[dict], t: str, paired: bool) -> dict:
    out = {}
    for level, read in LEVELS.items():
        b = [read(r["base"], t) for r in used]
        s = [read(r["sparse"], t) for r in used] if paired else []
        out[level] = {"base": _mean(b), "sparse": _mean(s) if paired else None, "ratio": _ratio(b, s)}
        if level == "token_entries":
            out[level]["unreached"] = {"base": b.count(None), "sparse": s.count(None) if paired else None}
    return out


def _mean(v: list) -> float | None:
    v = [x for x in v if x is not None]
    return float(np.mean(v)) if v else None


def format_compare(res: dict) -> str:
    if res.get("control_model"):
        return format_split(res)
    paired = bool(res.get("sparse_model"))
    lines = [
        f"{res['task']}: {res['n_used']}/{res['n']} {res.get('split', 'heldout')} queries with a gap on "
        + (f"both models (base {res['base_model']}, sparse {res['sparse_model']})" if paired else res["base_model"]),
        f"{'NDF':>5} {'level':<18}{'base':>10}" + (f"{'sparse':>10}{'base/sparse':>13}" if paired else ""),
    ]
    f = lambda v, fmt=".1f": "-" if v is None else format(v, fmt)  # noqa: E731
    for t, s in res["summary"].items():
        for name, key in (
            ("component edges", "component_edges"),
            ("heads", "heads"),
            ("MLPs", "mlps"),
            ("attention entries", "token_entries"),
        ):
            d = s[key]
            line = f"{t:>5} {name:<18}{f(d['base']):>10}"
            lines.append(line + (f"{f(d['sparse']):>10}{f(d['ratio'], '.2f'):>13}" if paired else ""))
    if paired:
        lines.append("base/sparse: the base model's mean count / the sparse model's, over queries answered by both")
    if "token_removal" in res:
        lines.append(f"attention entries left out of a circuit are {res['token_removal']}")
    return "\n".join(lines)


SIDES = ("base", "control", "sparse")
SPLIT_COLUMNS = {  # claims.SPLIT's pairs as the Compare page heads them
    "base - sparse": "base - sparse [95%]",
    "from training": "from training: base - control [95%]",
    "from the gates": "from the gates: control - sparse [95%]",
}


def format_split(res: dict) -> str:
    """format_compare with a control: per target and measure (claims.MEASURES, as the Compare page) each model's
    mean over the queries all three have a gap on, base / sparse, base - sparse and its split into training and
    gates with their paired 95% intervals, and the intervals that include no effect."""
    f = lambda v, fmt=".2f": "-" if v is None else format(v, fmt)  # noqa: E731
    iv = lambda p: "-" if p is None else p["difference"].format("{:.2f}")  # noqa: E731
    lines = [
        f"{res['task']}: {res['n_used']}/{res['n']} {res.get('split', 'heldout')} queries with a gap on all three "
        f"models (base {res['base_model']}, control {res['control_model']}, sparse {res['sparse_model']})",
        f"{'NDF':>5} {'measure':<36}{'base':>8}{'control':>9}{'sparse':>8}{'base/sparse':>13}  "
        + "".join(f"{c:<42}" for c in SPLIT_COLUMNS.values())
        + "undecided",
    ]
    for t in map(str, res["targets"]):
        for name, measure in claims.MEASURES.items():
            found = claims.split(res, measure, t)
            p = found["base - sparse"]
            if p is None:
                lines.append(f"{t:>5} {name:<36}no query with a value on every model")
                continue
            means = {s: v for q in filter(None, found.values()) for s, v in q.items() if s in SIDES}
            lines.append(
                f"{t:>5} {name:<36}{f(means.get('base')):>8}{f(means.get('control')):>9}{f(means.get('sparse')):>8}"
                f"{f(p['ratio_of_means']):>13}  "
                + "".join(f"{iv(found.get(k)):<42}" for k in SPLIT_COLUMNS)
                + ("; ".join(claims.split_flags(found)) or "-")
            )
    lines.append(
        "base - sparse = (base - control: from training) + (control - sparse: from the gates), per query; control: "
        "the base fine-tuned on the sparse model's batches without gates; intervals: paired Student-t over the queries "
        "every model has a value on; base/sparse: the ratio of the means"
    )
    if "token_removal" in res:
        lines.append(f"attention entries left out of a circuit are {res['token_removal']}")
    return "\n".join(lines)
