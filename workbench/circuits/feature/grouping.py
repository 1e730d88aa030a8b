"""Supernodes of an attribution graph proposed from four signals and each checked by ablating it in the real model
(`workbench circuit group`, issue #47).

Which features may share a group: the graph's feature nodes at one token position, any layer (scope `position`):
circuit-tracer's supernodes gather the features at one token that carry one concept, usually over several layers;
or at one position and one layer (`position_layer`). One position also makes the check one intervention.

The similarity of two features is the weighted mean (GroupConfig's weights) of the signals the pair has, each in
[0, 1], a negative cosine or correlation counting as 0: `decoder`, the cosine of their decoder rows; `coactivation`,
the correlation of their codes over the first rows of the set's training cache (each layer's MLP input at the same
tokens; missing without that cache); `adjacency`, the cosine of their signed link weights (in and out, over every
node of the graph): the same sources and targets; `explanation`, the Jaccard overlap of the words of their
explanations (`features explain`), else of their store labels (kind=label at cfg.label_precision); missing where
either feature has neither. Clusters: average linkage within each scope, merged while the closest pair's mean
similarity reaches cfg.threshold and the merged group keeps at most cfg.max_size features; each cluster of two or
more is a proposal.

The check: predicted is the sum of the members' predicted ablation effects (check.GraphNodes.predicted; a path from
one member through another counts in both, as in the sum of single ablations the graph implies); measured is the
metric's change when every member's code is set to zero at its position at once, frozen and live, with check's
verdict words and CheckConfig's thresholds; beside it, the sum of the members' measured effects alone (the reading of
cfg.semantics), so what the joint ablation adds beyond them (`interaction`) is visible.
"""

from __future__ import annotations

import re
import time
from collections import Counter, defaultdict

import numpy as np
import torch

from workbench.circuits.feature.graph_config import SIGNALS, GroupConfig
from workbench.circuits.neuronpedia import CHECK_VERDICTS
from workbench.errors import BadValueError
from workbench.interventions.check import READINGS, GraphNodes, reading_row
from workbench.interventions.config import CheckConfig, InterventionConfig
from workbench.interventions.engine import Intervention

GROUPS = ("workbench_groups", "workbench.graph_groups", 1)  # the graph JSON's key (circuit-tracer ignores it), schema
ACCEPT = ("confirmed", "all", "none")  # which proposals become qParams.supernodes
STOP = {"and", "or", "of", "the", "a", "an", "on", "in", "its", "top", "examples", "fires", "template", "llm"}


def _unit(v: torch.Tensor) -> torch.Tensor:
    return v / v.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def decoder_similarity(sites, feats: list[tuple[int, int]]) -> np.ndarray:
    """[n, n] cosine of the features' decoder rows (layer, latent), negatives at 0."""
    by_layer = {s.layer: s for s in sites}
    rows = _unit(torch.stack([by_layer[layer].decoder_row(latent).float() for layer, latent in feats]))
    return (rows @ rows.T).clamp_min(0).cpu().numpy()


def adjacency_similarity(ids: list[str], links: list[dict]) -> np.ndarray:
    """[n, n] cosine of the nodes' signed link weights (row: its in-links then its out-links, over every node)."""
    nodes = sorted({x for link in links for x in (link["source"], link["target"])} | set(ids))
    at = {nid: i for i, nid in enumerate(nodes)}
    rows = torch.zeros(len(ids), 2 * len(nodes), dtype=torch.float64)
    mine = {nid: i for i, nid in enumerate(ids)}
    for link in links:
        w = float(link["weight"])
        if link["target"] in mine:
            rows[mine[link["target"]], at[link["source"]]] += w
        if link["source"] in mine:
            rows[mine[link["source"]], len(nodes) + at[link["target"]]] += w
    rows = _unit(rows)
    return (rows @ rows.T).clamp_min(0).numpy()


