"""A feature-level query circuit (docs/methods.md §11): `find_feature_circuit(model, transcoders, prompt, answer,
counterfactual)` -> (FeatureCircuit, AttributionGraph). The circuit is a set of nodes of the transcoder
replacement found by feature_search.py with NDF measured in the real model; its edges are the attribution
graph's edges between its nodes, each split over the heads that carry it (graph_heads.py). Saved as its own
JSON (schema workbench.feature_circuit v1, read without torch by schema.read_feature_circuit) and exported to
circuit-tracer / Neuronpedia graph JSON with the circuit's nodes only (graph_json.to_neuronpedia).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import torch

from workbench.atomic import write_json
from workbench.circuits.config import QueryConfig, SearchConfig
from workbench.circuits.feature import graph_heads
from workbench.circuits.feature.attribution_graph import GraphConfig, build_graph
from workbench.circuits.feature.feature_search import FeatureSearch, node_keys
from workbench.circuits.feature.replacement import ReplacementModel
from workbench.circuits.feature.transcoders import resolve
from workbench.circuits.inputs import str_tokens
from workbench.circuits.schema import FEATURE_SCHEMA
from workbench.errors import BadValueError
from workbench.provenance import model_id


@dataclass
class FeatureCircuit:
    nodes: list[dict]  # the circuit's nodes: name, kind, layer, pos, latent, clean / ablated value, score, effect
    edges: list[dict]  # graph edges between them (and into the logits): source, target, weight, heads
    universe: dict  # how many nodes of each kind the search chose from
    query: dict
    method: dict  # search and graph settings, the transcoder set and member
    faithfulness: dict
    graph_scores: dict  # the full graph's replacement and completeness scores
    model_id: str = ""
    seed: int = 0
    graph_nodes: torch.Tensor | None = field(default=None, repr=False)  # [graph nodes] bool, for the export

    @property
    def ndf(self) -> float:
        return self.faithfulness["ndf"]

    def summary(self) -> str:
        f, u = self.faithfulness, self.universe
        kinds = {k: sum(n["kind"] == k for n in self.nodes) for k in ("feature", "error", "embedding")}
        lines = [
            f"feature circuit: {len(self.nodes)} of {u['nodes']} nodes ({kinds['feature']} features, "
            f"{kinds['error']} error nodes, {kinds['embedding']} embeddings), {len(self.edges)} graph edges",
            f"NDF {f['ndf']:.3f}  NFS {f['nfs']:.3f}  gap {f['gap']:.3f} ({self.method['search']['metric']}); "
            f"top-k of the query's attribution at the same size: NDF {f['baseline_topk_ndf']:.3f}",
            f"graph: replacement {self.graph_scores['replacement']:.3f}, completeness "
            f"{self.graph_scores['completeness']:.3f}",
        ]
        top = sorted(self.nodes, key=lambda n: -abs(n.get("effect", 0.0)))[:12]
        return "\n".join(lines + [f"  {n['name']}: effect {n.get('effect', 0.0):+.4f}" for n in top])

    def to_dict(self) -> dict:
        d = {k: v for k, v in dataclasses.asdict(self).items() if k != "graph_nodes"}
        return {"schema": FEATURE_SCHEMA[0], "schema_version": FEATURE_SCHEMA[1], **d}

    def save(self, path) -> None:
        write_json(path, self.to_dict())


def _graph_nodes(search: FeatureSearch, g, mask: torch.Tensor) -> torch.Tensor:
    """The circuit's nodes as a mask over the graph's nodes (features, errors, tokens, logits: always kept)."""
    setup = search.setup
    where = {("f", *row): i for i, row in enumerate(g.features.tolist())}
    out = torch.zeros(g.n_sources + len(g.logit_tokens), dtype=torch.bool)
    for key, keep in zip(node_keys(setup), mask.tolist()):
        if keep and key[0] == "f" and key in where:
            out[where[key]] = True
    out[g.n_features : g.n_sources] = mask[setup.n_features :]
    out[g.n_sources :] = True
    return out


def circuit_edges(g, nodes: torch.Tensor) -> torch.Tensor:
    """[rows, sources] bool: the graph's nonzero edges between the given graph nodes."""
    rows = torch.cat([nodes[: g.n_features], nodes[g.n_sources :]])
    return (g.adjacency != 0) & rows[:, None] & nodes[None, : g.n_sources]


