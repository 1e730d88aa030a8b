"""An attribution graph checked against the real model: what the graph predicts for each kept feature node and top
edge, next to what an intervention in the live model measures.

Node: ablating the feature (its code set to zero at its position) moves the metric (the target logit minus the mean
logit, or target minus the graph's second logit) by minus its total effect through the graph's kept links; each
link is a direct effect on a pre-activation, so a path's effect divides by each feature's activation on the way
(one unit of pre-activation moves an active feature's code by one). Edge (from a feature or a token embedding):
the source's write into the target only (a path patching): the source ablated, every MLP between them held at the
clean run's output, so that only the residual stream and attention (its patterns live) carry it; the graph
predicts minus the link's weight. A feature target is read in the real model (by default its coefficient when the
MLP output's change is fitted on the decoder rows of the features active there, the code the graph's edge predicts;
`edge_target mlp`: the change along its own row alone), which is what exposes a transcoder's correlated shortcut
(docs/methods.md §12), or through its transcoder's encoder (`edge_target encoder`: the frozen semantics then
reproduces the graph's edges exactly).

Each node and edge is measured twice: frozen (attention patterns and normalisation scales at the clean run's, the
graph's own assumption: its direct effect, along its own path) and live (its total effect); the difference is
what goes through attention ("through_attention"); cfg.both_readings off measures cfg.semantics' reading only. A
node's readings run as one batch (measure_node_rows), and the interventions share one clean run per semantics.
Each reading gets a verdict word (VERDICTS, thresholds in CheckConfig); the one of cfg.semantics (frozen by default) is the node's or edge's `verdict`, `measured` and
`confirmed`. The confirmed share weighs each by its predicted |effect|. A rank validation (validation.py) is
added: Spearman of |predicted| against |measured| for nodes (the metric) and for feature → feature pairs (the
target's pre-activation), both semantics, zero ablation and steering ×−1. A graph built with QK attribution also
has its largest query-side and key-side parts checked (check_qk.py: the head's score read with the source removed),
in both readings with the same verdict words. Stored in the graph JSON under neuronpedia.GRAPH_CHECK[0].
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import replace

import torch

from workbench.circuits.feature.replacement import EMBED, POS_EMBED, TOKEN_EMBED
from workbench.circuits.neuronpedia import CHECK_VERDICTS, GRAPH_CHECK
from workbench.errors import BadValueError
from workbench.interventions.check_qk import check_parts, zero_at
from workbench.interventions.config import CheckConfig, InterventionConfig
from workbench.interventions.dictionary import Site
from workbench.interventions.engine import Intervention, clean_run
from workbench.interventions.generate import forward
from workbench.interventions.validation import pair_influence, rank_block

FEATURE = "cross layer transcoder"
VERDICTS = CHECK_VERDICTS  # the verdict words, from the schema that reads them
READINGS = ("frozen", "live")  # the direct effect (along the graph's own path), the total
# what an embedding node's edge check zeroes at its position, by its graph JSON "embedding" field (graph_json.py):
# the whole embedding (no field: a rotary model's, or a graph from before the split), or one of its two parts
EMBEDDING_HOOKS = {None: EMBED, "token": TOKEN_EMBED, "position": POS_EMBED}
CHECKED = ("nodes", "edges", "qk")  # the record's checked rows: feature nodes, top edges, top QK parts
CHECK_STAGES = ("nodes", "edges", "qk")  # check_graph's progress stages, in order (its progress callback)
OPS = ("ablate", "steer")  # zero ablation, and steering ×−1 (the code negated): the rank validation's two


class GraphNodes:
    """The graph JSON's parts the check reads: token ids (from the token embedding nodes), embedding nodes id ->
    (pos, the hook its edge check zeroes there), feature nodes id -> (layer, pos, latent, activation), logit nodes
    id -> token, the metric's coefficients per logit node."""

    def __init__(self, graph: dict, metric: str, tokens=None):
        nodes = graph["nodes"]
        embeddings = [n for n in nodes if n["feature_type"] == "embedding"]
        bad = sorted({str(n["embedding"]) for n in embeddings if n.get("embedding") not in EMBEDDING_HOOKS})
        if bad:
            raise BadValueError(f"embedding nodes of kind {bad}: the kinds are token and position (or none)")
        emb = sorted(
            (n["ctx_idx"], int(n["node_id"].split("_")[1])) for n in embeddings if n.get("embedding") != "position"
        )
        if tokens is None and (not emb or [p for p, _ in emb] != list(range(len(emb)))):
            raise BadValueError(
                "the graph lacks an embedding node for every position (a circuit's own JSON?): pass the prompt's "
                "tokens (a feature circuit's folder gives them)"
            )
        self.tokens = torch.as_tensor(tokens if tokens is not None else [t for _, t in emb])
        self.embeddings = {n["node_id"]: (n["ctx_idx"], EMBEDDING_HOOKS[n.get("embedding")]) for n in embeddings}
        self.features = {}
        for n in nodes:
            if n["feature_type"] == FEATURE:
                layer, latent, pos = (int(v) for v in n["node_id"].split("_"))
                self.features[n["node_id"]] = (layer, pos, latent, float(n["activation"]))
        logits = sorted(
            (not n["is_target_logit"], n["node_id"], n["feature"]) for n in nodes if n["feature_type"] == "logit"
        )
        if not logits or logits[0][0]:
            raise BadValueError("the graph has no target logit node (is_target_logit): nothing to check against")
        if metric == "difference" and len(logits) < 2:
            raise BadValueError("metric difference needs a second logit node (a graph built with --answer and --wrong)")
        self.logits = {nid: tok for _, nid, tok in logits}
        self.coef = {logits[0][1]: 1.0, **({logits[1][1]: -1.0} if metric == "difference" else {})}
        self.metric_tokens = [self.logits[nid] for nid in self.coef]

    def metric(self, logits: torch.Tensor) -> float:
        """The metric of last-position logits [d_vocab] (target minus mean, or target minus the second)."""
        t = self.metric_tokens
        return float(logits[t[0]] - (logits[t[1]] if len(t) > 1 else logits.mean()))

    def predicted(self, links: list[dict]) -> dict:
        """feature id -> the metric's change when it is ablated, through the kept links (module doc)."""
        out_links = defaultdict(list)
        for link in links:
            out_links[link["source"]].append((link["target"], float(link["weight"])))
        per_unit, total = dict(self.coef), {}
        for nid in sorted(self.features, key=lambda n: -self.features[n][0]):  # targets lie in higher layers
            total[nid] = sum(w * per_unit.get(t, 0.0) for t, w in out_links[nid])
            act = self.features[nid][3]
            per_unit[nid] = total[nid] / act if act else 0.0
        return {nid: -v for nid, v in total.items()}