def coactivation_similarity(sites, feats: list[tuple[int, int]], cache, n_rows: int) -> np.ndarray:
    """[n, n] correlation of the features' codes over the cache's first n_rows tokens (each site's input read
    there), negatives and never-active features at 0."""
    by_layer = {s.layer: s for s in sites}
    n = min(n_rows, cache.n_tokens("train"))
    codes = torch.zeros(len(feats), n)
    for layer in sorted({layer for layer, _ in feats}):
        site = by_layer[layer]
        x = cache.rows(site.read_hook, np.arange(n)).to(site.decoder_row(0).device)
        with torch.no_grad():
            c = site.encode(x).float().cpu()
        for i, (lay, latent) in enumerate(feats):
            if lay == layer:
                codes[i] = c[:, latent]
    return torch.nan_to_num(torch.corrcoef(codes), nan=0.0).clamp_min(0).numpy()


def words(text: str) -> frozenset[str]:
    """The content words of an explanation or a label list (lower case, without the marks and filler words)."""
    return frozenset(w for w in re.findall(r"[\w=]+", text.casefold()) if w not in STOP)


def explanation_similarity(labels: list[frozenset[str] | None]) -> np.ndarray:
    """[n, n] Jaccard overlap of the features' label words; NaN where either has none (the signal is missing)."""
    n = len(labels)
    out = np.full((n, n), np.nan)
    for i in range(n):
        for j in range(n):
            a, b = labels[i], labels[j]
            if a and b:
                out[i, j] = len(a & b) / len(a | b)
    return out


def combine(parts: dict[str, np.ndarray | None], cfg: GroupConfig) -> np.ndarray:
    """The weighted mean of the signals each pair has (a NaN entry or a None signal: missing for it)."""
    num = den = 0.0
    for name in SIGNALS:
        m, w = parts.get(name), getattr(cfg, name)
        if m is None or w == 0:
            continue
        have = ~np.isnan(m)
        num = num + np.where(have, m, 0.0) * w
        den = den + have * w
    return np.where(np.asarray(den) > 0, num / np.maximum(den, 1e-12), 0.0)


def cluster(sim: np.ndarray, scopes: list, cfg: GroupConfig) -> list[list[int]]:
    """Average-linkage clusters (indices) of two or more within each scope (module doc)."""
    out = []
    for scope in dict.fromkeys(scopes):
        groups = [[i] for i, s in enumerate(scopes) if s == scope]
        while True:
            best, pair = -1.0, None
            for a in range(len(groups)):
                for b in range(a + 1, len(groups)):
                    if len(groups[a]) + len(groups[b]) > cfg.max_size:
                        continue
                    s = float(sim[np.ix_(groups[a], groups[b])].mean())
                    if s > best:  # ties: the first pair
                        best, pair = s, (a, b)
            if pair is None or best < cfg.threshold:
                break
            a, b = pair
            groups[a] = sorted(groups[a] + groups.pop(b))
        out += [g for g in groups if len(g) > 1]
    return out


def measure_group(model, sites, g: GraphNodes, nids: list[str], semantics: str) -> float:
    """The metric's change when every feature of `nids` (one position) has its code set to zero, together."""
    pos = {g.features[n][1] for n in nids}
    if len(pos) != 1:
        raise BadValueError(f"a group's features must share a position to be ablated together; {nids} lie at {pos}")
    units = [f"{g.features[n][0]}:{g.features[n][2]}" for n in nids]
    cfg = InterventionConfig(features=units, positions=str(pos.pop()), semantics=semantics)
    iv = Intervention(model, sites, g.tokens, cfg)
    return g.metric(iv.logits()[-1]) - g.metric(iv.clean["logits"][-1])


