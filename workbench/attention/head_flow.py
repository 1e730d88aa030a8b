"""The heads that carry the attention-mediated attribution reaching the answer logit, and the attention entries
each feature -> feature edge uses (docs/methods.md §11, "Heads carrying the attribution"): the base and the
sparse-attention model compared on the same queries, each through its own transcoder set.

Per query: the attribution graph of the prompt with the answer and wrong-answer logits as targets, pruned as
circuit-tracer prunes. Every kept edge s -> t (t a feature or the answer logit) is split over the heads of its
first attention hop (graph_heads.split_edges) and weighted by how much of t reaches the answer logit:
w_e = I(t) / R_t, I the influence on the answer logit alone (I = 1 at the answer logit), R_t the sum of |kept
edges into t|, as influence normalises rows. A head's mass is sum_e w_e |part_e,h|; the count is the fewest
heads whose mass covers `share` of all heads' mass (the direct, no-attention parts are left out). Entries: each
kept feature -> feature edge with an attention part, split over the (layer, head, query, key) entries of its
first hop (graph_heads.split_entries); its count is the fewest entries covering `share` of sum |entry parts|,
and the entries with a nonzero part are counted too (the sparse model's closed entries are exactly zero).
Both models answer the same queries, so a family's base - sparse gap is read from the per-query differences
(a paired Student-t interval), not from two separate means.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from workbench.attention.claims import format_gap
from workbench.circuits.feature import graph_heads
from workbench.circuits.feature import influence as inf
from workbench.circuits.feature.attribution_graph import GraphConfig, build_graph
from workbench.circuits.feature.graph_config import HeadFlowConfig
from workbench.circuits.feature.replacement import ReplacementModel
from workbench.circuits.feature.transcoders import open_set
from workbench.errors import BadValueError
from workbench.intervals import paired_difference

# the per-query measures summarised over a family: name -> how to read it from one model's query_heads row
MEASURES = {
    "heads_needed": lambda r: r["heads_needed"],
    "attention_share": lambda r: r["attention_share"],
    "entries_covering": lambda r: r["entries"]["covering"],
    "entries_nonzero": lambda r: r["entries"]["nonzero"],
    "feature_edges": lambda r: r["entries"]["edges"],
}
PAIRED = ("heads_needed", "entries_covering")  # the measures read as base - sparse on the same queries


def fewest_covering(values: torch.Tensor, share: float) -> int | None:
    """The fewest of the values (largest first) whose sum reaches `share` of the total; None if all are 0."""
    v = values.flatten().abs().sort(descending=True).values.double()
    total = float(v.sum())
    if total <= 0:
        return None
    return int(torch.searchsorted(v.cumsum(0), torch.tensor(share * total, dtype=v.dtype) * (1 - 1e-12))) + 1


def edge_weights(g, answer_row: int | None = None) -> torch.Tensor:
    """[n split edges]: w_e = I(t) / R_t of each edge in g.heads (the module doc). answer_row: the answer
    logit's row (default the first logit row)."""
    answer_row = g.n_features if answer_row is None else answer_row
    kept = g.adjacency * g.pruned.edge_mask
    weight = torch.zeros(kept.shape[0], dtype=kept.dtype)
    weight[answer_row] = 1.0
    weight[: g.n_features] = inf.influence(inf.normalise(kept), g.n_features, weight[g.n_features :])[: g.n_features]
    per_row = weight / kept.abs().sum(1).clamp_min(1e-30)
    return per_row[g.heads["edges"][:, 0]]


def head_mass(g, answer_row: int | None = None) -> tuple[torch.Tensor, float]:
    """([n_layers * n_heads] each head's answer-weighted attention-mediated mass, the same weighting over the
    direct parts) from the graph's kept edges and their head split g.heads."""
    w, parts = edge_weights(g, answer_row), g.heads["weights"]
    return (w[:, None] * parts[:, :-1].abs()).sum(0), float((w * parts[:, -1].abs()).sum())


