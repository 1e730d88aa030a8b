"""`workbench circuit graph`, `circuit check` and a graph's import: attribution graphs built through a transcoder
set, checked by interventions, or read from circuit-tracer / Neuronpedia JSON, and recorded."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

from workbench.atomic import write_json
from workbench.circuits import annotations, neuronpedia, schema
from workbench.circuits.feature.attribution_graph import build_graph
from workbench.circuits.feature.graph_json import set_labels, to_neuronpedia
from workbench.circuits.feature.transcoders import open_set
from workbench.circuits.neuronpedia import GRAPH_CHECK, read_feature_graph
from workbench.circuits.schema import load
from workbench.errors import BadValueError
from workbench.guard import check_in_place
from workbench.interventions.check import check_graph as check_by_interventions
from workbench.interventions.dictionary import load_dictionary
from workbench.lock import output_lock
from workbench.provenance import check_same, dictionary_id, model_id, workbench_id
from workbench.readback import owner
from workbench.steps.artifacts import claim, complete, manifest_of, model_inputs, rerecord, slug
from workbench.workspace import Workspace


def member_folders(ws: Workspace, tset, member) -> dict:
    """layer -> each member transcoder's folder (relative to the workspace when inside it) of a TranscoderSet."""
    return {str(layer): ws.rel(folder) for layer, folder in tset.member_folders(member).items()}


def attribution_graph(
    ws: Workspace,
    model,
    transcoders,
    prompt,
    answer=None,
    wrong=None,
    *,
    cfg=None,
    model_spec: str = "tiny",
    name: str | None = None,
    member: int | str = 0,
):
    """Build a prompt's attribution graph (`workbench circuit graph`) and record it in <ws>/circuits/<name> as
    graph.json (circuit-tracer graph JSON); returns (graph, folder)."""
    folder = ws.path("circuits", name or f"graph-{slug(' '.join(str(prompt).split()[-4:]))[:40]}")
    with ExitStack() as held:
        inputs = {"transcoders": transcoders, "model_spec": model_spec}
        staged = claim(held, ws, folder, "workbench circuit graph", inputs, getattr(cfg, "work_dir", None))
        tset = open_set(transcoders)
        g = build_graph(model, tset.load(member, model.cfg.device, model), prompt, answer, wrong, cfg)
        labels, members = set_labels(tset, member), member_folders(ws, tset, member)
        tid = dictionary_id(tset.folder)
        to_neuronpedia(g, staged / "graph.json", folder.name, labels, members=members, dictionary_id=tid)
        ws.record(
            staged,
            "circuits",
            made_by="workbench circuit graph",
            config={**g.config, "member": member},
            inputs={
                **model_inputs(ws, model, model_spec),
                "transcoders": tset.folder,
                "dictionary_id": tid,
                "prompt": g.prompt,
                "answer": answer,
                "wrong": wrong,
            },
            summary={
                "features": g.n_features,
                "active": g.n_active,
                "edges": int(g.pruned.edge_mask.sum()),
                **g.scores,
            },
        )
    return g, folder


CHECK = "workbench circuit check"


def check_graph(
    ws: Workspace, model, graph_path, transcoders, cfg=None, *, member: int | str = 0, progress=None
) -> dict:
    """Check a graph JSON's nodes and edges by interventions (`workbench circuit check`) and store the record in
    it (neuronpedia.GRAPH_CHECK); a recorded graph's manifest is rewritten with the confirmed shares. Returns it.
    progress: interventions.check.check_graph's (the app's prompt box shows the check advancing)."""
    graph_path = Path(graph_path)
    recorded = check_graph_target(ws, graph_path)
    folder = graph_path.parent
    with output_lock(folder if recorded else graph_path, CHECK):  # the lock `circuit graph` takes on the folder
        d = load(graph_path)
        read_feature_graph(d)
        _same_makers(ws, d, graph_path, model, transcoders)
        circuit = folder / "feature_circuit.json"  # a circuit's own graph keeps only its embedding nodes
        tokens = json.loads(circuit.read_text())["query"]["tokens"] if circuit.is_file() else None
        record = check_by_interventions(
            model, load_dictionary(transcoders, model, model.cfg.device, member), d, cfg, tokens, progress
        )
        write_json(graph_path, {**d, GRAPH_CHECK[0]: record})
        if recorded:
            s = record["summary"]
            shares = {f"check_{k}": s[k] for k in ("nodes_confirmed_share", "edges_confirmed_share")}
            summary = {**manifest_of(folder).get("summary", {}), **shares}
            rerecord(ws, folder, "circuits", "workbench circuit graph", summary=summary)
    return record