def similarity(model_sites, graph: dict, g: GraphNodes, cfg: GroupConfig, cache=None, labels=None) -> dict:
    """The feature ids, their scopes, each signal's matrix (None: missing) and the combined similarity."""
    ids = sorted(g.features, key=lambda n: (g.features[n][1], g.features[n][0], g.features[n][2]))
    feats = [(g.features[n][0], g.features[n][2]) for n in ids]
    if not ids:  # a graph without feature nodes: nothing to group
        return {"ids": [], "scopes": [], "parts": dict.fromkeys(SIGNALS), "combined": np.zeros((0, 0))}
    parts = {
        "decoder": decoder_similarity(model_sites, feats) if cfg.decoder else None,
        "adjacency": adjacency_similarity(ids, graph["links"]) if cfg.adjacency else None,
        "coactivation": None,
        "explanation": None,
    }
    if cache is not None and cfg.coactivation:
        parts["coactivation"] = coactivation_similarity(model_sites, feats, cache, cfg.coactivation_rows)
    if labels and cfg.explanation:
        parts["explanation"] = explanation_similarity([labels.get(f) for f in feats])
    scopes = [(g.features[n][1],) if cfg.scope == "position" else (g.features[n][1], g.features[n][0]) for n in ids]
    return {"ids": ids, "scopes": scopes, "parts": parts, "combined": combine(parts, cfg)}


def _mean_pair(m: np.ndarray | None, idx: list[int]) -> float | None:
    """The mean over a group's pairs of a signal (None: missing for every pair)."""
    if m is None:
        return None
    vals = [m[a, b] for i, a in enumerate(idx) for b in idx[i + 1 :] if not np.isnan(m[a, b])]
    return float(np.mean(vals)) if vals else None


def _name(k: int, members: list[tuple[int, int]], labels: dict, token: str) -> str:
    """`S<k> <shared label words> @ <token>` (the layers where the members share no words)."""
    shared = frozenset.intersection(*[labels.get(f) or frozenset() for f in members]) if labels else frozenset()
    what = " ".join(sorted(shared)[:3]) or "L" + ",".join(str(x) for x in sorted({layer for layer, _ in members}))
    return f"S{k} {what} @ {token!r}"


def check_group(model, sites, g: GraphNodes, predicted: dict, nids: list[str], cfg: CheckConfig) -> dict:
    """A group's check row (module doc): the summed prediction, the joint ablation in both readings with verdicts,
    and the members ablated alone (cfg.semantics' reading) summed."""
    measured = {s: measure_group(model, sites, g, nids, s) for s in READINGS}
    alone = sum(measure_group(model, sites, g, [n], cfg.semantics) for n in nids)
    row = reading_row({}, sum(predicted[n] for n in nids), measured, cfg)
    return {**row, "members_measured": alone, "interaction": row["measured"] - alone}


def propose(model, sites, graph: dict, cfg=None, check_cfg=None, *, cache=None, labels=None, tokens=None) -> dict:
    """The proposals of a graph dict made by the workbench through `sites`, each checked (module doc): the record
    stored under GROUPS[0]. cache: the set's training cache (co-activation); labels: (layer, latent) -> words."""
    cfg, check_cfg = cfg or GroupConfig(), check_cfg or CheckConfig()
    t0, c0 = time.perf_counter(), time.process_time()
    g = GraphNodes(graph, check_cfg.metric, tokens)
    s = similarity(sites, graph, g, cfg, cache, labels)
    predicted = g.predicted(graph["links"])
    groups = []
    for k, idx in enumerate(cluster(s["combined"], s["scopes"], cfg), 1):
        nids = [s["ids"][i] for i in idx]
        feats = [(g.features[n][0], g.features[n][2]) for n in nids]
        pos = g.features[nids[0]][1]
        groups.append(
            {
                "name": _name(k, feats, labels or {}, model.to_single_str_token(int(g.tokens[pos]))),
                "members": nids,
                "position": pos,
                "layers": sorted({layer for layer, _ in feats}),
                "similarity": _mean_pair(s["combined"], idx),
                "signals": {name: _mean_pair(m, idx) for name, m in s["parts"].items()},
                **check_group(model, sites, g, predicted, nids, check_cfg),
            }
        )
    return {
        "schema": GROUPS[1],
        "schema_version": GROUPS[2],
        "config": cfg.to_dict(),
        "check_config": check_cfg.to_dict(),
        "signals_used": [n for n, m in s["parts"].items() if m is not None],
        "groups": groups,
        "summary": _summary(groups, len(g.features), time.perf_counter() - t0, time.process_time() - c0),
    }