def entry_counts(rm: ReplacementModel, g, share: float, batch_size: int = 32) -> dict:
    """Attention entries per kept feature -> feature edge whose first hop crosses attention: the mean and median
    of the fewest entries covering `share` of the edge's |entry parts|, and of its entries with a nonzero part."""
    edges = g.heads["edges"]
    ff = (edges[:, 0] < g.n_features) & (edges[:, 1] < g.n_features)
    ff &= g.heads["weights"][:, :-1].abs().sum(1) > 0
    edges = edges[ff]
    if not edges.shape[0]:
        return {"edges": 0, "covering": None, "covering_median": None, "nonzero": None, "nonzero_median": None}
    parts = graph_heads.split_entries(rm, g, edges, batch_size).flatten(1)
    cover = [fewest_covering(p, share) for p in parts]
    cover = np.array([c for c in cover if c is not None])
    nonzero = (parts != 0).sum(1).numpy()
    return {
        "edges": int(edges.shape[0]),
        "covering": float(cover.mean()) if cover.size else None,
        "covering_median": float(np.median(cover)) if cover.size else None,
        "nonzero": float(nonzero.mean()),
        "nonzero_median": float(np.median(nonzero)),
    }


def query_heads(model, tcs, q, cfg: HeadFlowConfig) -> dict:
    """One query (a QueryInput) on one model: the heads needed for `share`, each head's share, the entries."""
    gcfg = GraphConfig(**{**cfg.graph, "heads": True})
    g = build_graph(model, tcs, q.tokens, q.answer, q.wrong, gcfg)
    mass, direct = head_mass(g)
    rm = ReplacementModel(model, tcs, q.tokens)
    entries = entry_counts(rm, g, cfg.share, gcfg.batch_size)
    rm.release()
    names = graph_heads.head_names(g.n_layers, g.n_heads)[:-1]
    total = float(mass.sum())
    return {
        "heads_needed": fewest_covering(mass, cfg.share),
        "heads": g.n_layers * g.n_heads,
        "head_share": {n: float(m) / total for n, m in zip(names, mass) if total > 0 and m > 0},
        "attention_share": total / max(1e-30, total + direct),
        "kept_edges": int(g.pruned.edge_mask.sum()),
        "entries": entries,
        "replacement": g.scores["replacement"],
    }


def compare_heads(
    base, sparse, base_set, sparse_set, task: str, n: int, seed: int = 0, cfg=None, control=None, control_set=None
) -> dict:
    """query_heads on n queries of a task family from cfg.split, on both models (each with its own set, checked
    to belong to it), asked for the base model's answer; per model the mean and median over the queries, and
    base - sparse with its paired interval. Each query also says whether its prompt occurs in the training
    cache of either set (held-out combinations should not). control (with its own control_set): the base
    fine-tuned without gates, measured beside both, base - sparse split into base - control and control - sparse."""
    from workbench.attention.compare import check_same_vocab
    from workbench.cache.overlap import seen_in_training
    from workbench.circuits.component.api import retarget
    from workbench.circuits.inputs import prepare
    from workbench.corpus import tasks
    from workbench.provenance import model_id

    cfg = cfg or HeadFlowConfig()
    models = {"base": (base, base_set), "control": (control, control_set), "sparse": (sparse, sparse_set)}
    if (control is None) != (control_set is None):
        raise BadValueError("a control is measured through its own dictionary: pass both control and control_set")
    models = {side: pair for side, pair in models.items() if pair[0] is not None}
    for model, _ in list(models.values())[1:]:
        check_same_vocab(base, model)
    sets = {side: open_set(folder) for side, (_, folder) in models.items()}
    sides = {side: (m, sets[side].load(device=m.cfg.device, model=m)) for side, (m, _) in models.items()}
    seen = {side: seen_in_training(tset.cache) for side, tset in sets.items()}
    rows = []
    for cq in tasks.queries(task, n, seed=seed, tokenizer=base.tokenizer, split=cfg.split):
        cq = retarget(base, cq)
        row = {"prompt": cq.prompt, "answer": cq.answer, "wrong": cq.wrong, "in_training_cache": {}}
        for side, (model, tcs) in sides.items():
            q = prepare(model, cq.prompt, cq.answer, cq.counterfactual, cq.wrong)
            row["in_training_cache"][side] = seen[side](q.tokens[1:].tolist())  # without BOS, as the cache
            row[side] = query_heads(model, tcs, q, cfg)
        rows.append(row)
    return {
        "task": task,
        "n": n,
        "seed": seed,
        "split": cfg.split,
        "config": cfg.to_dict(),
        "base_model": model_id(base),
        "sparse_model": model_id(sparse),
        **({"control_model": model_id(control)} if control is not None else {}),
        "transcoders": {side: str(tset.folder) for side, tset in sets.items()},
        "summary": {side: _summary([r[side] for r in rows]) for side in sides},
        **{f"{a}_minus_{b}": {key: paired_gap(rows, key, a, b) for key in PAIRED} for a, b in _pairs(sides)},
        "in_training_cache": {side: sum(bool(r["in_training_cache"][side]) for r in rows) for side in sides},
        "queries": rows,
    }


