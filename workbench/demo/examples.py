"""The demo's interventions (`workbench demo`): one attribution graph and one feature circuit of a query through a
transcoder set, each checked by interventions, and one steering example per dictionary, all recorded in the
workspace. Each artifact already complete (and each graph already checked) is left as it is, so a rerun skips.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from workbench.circuits.inputs import tokens_of
from workbench.circuits.neuronpedia import GRAPH_CHECK
from workbench.errors import UserError
from workbench.interventions.config import InterventionConfig
from workbench.interventions.dictionary import load_dictionary
from workbench.steps.artifacts import complete
from workbench.steps.circuits import find_feature_circuit
from workbench.steps.graphs import attribution_graph, check_graph
from workbench.steps.interventions import intervene

STEER = 8.0  # the steering strength of the examples (a multiple of the decoder row)


def demo_examples(ws, model, query, set_dir, sae_folders, log, model_spec: str = "tiny") -> dict:
    """Graph and feature circuit of `query` (a corpus Query) through `set_dir`, both checked; a steering example
    per folder of `sae_folders` and the set. Returns {artifact name: headline}."""
    out = {}
    graph = ws.path("circuits", f"graph-{query.task}")
    if not complete(graph):
        attribution_graph(ws, model, set_dir, query.prompt, query.answer, name=graph.name, model_spec=model_spec)
    out[graph.name] = _checked(ws, model, graph / "graph.json", set_dir, log)
    circuit = ws.path("circuits", f"features-{query.task}")
    try:
        if not complete(circuit):
            find_feature_circuit(
                ws, model, set_dir, query.prompt, query.answer, query.counterfactual, name=circuit.name
            )
        out[circuit.name] = _checked(ws, model, circuit / "neuronpedia.json", set_dir, log)
        # the feature-graph page opens this folder's graph.json first: it opens checked
        out[f"{circuit.name}/graph"] = _checked(ws, model, circuit / "graph.json", set_dir, log)
    except UserError as e:
        log(f"feature circuit {circuit.name}: skipped ({e})")
    for folder in [*sae_folders, set_dir]:
        name = f"steer-{Path(folder).name}"
        if not complete(ws.path("interventions", name)):
            cfg = _steering(model, folder, query.prompt)
            intervene(ws, model, folder, query.prompt, cfg, name=name, model_spec=model_spec)
        r = json.loads((ws.path("interventions", name) / "result.json").read_text())
        out[name] = {"kl": r["positions"][-1]["kl"], "top": r["positions"][-1]["top"][0]["str"]}
        log(f"intervention {name}: {r['config']['op']} {r['config']['features']}, KL {out[name]['kl']:.3f}")
    return out


def _checked(ws, model, path: Path, set_dir, log) -> dict:
    d = json.loads(path.read_text())
    s = d[GRAPH_CHECK[0]]["summary"] if GRAPH_CHECK[0] in d else check_graph(ws, model, path, set_dir)["summary"]
    log(
        f"check {path.parent.name}/{path.name}: {s['nodes_confirmed_share'] or 0:.1%} of the nodes' and "
        f"{s['edges_confirmed_share'] or 0:.1%} of the edges' predicted influence confirmed"
    )
    return {k: s[k] for k in ("nodes_confirmed_share", "edges_confirmed_share")}


@torch.no_grad()
def _steering(model, folder, prompt) -> InterventionConfig:
    """A scaffolded SAE's scaffold removed; otherwise the unit most active at the prompt's last position (the last
    layer's, for a set) steered by STEER at every position."""
    site = load_dictionary(folder, model)[-1]
    if site.d_sae > site.n_sparse:
        return InterventionConfig(features=["scaffold"], op="ablate", continue_tokens=20)
    _, cache = model.run_with_cache(tokens_of(model, prompt)[None], names_filter=[site.read_hook])
    codes = site.encode(cache[site.read_hook][0, -1])[: site.n_sparse]
    unit = int(codes.abs().argmax()) // site.block_size
    feature = f"{site.layer}:{unit}" if site.layer is not None else str(unit)
    return InterventionConfig(features=[feature], op="steer", value=[STEER], continue_tokens=20)