def _summary(groups: list[dict], n_features: int, seconds: float, cpu: float) -> dict:
    verdicts = {r: dict(Counter(x[f"verdict_{r}"] for x in groups)) for r in READINGS}
    return {
        "features": n_features,
        "proposed": len(groups),
        "grouped_features": sum(len(x["members"]) for x in groups),
        "confirmed": sum(x["confirmed"] for x in groups),
        "verdicts": verdicts,
        "seconds": seconds,
        "cpu_seconds": cpu,
    }


def accepted(record: dict, accept: str) -> list[dict]:
    """The proposals `accept` takes (ACCEPT): the confirmed ones, all, or none."""
    if accept not in ACCEPT:
        raise BadValueError(f"accept {accept!r} is not one of {', '.join(ACCEPT)}")
    return [x for x in record["groups"] if accept == "all" or (accept == "confirmed" and x["confirmed"])]


def apply(graph: dict, record: dict, accept: str) -> dict:
    """A copy of the graph JSON with the record under GROUPS[0] (each proposal marked `accepted`) and the accepted
    ones in qParams.supernodes ([name, node_id, ...], circuit-tracer's shape) beside the groups made by hand; those a
    previous run stored are replaced."""
    take = {x["name"] for x in accepted(record, accept)}
    old = {x["name"] for x in (graph.get(GROUPS[0]) or {}).get("groups", []) if x.get("accepted")}
    q = dict(graph.get("qParams") or {})
    kept = [sn for sn in q.get("supernodes") or [] if not (sn and sn[0] in old)]
    taken = {sn[0] for sn in kept if sn}
    clash = sorted(take & taken)
    if clash:
        raise BadValueError(f"the graph already has groups named {clash}; rename them or pass --accept none")
    groups = [{**x, "accepted": x["name"] in take} for x in record["groups"]]
    q["supernodes"] = kept + [[x["name"], *x["members"]] for x in groups if x["accepted"]]
    return {**graph, "qParams": q, GROUPS[0]: {**record, "accept": accept, "groups": groups}}


def read_groups(graph: dict) -> dict | None:
    """The graph's stored proposals (GROUPS[0]), checked for the fields a reader uses; None when it has none."""
    r = graph.get(GROUPS[0])
    if r is None:
        return None
    if not isinstance(r, dict) or r.get("schema") != GROUPS[1] or not isinstance(r.get("groups"), list):
        raise BadValueError(f"{GROUPS[0]} is not a graph groups record (schema {GROUPS[1]!r})")
    for x in r["groups"]:
        if not isinstance(x.get("members"), list) or x.get("verdict") not in CHECK_VERDICTS:
            raise BadValueError(f"{GROUPS[0]} holds a group without members or verdict: {str(x)[:120]}")
    return r


def store_labels(transcoders, feats: set[tuple[int, int]], cfg: GroupConfig, member: int | str = 0) -> dict:
    """(layer, latent) -> label words of the graph's features, from the set members' feature stores: the words of
    the feature's explanation (`features explain`) where there is one, else its store labels (kind=label, each kind
    whose best label reaches cfg.label_precision); members without a store give none."""
    from workbench.circuits.feature.transcoders import open_set
    from workbench.features.explanations import load_explanations
    from workbench.features.store import FeatureStore

    out, wanted = {}, defaultdict(set)
    for layer, latent in feats:
        wanted[layer].add(latent)
    for layer, folder in open_set(transcoders).member_folders(member).items():
        if layer not in wanted or not (folder / "features").is_dir():
            continue
        store = FeatureStore(folder)
        said = (load_explanations(store) or ({}, {}))[1]
        units = store.units
        for u in wanted[layer]:
            if u in said:
                out[layer, u] = words(said[u]["explanation"])
                continue
            row = units.iloc[u]
            kinds = [k for k in store.manifest["label_kinds"] if row[f"{k}_label"]]
            got = [f"{k}={row[f'{k}_label']}" for k in kinds if row[f"{k}_precision"] >= cfg.label_precision]
            out[layer, u] = frozenset(got) or None
    return out