def _pairs(sides) -> list[tuple[str, str]]:
    """base - sparse, and with a control its split: base - control (training), control - sparse (the gates)."""
    return [("base", "sparse")] + ([("base", "control"), ("control", "sparse")] if "control" in sides else [])


def paired_gap(rows: list[dict], key: str, a: str = "base", b: str = "sparse", confidence: float = 0.95) -> dict:
    """a - b (default base - sparse) of one measure over the queries where both models have it (MEASURES[key]):
    the mean with its paired Student-t interval (the models answer the same queries; bounds None below two)."""
    read = MEASURES[key]
    base = {i: read(r[a]) for i, r in enumerate(rows) if read(r[a]) is not None}
    sparse = {i: read(r[b]) for i, r in enumerate(rows) if read(r[b]) is not None}
    if not set(base) & set(sparse):
        return {"mean": None, "lo": None, "hi": None, "n": 0, "confidence": confidence}
    d = paired_difference(base, sparse, confidence)
    bound = lambda v: None if math.isnan(v) else v  # noqa: E731
    return {"mean": d.mean, "lo": bound(d.lo), "hi": bound(d.hi), "n": d.n, "confidence": confidence}


def _summary(rows: list[dict]) -> dict:
    def stats(values):
        v = [x for x in values if x is not None]
        return {"mean": float(np.mean(v)), "median": float(np.median(v))} if v else {"mean": None, "median": None}

    return {key: stats([read(r) for r in rows]) for key, read in MEASURES.items()}


SPLIT_NAMES = {  # the pairs of _pairs as the Compare page names them
    ("base", "sparse"): "base - sparse",
    ("base", "control"): "from training: base - control",
    ("control", "sparse"): "from the gates: control - sparse",
}


def format_head_compare(res: dict) -> str:
    """The per-model means / medians and each pair's paired gap (with a control: base - sparse and its split)."""
    share = res["config"]["share"]
    sides = [s for s in ("base", "control", "sparse") if s in res["summary"]]
    f = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    models = ", ".join(f"{s} {res[f'{s}_model']}" for s in sides)
    seen = ", ".join(f"{s} set's {res['in_training_cache'][s]}" for s in sides)
    lines = [
        f"{res['task']}: {res['n']} queries of the {res['split']} split ({models}); prompts in the training cache: "
        f"{seen}",
        f"{'measure (mean / median over queries)':<52}" + "".join(f"{s:>16}" for s in sides),
    ]
    for name, key in (
        (f"heads carrying {share:.0%} of the attention-mediated part", "heads_needed"),
        (f"entries per feature edge covering {share:.0%}", "entries_covering"),
        ("entries per feature edge, nonzero", "entries_nonzero"),
        ("feature -> feature edges crossing attention", "feature_edges"),
    ):
        stats = [res["summary"][s][key] for s in sides]
        lines.append(f"{name:<52}" + "".join(f"{f(v['mean']) + ' / ' + f(v['median']):>16}" for v in stats))
    shares = "".join(f"{res['summary'][s]['attention_share']['mean']:>16.3f}" for s in sides)
    lines.append(f"{'attention-mediated share of the weighted attribution':<52}{shares}")
    for a, b in _pairs(sides):
        for name, key in (("heads", "heads_needed"), ("entries per edge", "entries_covering")):
            gap = res[f"{a}_minus_{b}"][key]
            lines.append(
                f"{SPLIT_NAMES[a, b]}, {name} covering {share:.0%} [paired t {gap['confidence']:.0%}]: "
                f"{format_gap(gap)}"
            )
    return "\n".join(lines)