def _node_rows(search: FeatureSearch, mask: torch.Tensor, effects: dict, tokens: list[str]) -> list[dict]:
    s = search.setup
    out = []
    for i in mask.nonzero().flatten().tolist():
        row = {"name": s.node_name(i), "score": float(search.scores[i]), "effect": float(effects.get(i, 0.0))}
        if i < s.n_features:
            layer, pos, latent = s.features[i].tolist()
            row.update(kind="feature", layer=layer, pos=pos, latent=latent)
            row.update(clean=float(s.clean_values[i]), ablated=float(s.ablated_values[i]))
        elif i < s.n_features + s.n_errors:
            layer, pos = divmod(i - s.n_features, s.P)
            row.update(kind="error", layer=layer, pos=pos)
        else:
            pos = i - s.n_features - s.n_errors
            row.update(kind="embedding", layer=None, pos=pos)
        row["token"] = tokens[row["pos"]]
        out.append(row)
    return out


def _edge_rows(rm: ReplacementModel, g, nodes: torch.Tensor, batch_size: int) -> list[dict]:
    emask = circuit_edges(g, nodes)
    split = graph_heads.split_edges(rm, g, emask, batch_size)
    out = []
    for (r, c), w in zip(split["edges"].tolist(), split["weights"]):
        keep = (w.abs() >= 0.05 * w.abs().sum()).nonzero().flatten().tolist()
        heads = {split["names"][k]: float(w[k]) for k in sorted(keep, key=lambda k: -abs(float(w[k])))}
        out.append(
            {
                "source": g.node_name(c),
                "target": g.node_name(g.row_node(r)),
                "weight": float(g.adjacency[r, c]),
                "heads": heads,
            }
        )
    return out


def _faithfulness(model, search: FeatureSearch, found, samples: dict) -> dict:
    """What the search measured: clean / empty / circuit metric, NDF and NFS, the best-of-N spread, the NDF under
    each resampled counterfactual, the model's own prediction."""
    from workbench.circuits.component.api import prediction

    ev, cfg = search.ev, search.cfg
    return dict(
        metric=cfg.metric,
        ablation=cfg.ablation,
        clean=ev.clean,
        empty=ev.empty,
        circuit=found.value,
        gap=ev.gap,
        ndf=found.ndf,
        nfs=found.nfs,
        selected=found.source,
        baseline_topk_ndf=found.baseline_ndf,
        ndf_candidates=found.candidates,
        ndf_resampled=search.ndf_under(found.mask, samples),
        exact_evaluations=ev.n_evaluated,
        **prediction(model, search.query, search.setup.clean.logits),
    )


def find_feature_circuit(
    model,
    transcoders,
    prompt,
    answer=None,
    counterfactual=None,
    *,
    query: QueryConfig | None = None,
    cfg: SearchConfig | None = None,
    graph_cfg: GraphConfig | None = None,
    counterfactuals=(),
    **options,
):
    """(FeatureCircuit, AttributionGraph) of one query: the sparsest node set reaching target_ndf (default
    config.DEFAULT_TARGET_NDF), or the most faithful within `budget` (a fraction of the nodes), as `query`
    (QueryConfig) says. transcoders: a transcoders.Transcoders, a set folder or a list of transcoders.Transcoder;
    counterfactuals: resampled counterfactuals for best-of-N (a synthetic Query as the prompt brings n_samples of
    them); options set fields of QueryConfig or SearchConfig."""
    from workbench.circuits.component.api import prepare_all

    query, options = QueryConfig.take(query, options)
    query = query.targeted()
    budget, target_ndf, seed, member = query.budget, query.target_ndf, query.seed, query.member
    cfg, graph_cfg = dataclasses.replace(cfg or SearchConfig(), **options), graph_cfg or GraphConfig()
    cfg = cfg if cfg.drops != "auto" else dataclasses.replace(cfg, drops=FeatureSearch.DROPS)  # saved as used
    tcs = resolve(transcoders, model, member)
    source = None if tcs.source is None else str(tcs.source.folder)
    q, samples = prepare_all(
        model, prompt, answer, counterfactual, query.wrong, (), counterfactuals, query.n_samples, seed, cfg.metric
    )
    samples = {k: s for k, s in samples.items() if k.startswith("cf")}
    g = build_graph(model, tcs, q.tokens, q.answer, q.wrong, dataclasses.replace(graph_cfg, heads=False))
    g.prompt = q.prompt
    torch.manual_seed(seed)
    search = FeatureSearch(model, tcs, q, samples, cfg, g)
    found = search.find(budget, target_ndf)
    nodes = _graph_nodes(search, g, found.mask)
    rm = ReplacementModel(model, tcs, q.tokens)
    if graph_cfg.heads:  # the full graph's pruned edges too, for its own export
        g.heads = graph_heads.split_edges(rm, g, g.pruned.edge_mask, graph_cfg.batch_size)
    toks = str_tokens(model, q.tokens)
    faith = _faithfulness(model, search, found, samples)
    if target_ndf is not None:  # the baseline's own size at the same target
        faith["baseline_topk_nodes"] = int(search.topk_sparsest(target_ndf).mask.sum())
    s = search.setup
    circuit = FeatureCircuit(
        nodes=_node_rows(search, found.mask, search.node_effects(found), toks),
        edges=_edge_rows(rm, g, nodes, graph_cfg.batch_size),
        universe=dict(nodes=s.n_nodes, features=s.n_features, errors=s.n_errors, embeddings=s.P),
        query={**q.to_dict(), "str_tokens": toks, "samples": {n: v.to_dict() for n, v in samples.items()}},
        method=dict(
            name="feature-query-search",
            budget=budget,
            target_ndf=target_ndf,
            search=cfg.to_dict(),
            graph=dataclasses.asdict(graph_cfg),
            transcoders=source,
            member=member,
            rankings=sorted(search.absolute),
        ),
        faithfulness=faith,
        graph_scores=dict(g.scores),
        model_id=model_id(model),
        seed=seed,
        graph_nodes=nodes,
    )
    return circuit, g