def verdict(predicted: float, measured: float, cfg: CheckConfig) -> str:
    """The verdict word (VERDICTS) of a measurement against its prediction, by cfg's thresholds on their ratio."""
    p, m = abs(predicted), abs(measured)
    if p == 0:
        return "confirmed" if m == 0 else "under-predicted"
    if m <= cfg.absent * p:
        return "absent"
    if predicted * measured < 0:
        return "sign-flipped"
    if m > cfg.under * p:
        return "under-predicted"
    return "over-predicted" if m < cfg.fraction * p else "confirmed"


def readings(cfg: CheckConfig) -> tuple[str, ...]:
    """The semantics each node and edge is measured in: both, or (cfg.both_readings off) cfg.semantics' only."""
    return READINGS if cfg.both_readings else (cfg.semantics,)


def reading_row(base: dict, predicted: float, measured: dict, cfg: CheckConfig) -> dict:
    """A node's or edge's record: each reading measured with its verdict, the part through attention (live −
    frozen, where both are), and cfg.semantics' reading as `measured`, `verdict` and `confirmed`."""
    v = {s: verdict(predicted, m, cfg) for s, m in measured.items()}
    both = set(READINGS) <= set(measured)
    return {
        **base,
        "predicted": predicted,
        "measured": measured[cfg.semantics],
        "verdict": v[cfg.semantics],
        "confirmed": v[cfg.semantics] == "confirmed",
        **{f"measured_{s}": m for s, m in measured.items()},
        **{f"verdict_{s}": w for s, w in v.items()},
        **({"through_attention": measured["live"] - measured["frozen"]} if both else {}),
    }


def _feature(g: GraphNodes, nid: str) -> tuple[str, int]:
    layer, pos, latent, _ = g.features[nid]
    return f"{layer}:{latent}", pos