def check_graph_target(ws: Workspace, graph_path: Path) -> bool:
    """Refuse, before any work, a graph `circuit check` may not add to: a file of an artifact that is not a circuit
    (output guard), or a circuit recorded in another workspace (its manifest would be registered in this one as a
    second circuit). Returns whether the graph's folder is a recorded circuit."""
    check_in_place("graph", graph_path, ("circuits",))
    folder = Path(graph_path).parent
    if not complete(folder):
        if held := owner(graph_path):  # a file deeper in a circuit's folder: its checksum would no longer match
            raise BadValueError(
                f"graph {graph_path} lies inside the circuit {held.parent} but is not its graph: the check would "
                f"change a file its manifest lists; give {held.parent}, or copy the file out of it"
            )
        return False
    if not ws.holds(folder):
        theirs = folder.parent.parent if folder.parent.name == "circuits" else "the one that recorded it"
        raise BadValueError(
            f"{folder} is a circuit of another workspace ({theirs}), not of --workspace {ws.root}: pass --workspace "
            f"{theirs}, where its manifest is rewritten, or copy the graph file out of {folder}"
        )
    return True


def _same_makers(ws: Workspace, graph: dict, path: Path, model, transcoders) -> None:
    """Refuse a model or dictionary other than the graph's (by content id): its metadata's scan and dictionary_id,
    else its manifest's; a graph recorded before ids were, by the id of the set its manifest names, when still there."""
    inputs = manifest_of(path.parent).get("inputs", {}) if path.name in ("graph.json", "neuronpedia.json") else {}
    meta = graph.get("metadata", {})
    made_on = workbench_id(meta.get("scan")) or workbench_id(inputs.get("model"))  # not another tool's model name
    check_same("model", made_on, model_id(model), str(path))
    made = meta.get("info", {}).get("dictionary_id") or inputs.get("dictionary_id")
    if not made and inputs.get("transcoders") and ws.resolve(inputs["transcoders"]).is_dir():
        made = dictionary_id(ws.resolve(inputs["transcoders"]))
    check_same("dictionary", made, dictionary_id(transcoders), str(path))


def import_graph(ws: Workspace, path, model=None, model_spec: str | None = None, *, name=None, made_by=None):
    """A circuit-tracer / Neuronpedia graph JSON recorded in <ws>/circuits/<name>/graph.json as it is (validated as
    the app's upload is, its notes and pins kept), so `workbench ls`, the app's Feature graph page and `circuit check`
    find it; checked against `model` when given (its layers; its id where the file names a workbench one), and then
    bound to it. Returns (neuronpedia.FeatureGraph, folder)."""
    path = Path(path)
    d = schema.load(path)
    fg = neuronpedia.read_feature_graph(annotations.without_notes(d))
    scan = str(fg.metadata.get("scan", ""))
    inputs = {"model": scan}
    if model is not None:
        check_same("model", workbench_id(scan), model_id(model), str(path))
        if fg.n_layers != model.cfg.n_layers:
            raise BadValueError(
                f"{path} is a graph of a {fg.n_layers}-layer model ({scan or 'its scan unnamed'}), but this model has "
                f"{model.cfg.n_layers} layers; pass the --model it was made on"
            )
        inputs = model_inputs(ws, model, model_spec or model.cfg.model_name)
    stem = slug(path.name.removesuffix(".json"))
    folder = ws.path("circuits", name or (stem if stem not in ("graph", "neuronpedia") else slug(scan) + "-graph"))
    command = made_by or "workbench circuit import"
    with ExitStack() as held:
        staged = claim(held, ws, folder, command, {"source": path})
        write_json(staged / "graph.json", d)
        made = fg.metadata.get("info", {}).get("dictionary_id")
        ws.record(
            staged,
            "circuits",
            made_by=command,
            config={},
            inputs={**inputs, **({"dictionary_id": made} if made else {}), "source": path.resolve()},
            summary={"nodes": len(fg.nodes), "edges": len(fg.links)},
        )
    return fg, folder