def circuit_heads(circuit: FeatureCircuit) -> set[str]:
    """The heads named on the circuit's edges (each carrying at least graph_json.HEAD_SHARE of an edge's split)."""
    return {h for e in circuit.edges for h in e["heads"] if h != "direct"}


def evaluate_feature_task(
    model,
    transcoders,
    task: str,
    n: int = 20,
    *,
    query: QueryConfig | None = None,
    cfg: SearchConfig | None = None,
    graph_cfg: GraphConfig | None = None,
    compare_heads: bool = True,
    **options,
) -> dict:
    """Feature circuits of n generated queries of a task family at the query's target NDF (default
    config.DEFAULT_TARGET_NDF): nodes and edges (search vs the top-k baseline's node count), replacement and
    completeness, and (compare_heads) how the heads the feature circuit names overlap those of the
    component-level circuit of the same query (Jaccard). Queries the model does not answer, or whose gap
    vanishes, are skipped and listed. options set fields of QueryConfig."""
    from workbench.circuits.component.api import find_circuit, prediction, retarget
    from workbench.circuits.inputs import prepare
    from workbench.circuits.search import ZeroGapError
    from workbench.corpus import tasks

    query, rest = QueryConfig.take(query, options)
    if rest:
        raise BadValueError(f"unknown options {sorted(rest)}; the per-query values are QueryConfig's fields")
    query = query.targeted()
    if query.target_ndf is None:
        raise BadValueError("feature circuits of a task are found at a target NDF, not a budget")
    cfg = cfg or SearchConfig()
    tcs = resolve(transcoders, model, query.member)
    seed, target_ndf = query.seed, query.target_ndf
    rows, skipped = [], []
    for cq in tasks.queries(task, n, seed=seed, tokenizer=model.tokenizer):
        cq = retarget(model, cq)
        pred = prediction(model, prepare(model, cq.prompt, cq.answer, cq.counterfactual, cq.wrong))
        if not pred["predicts_answer"]:
            skipped.append({"prompt": cq.prompt, "reason": f"the model's top-1 is {pred['top1']!r}"})
            continue
        t0 = time.process_time()
        try:
            c, _ = find_feature_circuit(model, tcs, cq, query=query, cfg=cfg, graph_cfg=graph_cfg)
        except ZeroGapError as e:
            skipped.append({"prompt": cq.prompt, "reason": str(e)})
            continue
        row = dict(
            prompt=cq.prompt,
            nodes=len(c.nodes),
            edges=len(c.edges),
            ndf=c.ndf,
            topk_nodes=c.faithfulness["baseline_topk_nodes"],
            cpu_seconds=time.process_time() - t0,
            **c.graph_scores,
        )
        if compare_heads:
            comp = find_circuit(model, cq, query=query, cfg=cfg, curve=False)
            mine, theirs = circuit_heads(c), {x for x in comp.nodes if ".h" in x}
            row.update(
                heads=sorted(mine),
                component_heads=sorted(theirs),
                heads_jaccard=len(mine & theirs) / max(1, len(mine | theirs)),
            )
        rows.append(row)
    return dict(task=task, n=n, target_ndf=target_ndf, rows=rows, skipped=skipped, search=cfg.to_dict())