def feature_preacts(
    model, sites: list[Site], g: GraphNodes, hooks: list, reads=(), rows: int | None = None
) -> tuple[torch.Tensor, dict]:
    """One run with `hooks`: its logits, and every feature node's pre-activation at its layer and position (one
    encoder pass per layer over the positions its nodes sit at). rows: the prompt repeated over that many batch
    rows, hooks acting per row: logits [rows, P, d_vocab] and each pre-activation [rows]."""
    by_layer = {s.layer: s for s in sites}
    at = {by_layer[layer].read_hook for layer, *_ in g.features.values()}
    seen = {}
    capture = [(h, lambda act, hook: seen.__setitem__(hook.name, act)) for h in at]
    logits = forward(model, g.tokens, [*hooks, *capture], [*reads, *at], rows)
    pre = {}
    for layer in sorted({f[0] for f in g.features.values()}):
        ids = [nid for nid, f in g.features.items() if f[0] == layer]
        pos, latent = (torch.tensor([g.features[n][i] for n in ids]) for i in (1, 2))
        where, back = pos.unique(return_inverse=True)
        x = seen[by_layer[layer].read_hook][:, where]
        values = by_layer[layer].preacts(x.reshape(-1, x.shape[-1])).reshape(*x.shape[:2], -1)[:, back, latent]
        pre |= {nid: values[:, i] if rows else float(values[0, i]) for i, nid in enumerate(ids)}
    return (logits, pre)


def measure_node(
    model,
    sites: list[Site],
    g: GraphNodes,
    nid: str,
    semantics: str = "live",
    op: str = "ablate",
    clean: dict | None = None,
    shared: dict | None = None,
) -> tuple[float, dict]:
    """The metric's change when feature `nid` is ablated (op ablate) or its code negated (op steer) at its
    position, and each feature node's pre-activation change in the same run (from `clean`, the clean run's
    feature_preacts; empty without it). shared: shared_clean_runs', so the model's clean run is not made again."""
    feature, pos = _feature(g, nid)
    how = {"op": "scale", "value": [-1.0]} if op == "steer" else {}
    cfg = InterventionConfig(features=[feature], positions=str(pos), semantics=semantics, **how)
    iv = Intervention(model, sites, g.tokens, cfg, clean=(shared or {}).get(semantics))
    if clean is None:
        return g.metric(iv.logits()[-1]) - g.metric(iv.clean["logits"][-1]), {}
    logits, pre = feature_preacts(model, sites, g, iv.hooks(), iv.reads)
    return g.metric(logits[-1]) - g.metric(iv.clean["logits"][-1]), {t: pre[t] - clean[t] for t in pre}


def measure_node_rows(
    model, sites: list[Site], g: GraphNodes, nid: str, rows: list[tuple], clean: dict, shared: dict
) -> dict:
    """(semantics, op) of each of `rows` -> what measure_node gives for it (with `clean`), all from one batched
    run: the prompt repeated over the rows, the feature's code scaled by 0 (ablate: its zero ablation exactly) or
    −1 (steer) at its position, the frozen rows' patterns and scales held (shared: shared_clean_runs', frozen's
    among them if a row is frozen). One run per node instead of one per reading: the check's cost."""
    feature, pos = _feature(g, nid)
    cfg = InterventionConfig(features=[feature], positions=str(pos), op="scale", value=[1.0])
    frozen = torch.tensor([s == "frozen" for s, _ in rows])
    scale = torch.tensor([0.0 if op == "ablate" else -1.0 for _, op in rows])
    base = shared["frozen" if frozen.any() else "live"]
    iv = Intervention(model, sites, g.tokens, cfg, clean=base, row_scale=scale, frozen_rows=frozen)
    logits, pre = feature_preacts(model, sites, g, iv.hooks(), iv.reads, len(rows))
    m0 = g.metric(base["logits"][-1])
    return {
        row: (g.metric(logits[i, -1]) - m0, {t: float(pre[t][i]) - clean[t] for t in pre}) for i, row in enumerate(rows)
    }


def shared_clean_runs(model, sites: list[Site], g: GraphNodes, semantics) -> dict:
    """semantics -> one clean run (engine.clean_run) that every intervention of the check in it can use: every
    site's input, every layer's MLP output (any may be held), and (frozen) the patterns and scales."""
    every = list(range(model.cfg.n_layers))
    reads = list(dict.fromkeys(s.read_hook for s in sites))
    return {
        s: clean_run(model, g.tokens, reads, InterventionConfig(semantics=s, constrained_layers=every))
        for s in semantics
    }


