"""The step of `workbench circuit group`: a graph JSON's supernodes proposed and checked (circuits.feature.grouping)
and stored in it in place, under the graph's lock and with its circuit's manifest rewritten, as `circuit check` adds
its record."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from workbench.atomic import write_json
from workbench.cache.reader import ActivationCache
from workbench.circuits.feature.graph_config import GroupConfig
from workbench.circuits.feature.grouping import GROUPS, accepted, apply, propose, store_labels
from workbench.circuits.neuronpedia import read_feature_graph
from workbench.circuits.schema import load
from workbench.interventions.check import FEATURE
from workbench.interventions.dictionary import load_dictionary
from workbench.lock import output_lock
from workbench.readback import artifact_manifest
from workbench.steps.artifacts import manifest_of, rerecord
from workbench.steps.graphs import _same_makers, check_graph_target
from workbench.workspace import MANIFEST

GROUP = "workbench circuit group"


def training_cache(ws, transcoders):
    """The activation cache the set (or CLT) was trained on (its manifest's input `cache`), opened; None when its
    manifest names none or the cache is not there (co-activation is then missing, and the record says so)."""
    path = Path(transcoders) / MANIFEST
    rel = artifact_manifest(path).get("inputs", {}).get("cache") if path.is_file() else None
    folder = ws.resolve(rel) if rel else None
    return ActivationCache.open(folder) if folder is not None and folder.is_dir() else None


def group_graph(
    ws, model, graph_path, transcoders, cfg=None, check_cfg=None, *, member: int | str = 0, accept: str = "confirmed"
) -> dict:
    """Propose and check a graph JSON's supernodes (`workbench circuit group`) and store them in it in place (the
    same graph files and lock as `circuit check`); a recorded graph's manifest summary gains the counts. Returns
    the record as stored."""
    accepted({"groups": []}, accept)  # a bad --accept is refused before any work
    graph_path = Path(graph_path)
    recorded = check_graph_target(ws, graph_path)
    folder = graph_path.parent
    with output_lock(folder if recorded else graph_path, GROUP):
        d = load(graph_path)
        fg = read_feature_graph(d)
        _same_makers(ws, d, graph_path, model, transcoders)
        circuit = folder / "feature_circuit.json"  # a circuit's own graph keeps only its embedding nodes
        tokens = json.loads(circuit.read_text())["query"]["tokens"] if circuit.is_file() else None
        sites = load_dictionary(transcoders, model, model.cfg.device, member)
        feats = {(int(n["layer"]), int(n["node_id"].split("_")[1])) for n in fg.nodes if n["feature_type"] == FEATURE}
        labels = store_labels(transcoders, feats, cfg or GroupConfig(), member)
        with torch.no_grad():
            record = propose(
                model, sites, d, cfg, check_cfg, cache=training_cache(ws, transcoders), labels=labels, tokens=tokens
            )
        out = apply(d, record, accept)
        write_json(graph_path, out)
        if recorded:
            s = record["summary"]
            counts = {"groups_proposed": s["proposed"], "groups_confirmed": s["confirmed"]}
            rerecord(
                ws,
                folder,
                "circuits",
                "workbench circuit graph",
                summary={**manifest_of(folder).get("summary", {}), **counts},
            )
    return out[GROUPS[0]]
