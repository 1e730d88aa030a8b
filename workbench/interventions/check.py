"""An attribution graph checked against the real model: what the graph predicts for each kept feature node and top
edge, next to what an intervention in the live model measures.

Node: ablating the feature (its code set to zero at its position) moves the metric (the target logit minus the mean
logit, or target minus the graph's second logit) by minus its total effect through the graph's kept links; each
link is a direct effect on a pre-activation, so a path's effect divides by each feature's activation on the way
(one unit of pre-activation moves an active feature's code by one). Edge (from a feature or a token embedding):
the source's write into the target only (a path patching): the source ablated, every MLP between them held at the
clean run's output, so that only the residual stream and attention (its patterns live) carry it; the graph
predicts minus the link's weight. A feature target is read in the real model (the MLP output's change along its
decoder row), which is what exposes a transcoder's correlated shortcut (docs/methods.md §12), or through its
transcoder's encoder (`edge_target encoder`: the frozen semantics then reproduces the graph's edges exactly).

A node or edge fails when its measured effect is below `fraction` of the predicted one or of the opposite sign;
the confirmed share weighs each by its predicted |effect|. Stored in the graph JSON under schema.GRAPH_CHECK[0].
"""

from __future__ import annotations

import time
from collections import defaultdict

import torch

from workbench.circuits.schema import GRAPH_CHECK
from workbench.errors import BadValueError
from workbench.interventions.config import CheckConfig, InterventionConfig
from workbench.interventions.dictionary import EMBED, Site
from workbench.interventions.engine import Intervention
from workbench.interventions.generate import forward

FEATURE = "cross layer transcoder"


class GraphNodes:
    """The graph JSON's parts the check reads: token ids (from the embedding nodes), feature nodes
    id -> (layer, pos, latent, activation), logit nodes id -> token, the metric's coefficients per logit node."""

    def __init__(self, graph: dict, metric: str, tokens=None):
        nodes = graph["nodes"]
        emb = sorted((n["ctx_idx"], int(n["node_id"].split("_")[1])) for n in nodes if n["feature_type"] == "embedding")
        if tokens is None and (not emb or [p for p, _ in emb] != list(range(len(emb)))):
            raise BadValueError(
                "the graph lacks an embedding node for every position (a circuit's own JSON?): pass the prompt's "
                "tokens (a feature circuit's folder gives them)"
            )
        self.tokens = torch.as_tensor(tokens if tokens is not None else [t for _, t in emb])
        self.embeddings = {n["node_id"]: n["ctx_idx"] for n in nodes if n["feature_type"] == "embedding"}
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


def _verdict(predicted: float, measured: float, fraction: float) -> bool:
    return predicted * measured > 0 and abs(measured) >= fraction * abs(predicted)


def _feature(g: GraphNodes, nid: str) -> tuple[str, int]:
    layer, pos, latent, _ = g.features[nid]
    return f"{layer}:{latent}", pos


def measure_node(model, sites: list[Site], g: GraphNodes, nid: str, semantics: str = "live") -> float:
    """The metric's change when feature `nid` is ablated at its position in the model."""
    feature, pos = _feature(g, nid)
    cfg = InterventionConfig(features=[feature], positions=str(pos), semantics=semantics)
    iv = Intervention(model, sites, g.tokens, cfg)
    return g.metric(iv.logits()[-1]) - g.metric(iv.clean["logits"][-1])