def measure_edge(
    model, sites: list[Site], g: GraphNodes, link: dict, cfg: CheckConfig, shared: dict | None = None
) -> float:
    """The target's change when the source's write reaches it only through the residual stream and attention: the
    source (a feature, or a token's embedding, or with absolute positions its token's or its position's part: the
    hook GraphNodes.embeddings names zeroed there) ablated, the MLPs between them held (shared: shared_clean_runs').
    The target is read as its logit
    minus the mean, or a feature as cfg.edge_target says: `mlp_active` (the default), its coefficient when the real
    MLP output's change is fitted by least squares on the decoder rows of every feature active there in the clean
    run (the graph models that output as those features' codes times their rows plus a fixed error, so this is the
    code its edge predicts; co-active features whose rows overlap its own do not count as it); `mlp`, that change
    along the feature's own decoder row alone (in units of its code); `encoder`, its transcoder's pre-activation."""
    emb = link["source"] not in g.features
    pos, zeroed = g.embeddings[link["source"]] if emb else (0, None)
    src_layer = -1 if emb else g.features[link["source"]][0]
    tgt = g.features.get(link["target"])
    top = model.cfg.n_layers if tgt is None else tgt[0]
    feature = [] if emb else [_feature(g, link["source"])[0]]
    pos = pos if emb else _feature(g, link["source"])[1]
    held = list(range(src_layer + 1, top))
    icfg = InterventionConfig(features=feature, positions=str(pos), constrained_layers=held, semantics=cfg.semantics)
    iv = Intervention(model, sites, g.tokens, icfg, clean=(shared or {}).get(cfg.semantics))
    hooks = iv.hooks() + ([(zeroed, lambda act, hook: zero_at(act, pos))] if emb else [])
    how = cfg.edge_target
    w = None if tgt is None or how == "encoder" else _mlp_reading(model, sites, g, link["target"], how)
    return _read_target(model, sites, g, link["target"], how, iv, hooks, w) - _read_target(
        model, sites, g, link["target"], how, iv, iv.hooks(empty=True), w
    )


def _mlp_reading(model, sites: list[Site], g: GraphNodes, target: str, how: str) -> torch.Tensor:
    """[d_out] w such that a feature's `mlp` / `mlp_active` reading of an MLP output y is y @ w (measure_edge)."""
    layer, pos, latent, _ = g.features[target]
    site = {s.layer: s for s in sites}[layer]
    row = site.decoder_row(latent)
    if how == "mlp":
        return row / (row @ row)
    seen = {}
    forward(model, g.tokens, [(site.read_hook, lambda act, hook: seen.__setitem__("x", act[0, pos]))], [site.read_hook])
    codes = site.encode(seen["x"])[: site.n_sparse]
    active = sorted({latent, *codes.nonzero().flatten().tolist()})
    rows = torch.stack([site.decoder_row(i) for i in active]).double()
    return torch.linalg.pinv(rows)[:, active.index(latent)].to(row)


def _read_target(model, sites, g: GraphNodes, target: str, how: str, iv: Intervention, hooks: list, w=None) -> float:
    """One run with `hooks`: the target logit minus the mean, or the target feature as `how` reads it (the MLP
    readings: its output at the target's position times w, _mlp_reading)."""
    if target not in g.features:
        logits = forward(model, g.tokens, hooks, iv.reads)[-1]
        return float(logits[g.logits[target]] - logits.mean())
    layer, pos, latent, _ = g.features[target]
    site = {s.layer: s for s in sites}[layer]
    hook = site.read_hook if how == "encoder" else site.write_hook
    seen = {}
    # read before the hooks' writes: a cross-layer source also writes into the target's MLP output directly
    forward(model, g.tokens, [(hook, lambda act, hook: seen.__setitem__("a", act[0, pos])), *hooks], [*iv.reads, hook])
    if how == "encoder":
        return float(site.preacts(seen["a"])[latent])
    return float(seen["a"] @ w.to(seen["a"]))


