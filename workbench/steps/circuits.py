"""`workbench circuit find` and `circuit import`: component and feature circuits found or read, saved with their
exports and recorded."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

from workbench.circuits import schema
from workbench.circuits.component import export
from workbench.circuits.component.api import find_circuit as find_components
from workbench.circuits.component.export import read_circuit
from workbench.circuits.component.types import Circuit
from workbench.circuits.config import QueryConfig, SearchConfig
from workbench.circuits.feature.feature_circuit import find_feature_circuit as find_features
from workbench.circuits.feature.graph_json import set_labels, to_neuronpedia
from workbench.circuits.feature.transcoders import open_set
from workbench.lock import output_lock
from workbench.provenance import dictionary_id, model_id
from workbench.steps.artifacts import circuit_name, claim, complete, model_inputs, slug
from workbench.steps.graphs import import_graph, member_folders
from workbench.workspace import Workspace


def find_circuit(
    ws: Workspace,
    model,
    prompt,
    answer=None,
    counterfactual=None,
    *,
    model_spec: str = "tiny",
    query: QueryConfig | None = None,
    cfg: SearchConfig | None = None,
    name: str | None = None,
    ensure: bool = False,
    **options,
):
    """Find a query circuit (`workbench circuit find`) and record it in <ws>/circuits/<name> with its
    MIB and Neuronpedia exports; returns (circuit, folder). query (QueryConfig: budget, target_ndf, wrong,
    n_samples, seed) and options (strategy, paraphrases, means, ...) go to circuits.find_circuit.

    ensure (needs a name): a circuit already recorded under that name is loaded instead."""
    if ensure and name is None:
        raise ValueError("find_circuit(ensure=True) needs the circuit's name")
    if ensure and complete(ws.path("circuits", name)):
        return Circuit.load(ws.path("circuits", name) / "circuit.json"), ws.path("circuits", name)
    command, inputs = "workbench circuit find", {"model_spec": model_spec}
    with ExitStack() as held:
        if name is not None:  # taken before the search too, when it does not depend on the result
            staged = claim(held, ws, ws.path("circuits", name), command, inputs)
        c = find_components(model, prompt, answer, counterfactual, query=query, cfg=cfg, **options)
        folder = ws.path("circuits", name or circuit_name(c.query, c.method))
        if name is None:
            staged = claim(held, ws, folder, command, inputs)
        _record_circuit(ws, c, staged, command, model_inputs(ws, model, model_spec))
    return c, folder


def _record_circuit(ws: Workspace, c, folder: Path, made_by: str, model_inputs: dict) -> None:
    """Save a circuit with its MIB and Neuronpedia exports in `folder`, and record it."""
    c.save(folder / "circuit.json")
    export.to_mib(c, folder / "mib.json")
    export.to_neuronpedia(c, folder / "neuronpedia.json")
    q = c.query
    ws.record(
        folder,
        "circuits",
        made_by=made_by,
        config=c.method,
        inputs={**model_inputs, **{k: q.get(k) for k in ("prompt", "answer", "counterfactual")}},
        summary={"ndf": c.ndf, "nfs": c.nfs, "edges": c.n_edges, "fraction": c.fraction},
    )


def find_feature_circuit(
    ws: Workspace,
    model,
    transcoders,
    prompt,
    answer=None,
    counterfactual=None,
    *,
    model_spec: str = "tiny",
    name: str | None = None,
    query: QueryConfig | None = None,
    **options,
):
    """Find a feature-level query circuit (`workbench circuit find --transcoders SET`) and record it in
    <ws>/circuits/<name>: feature_circuit.json, graph.json (the pruned attribution graph, the circuit's nodes
    pinned) and neuronpedia.json (the circuit alone), both circuit-tracer graph JSON; returns (circuit, graph,
    folder). query (QueryConfig: budget, target_ndf, wrong, n_samples, seed, member) and options (cfg,
    graph_cfg, ...) go to circuits.feature.feature_circuit.find_feature_circuit."""
    query, options = QueryConfig.take(query, options)
    command, inputs = "workbench circuit find --transcoders", {"transcoders": transcoders, "model_spec": model_spec}
    work_dir = getattr(options.get("graph_cfg"), "work_dir", None)
    with ExitStack() as held:
        if name is not None:
            staged = claim(held, ws, ws.path("circuits", name), command, inputs, work_dir)
        elif work_dir:  # the folder is named after the search: the work_dir is locked for it
            held.enter_context(output_lock(work_dir, command))
        tset, member = open_set(transcoders), query.member
        c, g = find_features(
            model, tset.load(member, model.cfg.device, model), prompt, answer, counterfactual, query=query, **options
        )
        folder = ws.path("circuits", name or "features-" + circuit_name(c.query, c.method))
        if name is None:
            staged = claim(held, ws, folder, command, inputs)
        labels, members = set_labels(tset, member), member_folders(ws, tset, member)
        ids = {"members": members, "dictionary_id": dictionary_id(tset.folder)}
        c.save(staged / "feature_circuit.json")
        to_neuronpedia(g, staged / "graph.json", folder.name, labels, circuit=c, pinned=True, **ids)
        to_neuronpedia(g, staged / "neuronpedia.json", folder.name, labels, circuit=c, **ids)
        q = c.query
        ws.record(
            staged,
            "circuits",
            made_by=command,
            config=c.method,
            inputs={
                **model_inputs(ws, model, model_spec),
                "transcoders": tset.folder,
                "dictionary_id": ids["dictionary_id"],
                **{k: q.get(k) for k in ("prompt", "answer", "counterfactual")},
            },
            summary={"ndf": c.ndf, "nodes": len(c.nodes), "edges": len(c.edges), **c.graph_scores},
        )
    return c, g, folder


def import_circuit(ws: Workspace, path, model=None, model_spec: str | None = None, *, name=None, made_by=None):
    """A workbench or EAP-IG/MIB circuit file recorded in <ws>/circuits/<name> with its exports (`workbench
    circuit import`), checked against `model` when given (a MIB file names no model: it is bound to this one);
    returns (circuit, folder). A circuit-tracer / Neuronpedia graph JSON is recorded as a graph (import_graph)."""
    path = Path(path)
    if schema.detect(schema.load(path)) == "neuronpedia":
        return import_graph(ws, path, model, model_spec, name=name, made_by=made_by)
    c = read_circuit(path, model)
    if model is not None:
        c.model_id = c.model_id or model_id(model)
    stem = slug(path.name.removesuffix(".json").removesuffix(".mib"))
    folder = ws.path("circuits", name or (stem if stem != "circuit" else circuit_name(c.query, c.method)))
    command = made_by or "workbench circuit import"
    inputs = model_inputs(ws, model, model_spec) if model is not None else {"model": c.model_id}
    with ExitStack() as held:
        staged = claim(held, ws, folder, command, {"source": path})
        _record_circuit(ws, c, staged, command, {**inputs, "source": path.resolve()})
    return c, folder