def measure_edge(model, sites: list[Site], g: GraphNodes, link: dict, cfg: CheckConfig) -> float:
    """The target's change when the source's write reaches it only through the residual stream and attention: the
    source (a feature, or a token's embedding) ablated, the MLPs between them held. The target is read as its logit
    minus the mean, or a feature as cfg.edge_target says: `mlp`, the real MLP output's change along the feature's
    decoder row (in units of its code); `encoder`, its transcoder's pre-activation."""
    emb = link["source"] not in g.features
    src_layer, pos = (-1, g.embeddings[link["source"]]) if emb else (g.features[link["source"]][0], 0)
    tgt = g.features.get(link["target"])
    top = model.cfg.n_layers if tgt is None else tgt[0]
    feature = [] if emb else [_feature(g, link["source"])[0]]
    pos = pos if emb else _feature(g, link["source"])[1]
    held = list(range(src_layer + 1, top))
    icfg = InterventionConfig(features=feature, positions=str(pos), constrained_layers=held, semantics=cfg.semantics)
    iv = Intervention(model, sites, g.tokens, icfg)
    hooks = iv.hooks() + ([(EMBED, lambda act, hook: _zero_at(act, pos))] if emb else [])
    return _read_target(model, sites, g, link["target"], cfg.edge_target, iv, hooks) - _read_target(
        model, sites, g, link["target"], cfg.edge_target, iv, iv.hooks(empty=True)
    )


def _zero_at(act: torch.Tensor, pos: int) -> torch.Tensor:
    act = act.clone()
    act[:, pos] = 0
    return act


def _read_target(model, sites, g: GraphNodes, target: str, how: str, iv: Intervention, hooks: list) -> float:
    """One run with `hooks`: the target logit minus the mean, or the target feature as `how` reads it."""
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
    row = site.decoder_row(latent).to(seen["a"])
    return float(seen["a"] @ row / (row @ row))


def check_graph(model, sites: list[Site], graph: dict, cfg: CheckConfig | None = None, tokens=None) -> dict:
    """The check record (module doc) of a circuit-tracer graph dict made by the workbench through `sites`; tokens:
    the prompt's ids where the graph does not keep every position's embedding node (a feature circuit's JSON)."""
    cfg = cfg or CheckConfig()
    t0, c0 = time.perf_counter(), time.process_time()
    g = GraphNodes(graph, cfg.metric, tokens)
    predicted = g.predicted(graph["links"])
    nodes = []
    for nid, p in predicted.items():
        m = measure_node(model, sites, g, nid, cfg.semantics)
        nodes.append({"node_id": nid, "predicted": p, "measured": m, "confirmed": _verdict(p, m, cfg.fraction)})
    links = [
        link
        for link in graph["links"]
        if (link["source"] in g.features or link["source"] in g.embeddings)
        and (link["target"] in g.features or link["target"] in g.logits)
    ]
    links = sorted(links, key=lambda link: -abs(float(link["weight"])))[: cfg.top_edges]
    edges = []
    for link in links:
        p, m = -float(link["weight"]), measure_edge(model, sites, g, link, cfg)
        edges.append(
            {
                "source": link["source"],
                "target": link["target"],
                "predicted": p,
                "measured": m,
                "confirmed": _verdict(p, m, cfg.fraction),
            }
        )
    return {
        "schema": GRAPH_CHECK[1],
        "schema_version": GRAPH_CHECK[2],
        "semantics": cfg.semantics,
        "config": cfg.to_dict(),
        "clean_metric": g.metric(forward(model, g.tokens, [])[-1]),
        "nodes": nodes,
        "edges": edges,
        "summary": {
            **summary(nodes, "nodes"),
            **summary(edges, "edges"),
            "top_node_agrees": _top_agrees(nodes),
            "seconds": time.perf_counter() - t0,
            "cpu_seconds": time.process_time() - c0,
        },
    }


def summary(rows: list[dict], what: str) -> dict:
    """The share of predicted |effect| the measurements confirm, and the rows that fail."""
    total = sum(abs(r["predicted"]) for r in rows)
    ok = sum(abs(r["predicted"]) for r in rows if r["confirmed"])
    failed = [r.get("node_id") or f"{r['source']} -> {r['target']}" for r in rows if not r["confirmed"]]
    return {
        f"{what}_checked": len(rows),
        f"{what}_confirmed_share": ok / total if total else None,
        f"{what}_failed": failed,
    }


def _top_agrees(nodes: list[dict]) -> bool | None:
    if not nodes:
        return None

    def top(key):
        return max(nodes, key=lambda r: abs(r[key]))["node_id"]

    return top("predicted") == top("measured")