def check_graph(
    model, sites: list[Site], graph: dict, cfg: CheckConfig | None = None, tokens=None, progress=None
) -> dict:
    """The check record (module doc) of a circuit-tracer graph dict made by the workbench through `sites`; tokens:
    the prompt's ids where the graph does not keep every position's embedding node (a feature circuit's JSON).
    progress(stage, i, n), when given, is called before each node and edge is measured and before the QK parts
    (stage one of CHECK_STAGES), so a caller (the app's prompt box) can show the check advancing."""
    cfg = cfg or CheckConfig()
    tick = progress or _quiet
    t0, c0 = time.perf_counter(), time.process_time()
    g = GraphNodes(graph, cfg.metric, tokens)
    predicted = g.predicted(graph["links"])
    measured_in = readings(cfg)
    shared = shared_clean_runs(model, sites, g, measured_in)
    runs = _measure_nodes(model, sites, g, measured_in, shared, tick)
    nodes = [
        reading_row({"node_id": nid}, p, {s: runs[s, "ablate"][nid][0] for s in measured_in}, cfg)
        for nid, p in predicted.items()
    ]
    edges = _edges(model, sites, g, graph["links"], cfg, shared, tick)
    tick(CHECK_STAGES[2], 0, 1)
    qk = [reading_row(*part, cfg) for part in check_parts(model, sites, g, graph["links"], cfg.top_qk, measured_in)]
    return {
        "schema": GRAPH_CHECK[1],
        "schema_version": GRAPH_CHECK[2],
        "semantics": cfg.semantics,
        "readings": list(measured_in),
        "config": cfg.to_dict(),
        "clean_metric": g.metric(forward(model, g.tokens, [])[-1]),
        "nodes": nodes,
        "edges": edges,
        "qk": qk,
        "spearman": _ranks(g, graph["links"], predicted, runs, measured_in),
        "summary": {
            **summary(nodes, "nodes"),
            **summary(edges, "edges"),
            **summary(qk, "qk"),
            "top_node_agrees": _top_agrees(nodes),
            "seconds": time.perf_counter() - t0,
            "cpu_seconds": time.process_time() - c0,
        },
    }


def check_edges(model, sites: list[Site], graph: dict, cfg: CheckConfig | None = None, tokens=None) -> dict:
    """The top edges' rows and their summary alone (no node is measured): another edge reading (cfg.edge_target)
    of a graph already checked, at a fraction of check_graph's cost."""
    cfg = cfg or CheckConfig()
    edges = _edges(model, sites, GraphNodes(graph, cfg.metric, tokens), graph["links"], cfg)
    return {"edges": edges, "summary": summary(edges, "edges")}


def _edges(
    model, sites: list[Site], g: GraphNodes, links: list[dict], cfg: CheckConfig, shared=None, tick=None
) -> list[dict]:
    """Each of the cfg.top_edges largest links measured in each reading, next to minus its weight (shared: the clean
    runs per semantics, shared_clean_runs's; tick: check_graph's progress)."""
    top, tick, rows = _top_links(g, links, cfg.top_edges), tick or _quiet, []
    for i, link in enumerate(top):
        tick(CHECK_STAGES[1], i, len(top))
        measured = {s: measure_edge(model, sites, g, link, replace(cfg, semantics=s), shared) for s in readings(cfg)}
        rows.append(
            reading_row({"source": link["source"], "target": link["target"]}, -float(link["weight"]), measured, cfg)
        )
    return rows


def _quiet(stage: str, i: int, n: int) -> None:
    """No progress shown (the CLI's check, and every caller that passes none)."""


def _top_links(g: GraphNodes, links: list[dict], n: int) -> list[dict]:
    """The n largest |weight| links from a feature or an embedding into a feature or a logit."""
    ok = [
        link
        for link in links
        if (link["source"] in g.features or link["source"] in g.embeddings)
        and (link["target"] in g.features or link["target"] in g.logits)
    ]
    return sorted(ok, key=lambda link: -abs(float(link["weight"])))[:n]


def _measure_nodes(model, sites: list[Site], g: GraphNodes, measured_in=READINGS, shared=None, tick=None) -> dict:
    """(semantics, op) -> feature id -> (metric change, {feature: pre-activation change}), every kept feature, in
    each semantics of measured_in: each node's readings in one batched run (measure_node_rows; tick: progress)."""
    _, clean = feature_preacts(model, sites, g, [])
    shared = shared or shared_clean_runs(model, sites, g, measured_in)
    rows = [(s, op) for s in measured_in for op in OPS]
    tick, per_node = tick or _quiet, {}
    for i, nid in enumerate(g.features):
        tick(CHECK_STAGES[0], i, len(g.features))
        per_node[nid] = measure_node_rows(model, sites, g, nid, rows, clean, shared)
    return {row: {nid: per_node[nid][row] for nid in g.features} for row in rows}


def _ranks(g: GraphNodes, links: list[dict], predicted: dict, runs: dict, measured_in=READINGS) -> dict:
    """The rank validation (validation.py): Spearman of |predicted| vs |measured| for nodes (the metric; the graph
    predicts steering ×−1 as twice the ablation, the same ranks) and for feature → feature pairs (the target's
    pre-activation), per semantics and op."""
    pairs = pair_influence(g.features, links)
    on_nodes = {s: {op: {n: runs[s, op][n][0] for n in predicted} for op in OPS} for s in measured_in}
    on_pairs = {s: {op: {(a, b): runs[s, op][a][1][b] for a, b in pairs} for op in OPS} for s in measured_in}
    return {"nodes": rank_block(predicted, on_nodes), "pairs": rank_block(pairs, on_pairs)}


def summary(rows: list[dict], what: str) -> dict:
    """The share of predicted |effect| the measurements confirm, the rows that fail, and (rows with both readings)
    how many get each verdict in each."""
    total = sum(abs(r["predicted"]) for r in rows)
    ok = sum(abs(r["predicted"]) for r in rows if r["confirmed"])
    failed = [_name(r) for r in rows if not r["confirmed"]]
    out = {
        f"{what}_checked": len(rows),
        f"{what}_confirmed_share": ok / total if total else None,
        f"{what}_failed": failed,
    }
    measured_in = [s for s in READINGS if rows and f"verdict_{s}" in rows[0]]
    if measured_in:
        out[f"{what}_verdicts"] = {s: dict(Counter(r[f"verdict_{s}"] for r in rows)) for s in measured_in}
    return out


def _name(r: dict) -> str:
    """A node's id, an edge as source -> target, a QK part as source -> head [query, key] (side)."""
    if "head" in r:
        return f"{r['source']} -> {r['head']} [{r['query']}, {r['key']}] ({r['side']})"
    return r.get("node_id") or f"{r['source']} -> {r['target']}"


def _top_agrees(nodes: list[dict]) -> bool | None:
    if not nodes:
        return None

    def top(key):
        return max(nodes, key=lambda r: abs(r[key]))["node_id"]

    return top("predicted") == top("measured")


def report_lines(record: dict) -> list[str]:
    """What `circuit check` prints beyond the shares: each edge's verdict in each reading measured (with the part
    through attention where both are), the verdict counts, and the Spearman values (None: fewer than 3 points, or a
    constant side)."""
    measured_in = record.get("readings", READINGS)
    name = {"frozen": "direct (frozen)", "live": "total (live)"}
    lines = []
    for e in record["edges"]:
        parts = [f"{name[r]} {e[f'measured_{r}']:+.4g} {e[f'verdict_{r}']}" for r in measured_in]
        if "through_attention" in e:
            parts.append(f"through attention {e['through_attention']:+.4g}")
        lines.append(f"edge {e['source']} -> {e['target']}: predicted {e['predicted']:+.4g}; " + "; ".join(parts))
    for r in record.get("qk", ()):
        parts = [f"{name[m]} {r[f'measured_{m}']:+.4g} {r[f'verdict_{m}']}" for m in measured_in]
        lines.append(f"qk {_name(r)}: score {r['score']:+.4g}, predicted {r['predicted']:+.4g}; " + "; ".join(parts))
    s = record["summary"]
    for what in CHECKED:
        if what == "qk" and not record.get("qk"):  # a graph built without --qk, or a record made before
            continue
        for reading in measured_in:
            counts = s.get(f"{what}_verdicts", {}).get(reading, {})
            words = ", ".join(f"{counts[w]} {w}" for w in VERDICTS if w in counts) or "none checked"
            lines.append(f"{what} {name[reading]}: {words}")
    for what, block in record["spearman"].items():
        values = "; ".join(
            f"{reading} {op} {'n/a' if block[reading][op] is None else f'{block[reading][op]:.3f}'}"
            for reading in measured_in
            for op in OPS
        )
        lines.append(f"Spearman |predicted| vs |measured|, {what} (n={block['n']}): {values}")
    return lines
