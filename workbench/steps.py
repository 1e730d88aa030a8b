"""The steps that make artifacts, each recording what it made in a workspace.

The CLI's commands and `workbench demo` are thin layers over these functions, so an artifact made
either way (or from Python) carries the same manifest and shows up in `workbench ls` and the app.
Each step writes inside the workspace by default (<root>/<kind>/<name>); an explicit `out` elsewhere
still gets its manifest there and is registered in the workspace. With `ensure=True` a step returns its
artifact as it is when the manifest says it is complete (the manifest is written last), and otherwise
resumes from the checkpoint an interrupted run left: what `workbench demo` calls, so a rerun continues.

Heavy libraries are imported inside the steps: importing this module stays cheap.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import re
import time
from contextlib import ExitStack
from pathlib import Path

from workbench.cache.config import HarvestConfig
from workbench.circuits.config import DEFAULT_SAMPLES, QueryConfig, SearchConfig
from workbench.dictionaries.kinds import CLT, SAE, TRANSCODERS, WORKSPACE_KINDS, kind_of, named
from workbench.errors import BadValueError, OutputExistsError
from workbench.guard import check_artifact, check_in_place
from workbench.lock import output_lock
from workbench.readback import artifact_manifest, json_file, owner
from workbench.sae.config import EvalConfig, SAEConfig, TrainConfig
from workbench.sae.scores import shown
from workbench.transaction import artifact_transaction
from workbench.workspace import MANIFEST, Workspace, check_name

ALL_MLPS = "all_mlps_ce_recovered"  # a transcoder set's headline: CE recovered with every MLP replaced, per config
SAE_HEADLINE = (
    "fvu",
    "l0",
    "block_l0",
    "dead_frac",
    "dense_frac",
    "ce_loss_recovered",
    "kl_score",
    "ce_loss_recovered_no_scaffold",
)


def complete(folder) -> bool:
    """Whether the artifact in `folder` is complete: its manifest, written last, is there."""
    return (Path(folder) / MANIFEST).is_file()


def slug(text: str) -> str:
    """A folder-name-safe version of a spec: 'data/x.txt,hf:y' -> 'data_x.txt_hf_y'."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(text)).strip("_.") or "artifact"


def _model_inputs(ws: Workspace, model, spec: str) -> dict:
    """The model's id, and its spec (a saved model folder as a path relative to the workspace)."""
    from workbench.models import EMBEDDED
    from workbench.provenance import model_id

    is_folder = spec not in EMBEDDED and Path(spec).exists()
    return {"model": model_id(model), "model_spec": ws.rel(spec) if is_folder else spec}


def expand_hooks(spec: str, hook_names) -> list[str]:
    """'blocks.*.hook_resid_post' expands over the model's hooks; plain names pass through (harvest checks them)."""
    if "*" not in spec:
        return [spec]
    found = [h for h in hook_names if fnmatch.fnmatchcase(h, spec)]
    if not found:
        from workbench.cache.hooks import hook_summary

        raise BadValueError(
            f"hook pattern {spec!r} matches no hook; valid hooks: {', '.join(hook_summary(hook_names))}"
        )
    return found


def make_cache(
    ws: Workspace,
    model_spec: str = "tiny",
    corpus_spec: str = "synthetic",
    hooks=None,
    cfg: HarvestConfig | None = None,
    *,
    out=None,
    name: str | None = None,
    corpus_seed: int = 0,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    model=None,
    ensure: bool = False,
    text_field: str = "text",
    device: str | None = None,
):
    """Harvest a cache (`workbench cache`) into <ws>/caches/<name> or `out`; returns the ActivationCache.

    model: an already loaded model for `model_spec` (the demo loads it once for every step). hooks: names or
    patterns; None: `default_hooks` (every residual stream, and each MLP's input and output for transcoders).
    """
    from workbench.cache.hooks import default_hooks
    from workbench.cache.reader import ActivationCache
    from workbench.cache.writer import harvest
    from workbench.corpus.sources import load_corpus
    from workbench.models import load

    folder = Path(out) if out else ws.path("caches", name or slug(f"{Path(model_spec).name}-{corpus_spec}"))
    if ensure and complete(folder):
        return ActivationCache.open(folder)
    # an interrupted harvest left its progress record (a finished but unrecorded one, its manifest)
    resume = resume or (ensure and any((folder / f).is_file() for f in ("progress.json", "manifest.json")))
    check_artifact(folder, "caches", {"model_spec": model_spec, "corpus_spec": corpus_spec.split(",")})  # before work
    with output_lock(folder, "workbench cache"):  # one process per output
        if model is None:
            model, _ = load(model_spec, device=device)
        corpus = load_corpus(corpus_spec, model.tokenizer, seed=corpus_seed, text_field=text_field)
        names = [h for spec in hooks for h in expand_hooks(spec, model.hook_dict)] if hooks else default_hooks(model)
        cache = harvest(model, corpus, names, folder, cfg=cfg, resume=resume, overwrite=overwrite, progress=progress)
        ws.record(
            folder,
            "caches",
            made_by="workbench cache",
            config=cache.manifest["config"],
            inputs={
                **_model_inputs(ws, model, model_spec),
                "corpus": corpus_spec,
                "corpus_seed": corpus_seed,
                **({"text_field": text_field} if text_field != "text" else {}),
            },
            summary={
                "train_tokens": cache.n_tokens("train"),
                "heldout_tokens": cache.n_tokens("heldout"),
                "hooks": len(cache.hooks),
            },
            checksums=False,
        )
        return cache


def train_saes(
    ws: Workspace,
    cache_dir,
    hook: str,
    sae_cfgs: list[SAEConfig],
    train_cfg: TrainConfig,
    *,
    out=None,
    name: str | None = None,
    resume: bool = False,
    ensure: bool = False,
    target: str | None = None,
    target_cache=None,
) -> list[Path]:
    """Train SAEs side by side on one hook (`workbench sae train`) into <ws>/saes/<run>/<sae> or `out`/<sae>;
    with a target hook they are transcoders from `hook` to `target` (read from `target_cache` when given: another
    cache of the same tokens).

    The run folder holds the shared checkpoint; name defaults to the hook plus the start time.
    """
    from workbench.checkpoint import rank_zero_writes
    from workbench.sae.trainer import train

    run = _run_folder(ws, SAE.workspace, out, name, slug(hook))
    done = sorted(p.parent for p in run.glob(f"*/{MANIFEST}"))
    if ensure and len(done) == len(sae_cfgs):
        return done
    check_artifact(run, None, {"cache_dir": cache_dir, "target_cache": target_cache})
    resume = resume or (ensure and (run / "checkpoint.pt").is_file())
    with rank_zero_writes(run, "workbench sae train") as records:
        folders = train(
            cache_dir, hook, sae_cfgs, train_cfg, run, resume=resume, target=target, target_cache=target_cache
        )
        if records:
            _record_saes(ws, run, folders, cache_dir, train_cfg)
    return folders


def _run_folder(ws: Workspace, kind: str, out, name: str | None, stem: str) -> Path:
    """A training run's folder: `out`, else <ws>/<kind>/<name>, else <ws>/<kind>/<stem>-<start time>; under
    torchrun every rank takes rank 0's start time (one run folder)."""
    from workbench.checkpoint import rank_zero_value

    if out:
        return Path(out)
    return ws.path(kind, name or f"{stem}-{rank_zero_value(time.strftime('%Y%m%d-%H%M%S'))}")


def _record_saes(ws: Workspace, run: Path, folders, cache_dir, train_cfg: TrainConfig) -> None:
    side = [p for p in (run / "checkpoint.pt", run / "run.json") if p.is_file()]
    for folder in folders:
        _record_sae(ws, folder, "workbench sae train", Path(cache_dir), {"train": train_cfg.to_dict()}, side)


def _record_sae(ws: Workspace, folder: Path, made_by: str, cache_dir, extra: dict, side=()) -> None:
    from workbench.sae.io import read_info

    meta = json_file(folder / "cfg.json", "SAE's SAELens config", "retrain the SAE").get("metadata", {})
    hooks = {"hook": meta.get("hook_name")} | ({"target": meta["hook_name_out"]} if meta.get("hook_name_out") else {})
    ws.record(
        folder,
        SAE.workspace,
        made_by=made_by,
        config={**read_info(folder).get("sae_config", {}), **extra},
        inputs={"cache": cache_dir, **hooks},
        side_files=tuple(side),
    )


def train_transcoder_set(
    ws: Workspace,
    cache_dir,
    layers: str,
    sae_cfgs: list[SAEConfig],
    train_cfg: TrainConfig,
    *,
    out=None,
    name: str | None = None,
    resume: bool = False,
    ensure: bool = False,
) -> tuple[Path, list[Path]]:
    """Train a transcoder set (`workbench sae train --transcoders all`) into <ws>/transcoders/<name> or `out`:
    each member is recorded as an SAE, the set (its transcoders.json) as a `transcoders` artifact.

    ensure: a recorded set is returned as it is; an interrupted one resumes from its checkpoint."""

    from workbench.checkpoint import rank_zero_writes
    from workbench.sae.transcoders import SET_MANIFEST, read_manifest, started, train_set

    run = _run_folder(ws, TRANSCODERS.workspace, out, name, "transcoders")
    if ensure and complete(run):
        entries = read_manifest(run / SET_MANIFEST)["layers"]
        return run, [run / n for e in entries for n in e["transcoders"]]
    check_artifact(run, TRANSCODERS.workspace, {"cache_dir": cache_dir})
    resume = resume or (ensure and started(run))
    with rank_zero_writes(run, "workbench sae train --transcoders") as records:
        folder, members = train_set(cache_dir, layers, sae_cfgs, train_cfg, run, resume=resume)
        if records:
            _record_saes(ws, run, members, cache_dir, train_cfg)
            _record_set(ws, folder, len(members), cache_dir, layers, sae_cfgs, train_cfg)
    return folder, members


def train_clt(
    ws: Workspace, cache_dir, layers: str, clt_cfg, train_cfg: TrainConfig, *, out=None, name=None, resume=False
) -> Path:
    """Train a cross-layer transcoder (`workbench sae train --clt --layers all`) into <ws>/clts/<name> or `out`
    (the run's checkpoint there, the CLT in <run>/<its name>), recorded as a `clts` artifact: its own kind, since
    every reader of a `transcoders` artifact reads a per-layer set's transcoders.json."""
    from workbench.checkpoint import rank_zero_writes
    from workbench.sae.clt_io import read_manifest
    from workbench.sae.transcoders import train_clt as train

    run = _run_folder(ws, CLT.workspace, out, name, CLT.name)
    check_artifact(run, None, {"cache_dir": cache_dir})
    with rank_zero_writes(run, "workbench sae train --clt") as records:
        folder = train(cache_dir, layers, clt_cfg, train_cfg, run, resume=resume)
        if records:
            m = read_manifest(folder)
            ws.record(
                folder,
                CLT.workspace,
                made_by="workbench sae train --clt",
                config={**m["clt_config"], "train": train_cfg.to_dict()},
                inputs={"cache": Path(cache_dir), "model": m["model"]},
                summary={"layers": ",".join(map(str, m["layers"])), "features_per_layer": m["clt_config"]["n_latents"]},
                side_files=tuple(p for p in (run / "checkpoint.pt", run / "run.json") if p.is_file()),
            )
    return folder


def _record_set(ws: Workspace, folder: Path, n_members: int, cache_dir, layers: str, sae_cfgs, train_cfg) -> None:
    """The set (its transcoders.json) as a `transcoders` artifact, after its members are recorded as SAEs."""
    from workbench.sae.transcoders import SET_MANIFEST, read_manifest

    manifest = read_manifest(folder / SET_MANIFEST)
    ws.record(
        folder,
        TRANSCODERS.workspace,
        made_by="workbench sae train --transcoders",
        config={"layers": layers, "saes": [c.to_dict() for c in sae_cfgs], "train": train_cfg.to_dict()},
        inputs={"cache": Path(cache_dir), "model": manifest["model"]},
        summary={
            "layers": ",".join(str(e["layer"]) for e in manifest["layers"]),
            "transcoders": n_members,
            "input": manifest["layers"][0]["input_kind"] if manifest["layers"] else "",
        },
    )


def evaluate_sae(
    ws: Workspace,
    sae_dir,
    cache_dir,
    model_spec: str | None = "tiny",
    cfg: EvalConfig | None = None,
    *,
    ensure: bool = False,
) -> dict:
    """Evaluate a saved SAE or transcoder (`workbench sae eval`): metrics.json, and its manifest updated with the
    headline. A transcoder set's folder evaluates every member, then every MLP replaced at once.

    ensure: an SAE (or set) whose manifest already carries the headline keeps its metrics.json (returned as read)."""

    check_in_place("SAE folder", sae_dir, WORKSPACE_KINDS)  # its metrics and manifest are rewritten
    if ensure and _evaluated(sae_dir):
        return json_file(Path(sae_dir) / "metrics.json", "evaluation metrics", "evaluate it again (sae eval)")
    return named(kind_of(sae_dir, SAE).evaluate)(ws, sae_dir, cache_dir, model_spec, cfg)


def _evaluate_one(ws: Workspace, sae_dir, cache_dir, model_spec, cfg) -> dict:
    """One SAE's metrics.json, and its manifest's headline."""
    from workbench.sae.eval import evaluate

    metrics = evaluate(sae_dir, cache_dir, model_spec, cfg)
    flat = {**metrics["reconstruction"], **metrics.get("splice", {})}
    headline = {k: shown(flat, k) for k in SAE_HEADLINE if k in flat}
    rerecord(
        ws,
        sae_dir,
        SAE.workspace,
        "workbench sae eval",
        inputs={"cache": Path(cache_dir), "eval_model": model_spec},
        summary=headline,
    )
    return metrics


def _evaluated(folder) -> bool:
    """Whether the manifest carries an evaluation's headline: an SAE's FVU, a set's CE with every MLP replaced."""
    return any(k == "fvu" or k.startswith(ALL_MLPS) for k in _manifest(folder).get("summary", {}))


def _evaluate_clt(ws: Workspace, clt_dir, cache_dir, model_spec, cfg) -> dict:
    """A CLT's metrics.json, and its manifest's headline: FVU over every layer, total L0, CE/KL all replaced."""
    from workbench.sae.clt_eval import evaluate_clt

    m = evaluate_clt(clt_dir, cache_dir, model_spec, cfg)
    r = m.get("all_replaced", {})
    headline = {"fvu": m["fvu"], "l0": m["l0"], **{k: r[k] for k in ("ce_loss_recovered", "kl_score") if k in r}}
    inputs = {"cache": Path(cache_dir), "eval_model": model_spec}
    summary = {**_manifest(clt_dir).get("summary", {}), **headline}
    rerecord(ws, clt_dir, CLT.workspace, "workbench sae eval", inputs, summary)
    return m


def _evaluate_set(ws: Workspace, set_dir, cache_dir, model_spec, cfg) -> dict:
    from workbench.errors import BadValueError
    from workbench.sae.eval import evaluate_set

    if model_spec is None:
        raise BadValueError(
            f"{set_dir} is a transcoder set: its evaluation replaces MLPs in the model; drop --no-model"
        )
    result = evaluate_set(set_dir, cache_dir, model_spec, cfg)
    for name, flat in result["members"].items():
        summary = {k: shown(flat, k) for k in SAE_HEADLINE if k in flat}
        rerecord(ws, Path(set_dir) / name, SAE.workspace, "workbench sae eval", {"cache": Path(cache_dir)}, summary)
    summary = {f"{ALL_MLPS}[{k}]": shown(v, "ce_loss_recovered") for k, v in result["all_replaced"].items()}
    inputs = {"cache": Path(cache_dir), "eval_model": model_spec}
    rerecord(ws, set_dir, TRANSCODERS.workspace, "workbench sae eval", inputs, summary)
    return result


def rerecord(ws: Workspace, folder, kind: str, made_by: str, inputs: dict | None = None, summary: dict | None = None):
    """Rewrite an artifact's manifest after a later step added files or numbers to its folder, keeping what
    made it (made_by applies when the folder had no manifest); inputs are added, a summary replaces the old."""
    before = _manifest(folder)
    ws.record(
        folder,
        kind,
        made_by=before.get("made_by", made_by),
        config=before.get("config", {}),
        inputs={**before.get("inputs", {}), **(inputs or {})},
        summary=before.get("summary", {}) if summary is None else summary,
        side_files=tuple(ws.resolve(p) for p in before.get("side_files", [])),
    )


def _manifest(folder) -> dict:
    """The artifact's manifest, or {} when it has none yet."""
    from workbench.readback import artifact_manifest

    path = Path(folder) / MANIFEST
    return artifact_manifest(path) if path.is_file() else {}


def circuit_name(query: dict, method: dict) -> str:
    """A stable default folder name: the prompt's last words and a hash of the query and the method
    settings (the same search on the same query gets the same name)."""
    import json

    words = slug("-".join(str(query.get("prompt", "")).split()[-4:]))[:40]
    key = json.dumps(
        [query.get(k) for k in ("prompt", "answer", "counterfactual", "wrong")] + [method], sort_keys=True, default=str
    )
    return f"{words}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"


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
    from workbench.circuits.component.api import find_circuit
    from workbench.circuits.component.types import Circuit

    if ensure and name is None:
        raise ValueError("find_circuit(ensure=True) needs the circuit's name")
    if ensure and complete(ws.path("circuits", name)):
        return Circuit.load(ws.path("circuits", name) / "circuit.json"), ws.path("circuits", name)
    command, inputs = "workbench circuit find", {"model_spec": model_spec}
    with ExitStack() as held:
        if name is not None:  # taken before the search too, when it does not depend on the result
            staged = _claim(held, ws, ws.path("circuits", name), command, inputs)
        c = find_circuit(model, prompt, answer, counterfactual, query=query, cfg=cfg, **options)
        folder = ws.path("circuits", name or circuit_name(c.query, c.method))
        if name is None:
            staged = _claim(held, ws, folder, command, inputs)
        _record_circuit(ws, c, staged, command, _model_inputs(ws, model, model_spec))
    return c, folder


def _record_circuit(ws: Workspace, c, folder: Path, made_by: str, model_inputs: dict) -> None:
    """Save a circuit with its MIB and Neuronpedia exports in `folder`, and record it."""
    from workbench.circuits.component import export

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


def _members(ws: Workspace, tset, member) -> dict:
    """layer -> each member transcoder's folder (relative to the workspace when inside it) of a TranscoderSet."""
    return {str(layer): ws.rel(folder) for layer, folder in tset.member_folders(member).items()}


CLAIMED = {"circuits": "a circuit or graph", "interventions": "an intervention"}  # what a finished folder holds


def _claim(
    held: ExitStack, ws: Workspace, folder: Path, command: str, inputs: dict, work_dir=None, kind: str = "circuits"
) -> Path:
    """Take a circuit's (or an intervention's) folder, and a build's work_dir, for this process until `held` closes:
    an artifact transaction (the output guard, a lock, a folder another run filled refused) and a lock on the
    work_dir (a second run on the same --name or work_dir is refused, naming this one). Returns the staging folder
    the step writes and records the artifact in; it is validated and renamed onto `folder` when `held` closes."""
    what = CLAIMED[kind]
    scratch = {"work_dir": work_dir}
    staged = held.enter_context(artifact_transaction(ws, folder, kind, command, inputs, scratch=scratch, what=what))
    if work_dir:
        held.enter_context(output_lock(work_dir, command))
    return staged


def _claim_in_place(held: ExitStack, folder: Path, command: str, inputs: dict, kind: str, resume: bool) -> Path:
    """Take a resumable step's folder (a streamed batch writes its lines there as it goes): the output guard and a
    lock; a folder another run filled, or a stopped one left unless `resume` continues it, is refused. Its manifest is
    written last, so a stopped run is never listed (as training steps keep their checkpoints in their folder)."""
    check_artifact(folder, kind, inputs, {})
    held.enter_context(output_lock(folder, command))
    if resume and not complete(folder):
        return folder
    if folder.exists() and any(p for p in folder.iterdir() if not p.name.startswith(".")):
        what = CLAIMED[kind] if complete(folder) else "the files of a run stopped before it finished"
        raise OutputExistsError(f"{folder} already holds {what}; delete it or pass another --name")
    return folder


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
    from workbench.circuits.feature.feature_circuit import find_feature_circuit as find
    from workbench.circuits.feature.graph_json import set_labels, to_neuronpedia
    from workbench.circuits.feature.transcoders import open_set
    from workbench.provenance import dictionary_id

    query, options = QueryConfig.take(query, options)
    command, inputs = "workbench circuit find --transcoders", {"transcoders": transcoders, "model_spec": model_spec}
    work_dir = getattr(options.get("graph_cfg"), "work_dir", None)
    with ExitStack() as held:
        if name is not None:
            staged = _claim(held, ws, ws.path("circuits", name), command, inputs, work_dir)
        elif work_dir:  # the folder is named after the search: the work_dir is locked for it
            held.enter_context(output_lock(work_dir, command))
        tset, member = open_set(transcoders), query.member
        c, g = find(
            model, tset.load(member, model.cfg.device, model), prompt, answer, counterfactual, query=query, **options
        )
        folder = ws.path("circuits", name or "features-" + circuit_name(c.query, c.method))
        if name is None:
            staged = _claim(held, ws, folder, command, inputs)
        labels, members = set_labels(tset, member), _members(ws, tset, member)
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
                **_model_inputs(ws, model, model_spec),
                "transcoders": tset.folder,
                "dictionary_id": ids["dictionary_id"],
                **{k: q.get(k) for k in ("prompt", "answer", "counterfactual")},
            },
            summary={"ndf": c.ndf, "nodes": len(c.nodes), "edges": len(c.edges), **c.graph_scores},
        )
    return c, g, folder


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
    from workbench.circuits.feature.attribution_graph import build_graph
    from workbench.circuits.feature.graph_json import set_labels, to_neuronpedia
    from workbench.circuits.feature.transcoders import open_set
    from workbench.provenance import dictionary_id

    folder = ws.path("circuits", name or f"graph-{slug(' '.join(str(prompt).split()[-4:]))[:40]}")
    with ExitStack() as held:
        inputs = {"transcoders": transcoders, "model_spec": model_spec}
        staged = _claim(held, ws, folder, "workbench circuit graph", inputs, getattr(cfg, "work_dir", None))
        tset = open_set(transcoders)
        g = build_graph(model, tset.load(member, model.cfg.device, model), prompt, answer, wrong, cfg)
        labels, members = set_labels(tset, member), _members(ws, tset, member)
        tid = dictionary_id(tset.folder)
        to_neuronpedia(g, staged / "graph.json", folder.name, labels, members=members, dictionary_id=tid)
        ws.record(
            staged,
            "circuits",
            made_by="workbench circuit graph",
            config={**g.config, "member": member},
            inputs={
                **_model_inputs(ws, model, model_spec),
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


def intervene(
    ws: Workspace,
    model,
    dictionary,
    prompt,
    cfg=None,
    *,
    model_spec: str = "tiny",
    name: str | None = None,
    mean_cache=None,
    resume: bool = False,
    on_result=None,
):
    """Run one intervention (`workbench intervene`) and record it in <ws>/interventions/<name> as result.json;
    returns (result, folder). prompt: one prompt, or a list (a batch, streamed by interventions.batch: one line per
    prompt in results.jsonl as each finishes, on_result called with each; result.json its summary; resume continues
    a stopped batch; an item may be a (prompt, counterfactual) pair). mean_cache: the activation cache whose
    sequences give ablate_to mean its means."""
    from workbench.atomic import write_json
    from workbench.interventions.batch import prompts_sha256, run_batch
    from workbench.interventions.config import InterventionConfig
    from workbench.interventions.dictionary import load_dictionary
    from workbench.interventions.engine import intervene
    from workbench.provenance import dictionary_id

    cfg = cfg or InterventionConfig()
    batch = isinstance(prompt, list)
    key = {"prompt": prompts_sha256(prompt) if batch else prompt, "dictionary": ws.rel(dictionary)}
    folder = ws.path("interventions", name or circuit_name(key, cfg.to_dict()))
    source = None
    if mean_cache is not None:
        from workbench.cache.reader import ActivationCache

        source = ActivationCache.open(mean_cache)
    with ExitStack() as held:
        inputs = {"dictionary": dictionary, "mean_cache": mean_cache}
        if batch:
            staged = _claim_in_place(held, folder, "workbench intervene", inputs, "interventions", resume)
        else:
            staged = _claim(held, ws, folder, "workbench intervene", inputs, kind="interventions")
        sites = load_dictionary(dictionary, model, model.cfg.device)
        inputs = {**_model_inputs(ws, model, model_spec), "dictionary": Path(dictionary)}
        inputs["dictionary_id"] = dictionary_id(dictionary)
        if batch:
            key = {**key, "config": cfg.to_dict(), "model": inputs["model"], "dictionary_id": inputs["dictionary_id"]}
            result = run_batch(
                staged, model, sites, prompt, cfg, key, mean_source=source, resume=resume, on_result=on_result
            )
            inputs["prompts"] = {"n": len(prompt), "sha256": key["prompt"]}
            summary = {"prompts": result["prompts"], "mean_kl": result["mean_kl"]}
        else:
            result = intervene(model, sites, prompt, cfg, source)
            inputs["prompt"] = result["prompt"]
            last = result["positions"][-1]
            summary = {"kl": last["kl"], "top": last["top"][0]["str"]}
        write_json(staged / "result.json", result)
        if mean_cache is not None:
            inputs["cache"] = Path(mean_cache)
        ws.record(
            staged,
            "interventions",
            made_by="workbench intervene",
            config=cfg.to_dict(),
            inputs=inputs,
            summary={"semantics": cfg.semantics, **summary},
        )
    return result, folder


def check_graph(ws: Workspace, model, graph_path, transcoders, cfg=None, *, member: int | str = 0) -> dict:
    """Check a graph JSON's nodes and edges by interventions (`workbench circuit check`) and store the record in
    it (schema.GRAPH_CHECK); a recorded graph's manifest is rewritten with the confirmed shares. Returns it."""
    import json

    from workbench.atomic import write_json
    from workbench.circuits.schema import GRAPH_CHECK, load, read_feature_graph
    from workbench.interventions.check import check_graph
    from workbench.interventions.dictionary import load_dictionary

    graph_path = Path(graph_path)
    recorded = check_graph_target(ws, graph_path)
    folder = graph_path.parent
    with output_lock(folder if recorded else graph_path, CHECK):  # the lock `circuit graph` takes on the folder
        d = load(graph_path)
        read_feature_graph(d)
        _same_makers(ws, d, graph_path, model, transcoders)
        circuit = folder / "feature_circuit.json"  # a circuit's own graph keeps only its embedding nodes
        tokens = json.loads(circuit.read_text())["query"]["tokens"] if circuit.is_file() else None
        record = check_graph(model, load_dictionary(transcoders, model, model.cfg.device, member), d, cfg, tokens)
        write_json(graph_path, {**d, GRAPH_CHECK[0]: record})
        if recorded:
            s = record["summary"]
            shares = {f"check_{k}": s[k] for k in ("nodes_confirmed_share", "edges_confirmed_share")}
            summary = {**_manifest(folder).get("summary", {}), **shares}
            rerecord(ws, folder, "circuits", "workbench circuit graph", summary=summary)
    return record


CHECK = "workbench circuit check"


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
    from workbench.provenance import check_same, dictionary_id, model_id, workbench_id

    inputs = _manifest(path.parent).get("inputs", {}) if path.name in ("graph.json", "neuronpedia.json") else {}
    meta = graph.get("metadata", {})
    made_on = workbench_id(meta.get("scan")) or workbench_id(inputs.get("model"))  # not another tool's model name
    check_same("model", made_on, model_id(model), str(path))
    made = meta.get("info", {}).get("dictionary_id") or inputs.get("dictionary_id")
    if not made and inputs.get("transcoders") and ws.resolve(inputs["transcoders"]).is_dir():
        made = dictionary_id(ws.resolve(inputs["transcoders"]))
    check_same("dictionary", made, dictionary_id(transcoders), str(path))


def train_model(
    ws: Workspace,
    cfg=None,
    *,
    out=None,
    name: str = "tiny",
    overwrite: bool = False,
    resume: bool = False,
    progress: bool = True,
) -> tuple[dict, Path]:
    """Train the embedded-model architecture on the synthetic corpus (`workbench model train`) into
    <ws>/models/<name> or `out` (train_tiny refuses a non-empty folder unless overwrite/resume); returns
    (model card, folder)."""
    from workbench.models.toy import TinyConfig, train_tiny

    folder = Path(out) if out else ws.path("models", name)
    cfg = cfg or TinyConfig()
    check_artifact(folder, "models", {})
    with output_lock(folder, "workbench model train"):
        card = train_tiny(folder, cfg, progress=progress, overwrite=overwrite, resume=resume)
        ws.record(
            folder,
            "models",
            made_by="workbench model train",
            config=dataclasses.asdict(cfg),
            summary={"final_train_loss": card.get("final_train_loss"), "train_seconds": card.get("train_seconds")},
        )
        return card, folder


def import_model(
    ws: Workspace, source: str, *, name: str | None = None, dtype: str = "float32", overwrite: bool = False
) -> tuple[dict, Path]:
    """A Hugging Face model folder or Hub id, or a GGUF file (or an installed package shipping one; de-quantized),
    converted once into a workbench model folder (`workbench model import`) in <ws>/models/<name>; returns
    (manifest summary, folder).

    The conversion is checked against the transformers model (max |logit difference| on random tokens,
    float32, at most hf.EQUIVALENCE_TOLERANCE); `dtype` is the precision the weights are stored in.
    """
    import torch

    from workbench.models import ModelSpecError, gguf_import, hf, save
    from workbench.models.card import write_import_card
    from workbench.provenance import model_id

    if dtype not in STORE_DTYPES:
        raise BadValueError(f"--dtype {dtype!r} is not one of {', '.join(STORE_DTYPES)}")
    gguf_file = gguf_import.find(source)
    src = gguf_file or hf.resolve_source(source)
    default = src.stem if gguf_file else src.name if Path(source).exists() else source.split("/")[-1]
    folder = ws.path("models", name or slug(default))
    if complete(folder) and not overwrite:
        raise OutputExistsError(f"{folder} already holds a model; pass --overwrite to replace it, or another --name")
    source_input = {"source": src if Path(source).exists() or gguf_file else None}
    with artifact_transaction(ws, folder, "models", MODEL_IMPORT, source_input, replace=overwrite) as staged:
        hf_model, tokenizer = gguf_import.read(src) if gguf_file else hf.read_folder(src)
        model = hf.convert(hf_model, tokenizer, folder.name, device="cpu")
        gap = hf.logit_gap(hf_model, model)
        if not gap <= hf.EQUIVALENCE_TOLERANCE:
            raise ModelSpecError(
                f"the conversion of {source} differs from the transformers model by {gap:.3g} in the logits "
                f"(more than {hf.EQUIVALENCE_TOLERANCE:g}); TransformerLens does not convert this model faithfully"
            )
        model.to(getattr(torch, dtype))
        facts = gguf_import.describe(src) if gguf_file else {"source_sha256": hf.source_checksum(src)}
        imported = {"source": str(source), **facts, "architecture": model.cfg.original_architecture}
        save(model, staged, extra={"imported": imported})
        summary = {**imported, "model_id": model_id(model), "logit_max_abs_diff": gap, "n_layers": model.cfg.n_layers}
        config = {"dtype": dtype, "weight_processing": "none", "equivalence_tolerance": hf.EQUIVALENCE_TOLERANCE}
        write_import_card(staged, model, summary, config)
        ws.record(
            staged,
            "models",
            made_by=MODEL_IMPORT,
            config=config,
            inputs={"source": src if Path(source).exists() or gguf_file else source},
            summary=summary,
        )
        return summary, folder


STORE_DTYPES = ("float32", "bfloat16", "float16")
MODEL_IMPORT = "workbench model import"


def import_sae(
    ws: Workspace,
    source,
    model_spec: str = "tiny",
    *,
    fmt: str = "auto",
    name: str | None = None,
    model=None,
    hook: str | None = None,
    sae_id: str | None = None,
):
    """A dictionary made by another tool (sae/imports.py, sae/foreign.py) checked against the model and copied into
    the workspace bound to it (`workbench sae import`): a SAELens folder into <ws>/saes/imported/<name>; a
    circuit-tracer set, or a sparsify run of per-layer transcoders, into <ws>/transcoders/<name>; a circuit-tracer
    CLT into <ws>/clts/<name>; a sparsify run's SAEs into <ws>/saes/imported/<name>/<hookpoint>; a Hub id (a sae_lens
    release with `sae_id`, or a circuit-tracer Hub config) through its library's own loader (sae/hub.py) the same
    ways; returns (summary, folder)."""
    from workbench.models import load
    from workbench.sae import foreign, hub, imports

    if name is not None:
        check_name(name)  # before anything is fetched or loaded
    via = hub.route(str(source), fmt, sae_id)
    if via:
        if hook:
            raise BadValueError("--hook is for sparsify and dictionary_learning files; a Hub id names its hooks")
        return _import_hub(ws, str(source), via, sae_id, model_spec, name=name, model=model)
    src = Path(source)
    fmt = imports.detect(src, fmt)
    name = name or slug(src.resolve().name)
    hooks = foreign.parse_hooks(hook)
    if hooks and fmt in ("saelens", "circuit-tracer"):
        raise BadValueError(f"--hook is for sparsify and dictionary_learning files; a {fmt} folder names its hooks")
    model = model if model is not None else load(model_spec, device="cpu")[0]
    if fmt == "circuit-tracer" and imports.is_tracer_clt(src):
        return _import_tracer_clt(ws, src, ws.path(CLT.workspace, name), model, model_spec)
    if fmt == "saelens":
        return _import_one(ws, src, ws.path(SAE.workspace, "imported", name), model, model_spec, fmt, src)
    if fmt == "circuit-tracer":
        members = imports.tracer_members(*imports.tracer_layers(src))
    elif fmt == "sparsify":
        members = foreign.sparsify_members(src, model, hooks)
    else:
        members = [foreign.dictionary_learning_member(src, model, hooks)]
    if fmt == "circuit-tracer" or (len(members) > 1 and all(m.target and m.layer is not None for m in members)):
        return _import_set(ws, src, ws.path(TRANSCODERS.workspace, name), model, model_spec, fmt, members)
    return _import_converted(ws, ws.path(SAE.workspace, "imported", name), model, model_spec, fmt, members)


def _import_hub(ws: Workspace, ref: str, via: str, sae_id, model_spec: str, *, name, model) -> tuple[dict, Path]:
    """A Hub id fetched by its library's own loader (sae/hub.py) before the model loads, then imported as the folder
    it became: a sae_lens SAE as a SAELens folder, circuit-tracer's files as its set or CLT."""
    import tempfile

    from workbench.models import load
    from workbench.sae import hub, imports

    name = name or slug(f"{ref}-{sae_id}" if via == "saelens" else ref.removeprefix("hf://"))
    if via == "saelens":
        folder = ws.path(SAE.workspace, "imported", name)
        ws.root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=ws.root) as tmp:
            fetched = hub.saelens_folder(ref, sae_id, Path(tmp) / "sae")
            model = model if model is not None else load(model_spec, device="cpu")[0]
            return _import_one(ws, fetched, folder, model, model_spec, via, f"{ref} --sae-id {sae_id}")
    cfg, files = hub.tracer_files(ref)
    model = model if model is not None else load(model_spec, device="cpu")[0]
    if isinstance(files, Path):
        return _import_tracer_clt(ws, files, ws.path(CLT.workspace, name), model, model_spec)
    folder = ws.path(TRANSCODERS.workspace, name)
    return _import_set(ws, files[0].parent, folder, model, model_spec, via, imports.tracer_members(cfg, files))


IMPORT, IMPORTED = "workbench sae import", "an imported dictionary"


def _import_one(ws: Workspace, src: Path, folder: Path, model, model_spec: str, fmt: str, source) -> tuple[dict, Path]:
    """One SAELens folder imported into `folder` as one transaction (workbench.transaction)."""
    with artifact_transaction(ws, folder, SAE.workspace, IMPORT, {"source": src}, what=IMPORTED) as staged:
        return _import_saelens(ws, src, staged, model, model_spec, fmt, source), folder


def _import_saelens(ws: Workspace, src: Path, folder: Path, model, model_spec: str, fmt: str, source) -> dict:
    """A SAELens folder checked against the model, copied into `folder` bound to it, and recorded; `source` is the
    file or folder it came from (src itself, or the foreign file it was converted from), or the Hub id it was
    fetched by."""
    from workbench.atomic import sha256_file
    from workbench.provenance import model_id
    from workbench.sae import imports
    from workbench.sae.io import load_sae

    sae = load_sae(src)  # refuses damaged files by name
    weights = src if isinstance(source, str) else source  # a Hub id's files as its library fetched them
    fits = imports.check_fits(sae, model)
    cfg = imports.copy_bound(src, folder, model_id(model))
    summary = {
        **fits,
        "architecture": cfg.get("architecture"),
        "source_model_name": cfg["metadata"]["source_model_name"],
        # sae_lens's own loader runs here; sparsify and dictionary_learning in bench/byo_roundtrip.py
        "max_abs_diff_vs_source": imports.encoding_gap(src, folder) if fmt == "saelens" else None,
    }
    ws.record(
        folder,
        SAE.workspace,
        made_by=IMPORT,
        config={"format": fmt, **{k: v for k, v in cfg.items() if k != "metadata"}},
        inputs={
            "source": source if isinstance(source, str) else source.resolve(),
            "source_sha256": sha256_file(weights if weights.is_file() else weights / "sae_weights.safetensors"),
            **_model_inputs(ws, model, model_spec),
            **{k: fits[k] for k in ("hook", "target") if k in fits},
        },
        summary=summary,
    )
    return summary


def _import_converted(ws: Workspace, folder: Path, model, model_spec: str, fmt: str, members) -> tuple[dict, Path]:
    """sparsify or dictionary_learning dictionaries, each converted to a SAELens folder and imported as one; several
    go to <folder>/<hookpoint>; all in one transaction (the conversions beside the staged folder)."""
    from workbench.provenance import model_id
    from workbench.sae import foreign

    one, summaries = len(members) == 1, []
    sources = {"source": [m.source for m in members]}
    with artifact_transaction(ws, folder, SAE.workspace if one else None, IMPORT, sources, what=IMPORTED) as staged:
        for m in members:
            converted = foreign.to_saelens(m, staged.parent / "converted" / m.name, model_id(model))
            dest = staged if one else staged / check_name(m.name)
            summaries.append(_import_saelens(ws, converted, dest, model, model_spec, fmt, m.source))
    return (summaries[0] if one else {"dictionaries": len(members), **summaries[0]}), folder


def _import_set(ws: Workspace, src: Path, folder: Path, model, model_spec: str, fmt: str, members) -> tuple[dict, Path]:
    """Per-layer transcoders (circuit-tracer's or sparsify's) as a workbench set: each layer a SAELens member checked
    against the model; circuit-tracer's are compared with its own loader here."""
    import json

    from workbench.atomic import atomic_write_text
    from workbench.provenance import model_id
    from workbench.sae import foreign, imports
    from workbench.sae.io import load_sae
    from workbench.sae.transcoders import SCHEMA, SET_MANIFEST

    mid, layers, gaps = model_id(model), [], {}
    with artifact_transaction(ws, folder, TRANSCODERS.workspace, IMPORT, {"source": src}, what=IMPORTED) as staged:
        for m in members:
            dest = staged / check_name(m.name)
            if fmt == "circuit-tracer":
                member = imports.tracer_to_saelens(m.source, m.hooks, dest, mid)
                gaps[m.layer] = imports.tracer_gap(m.source, m.layer, member)
            else:
                member = foreign.to_saelens(m, dest, mid)
            imports.check_fits(load_sae(member), model)
            _record_sae(ws, member, IMPORT, None, {"format": fmt, "source": str(m.source)})
            entry = {"layer": m.layer, "input_hook": m.hook, "target_hook": m.target, "transcoders": [member.name]}
            layers.append({**entry, "input_kind": m.hook.split(".", 2)[-1]})
        manifest = {"schema": SCHEMA, "version": 1, "model": mid, "cache": None, "n_layers": model.cfg.n_layers}
        atomic_write_text(staged / SET_MANIFEST, json.dumps({**manifest, "layers": layers}, indent=2))
        summary = {
            "layers": ",".join(str(e["layer"]) for e in layers),
            "transcoders": len(layers),
            "input": layers[0]["input_kind"],
            "max_abs_diff_vs_source": max(gaps.values()) if gaps else None,
        }
        ws.record(
            staged,
            TRANSCODERS.workspace,
            made_by=IMPORT,
            config={"format": fmt, "members": [str(m.source) for m in members]},
            inputs={"source": src.resolve(), **_model_inputs(ws, model, model_spec)},
            summary=summary,
            checksums=False,
        )
    return summary, folder


def _import_tracer_clt(ws: Workspace, src: Path, folder: Path, model, model_spec: str) -> tuple[dict, Path]:
    """A circuit-tracer CLT (CrossLayerTranscoder.to_safetensors's files) as a workbench CLT folder, its layers,
    hooks and widths checked against the model and its reconstructions against circuit-tracer's own loader."""
    from workbench.provenance import model_id
    from workbench.sae import imports
    from workbench.sae.clt_io import save_clt

    clt, names = imports.tracer_clt(src), imports.tracer_clt_hooks(src)
    if clt.n_layers != model.cfg.n_layers:
        raise BadValueError(f"{src} is a CLT over {clt.n_layers} layers, but the model has {model.cfg.n_layers}")
    layers = list(range(clt.n_layers))
    hooks = [[f"blocks.{layer}.{h}" for layer in layers] for h in names]
    widths = imports.hook_widths(model, hooks[0] + hooks[1])
    for hook, d in [(h, clt.cfg.d_in) for h in hooks[0]] + [(h, clt.cfg.d_out) for h in hooks[1]]:
        if widths[hook] != d:
            raise BadValueError(f"the CLT's width at {hook} is {d}, but the model's is {widths[hook]}: another model")
    meta = {"model_name": model_id(model), "layers": layers, "input_hooks": hooks[0], "target_hooks": hooks[1]}
    with artifact_transaction(ws, folder, CLT.workspace, IMPORT, {"source": src}, what=IMPORTED) as staged:
        save_clt(clt, staged, {**meta, "source": str(src.resolve())})
        summary = {
            "layers": ",".join(map(str, layers)),
            "features_per_layer": clt.cfg.n_latents,
            "input": names[0],
            "max_abs_diff_vs_source": imports.tracer_clt_gap(src, clt),
        }
        ws.record(
            staged,
            CLT.workspace,
            made_by=IMPORT,
            config={"format": "circuit-tracer", **clt.cfg.to_dict()},
            inputs={"source": src.resolve(), **_model_inputs(ws, model, model_spec)},
            summary=summary,
        )
    return summary, folder


EXPORT_FORMATS = ("circuit-tracer", "sparsify")


def export_dictionary(source, fmt: str, out, model_spec: str = "tiny", *, model=None) -> Path:
    """A workbench transcoder set or SAE in another library's files (`workbench sae export`): circuit-tracer's
    transcoder set (tracer_export.write_transcoder_set), or a sparsify run folder (config.json naming the
    hookpoints, one folder per hookpoint that sparsify's SparseCoder.load_from_disk reads); returns `out`."""
    import json

    from workbench.atomic import atomic_path, atomic_write_text
    from workbench.models import load
    from workbench.sae import foreign
    from workbench.sae.io import load_sae
    from workbench.sae.transcoders import SET_MANIFEST

    if fmt not in EXPORT_FORMATS:
        raise BadValueError(f"--format {fmt!r} is not one of {', '.join(EXPORT_FORMATS)}")
    src, out = Path(source), Path(out)
    if out.exists() and any(out.iterdir()):
        raise OutputExistsError(f"{out} is not empty; export into a new folder")
    model = model if model is not None else load(model_spec, device="cpu")[0]
    if fmt == "circuit-tracer":
        from workbench.circuits.feature.tracer_export import write_transcoder_set

        return write_transcoder_set(model, src, out)
    if kind_of(src) is TRANSCODERS:
        entries = json_file(src / SET_MANIFEST, "transcoder set manifest", "re-import or retrain the set")["layers"]
        folders = [src / e["transcoders"][0] for e in entries]
    else:
        folders = [src]
    from safetensors.torch import save_file

    points = []
    for folder in folders:
        sae = load_sae(folder)
        meta = sae.cfg.metadata
        point = foreign.hf_hookpoint(meta.hook_name, getattr(meta, "hook_name_out", None), model)
        cfg, tensors = foreign.sparsify_tensors(sae, foreign.ln_affine(model, meta.hook_name))
        (out / point).mkdir(parents=True, exist_ok=True)
        with atomic_path(out / point / foreign.SPARSIFY_WEIGHTS) as tmp:
            save_file(tensors, str(tmp))
        atomic_write_text(out / point / "cfg.json", json.dumps(cfg))
        points.append((point, cfg))
    run = {"sae": {k: v for k, v in points[0][1].items() if k != "d_in"}, "hookpoints": [p for p, _ in points]}
    atomic_write_text(out / foreign.RUN_CONFIG, json.dumps(run, indent=2))
    return out


def build_features(
    ws: Workspace,
    sae_dirs,
    cache_dir,
    model_spec: str = "tiny",
    cfg=None,
    *,
    overwrite: bool = False,
    progress: bool = True,
    ensure: bool = False,
    device: str = "cpu",
) -> list:
    """Build (or resume) the feature store beside each SAE (`workbench features build`) and record each
    as a `features` artifact; returns the opened FeatureStores (ensure: a recorded store is opened as it is)."""
    from workbench.features.build import build_stores
    from workbench.features.store import STORE, FeatureStore

    for d in sae_dirs:
        check_in_place("SAE folder", d, (SAE.workspace,))  # the store is built inside it
    kept = [Path(d) / STORE for d in sae_dirs if ensure and complete(Path(d) / STORE)]
    pending = [d for d in sae_dirs if Path(d) / STORE not in kept]
    out = [FeatureStore(path) for path in kept]
    built = (
        build_stores(pending, cache_dir, model_spec, cfg, overwrite=overwrite, progress=progress, device=device)
        if pending
        else []
    )
    for path in built:
        store = FeatureStore(path)
        m = store.manifest
        ws.record(
            path,
            "features",
            made_by="workbench features build",
            config=m["config"],
            inputs={"sae": path.parent, "cache": Path(cache_dir), "model_spec": model_spec},
            summary={
                "sae": path.parent.name,
                "units": m["n_units"],
                "unit": m["unit"],
                "tokens": m["n_rows"],
                "never_fired": int((store.units["count"] == 0).sum()),
                "seconds": m["seconds"],
            },
            checksums=False,
        )
        out.append(store)
    return out


def explain_features(ws: Workspace, stores, cfg=None, scorers=("detection", "fuzz"), latents=None, **options) -> list:
    """Explain (and score) each feature store (`workbench features explain`; options go to explain_store) and, for a
    store the workspace recorded, record it again with its explanations listed (so a workspace clean-up knows them
    and its loader checks them); returns each explanations folder. ensure=True: a store already explained is kept."""
    from workbench.features.explain_run import explain_store
    from workbench.features.explanations import FOLDER, has_explanations, summary
    from workbench.features.store import FeatureStore

    ensure, out = options.pop("ensure", False), []
    for path in stores:
        store = FeatureStore(path)
        folder = store.path / FOLDER
        if not (ensure and has_explanations(store)):
            folder = explain_store(store.path, cfg, scorers, latents, **options)
            old = store.path / MANIFEST
            if old.is_file() and store.path.resolve().is_relative_to(ws.root.resolve()):
                _record_explained(ws, store.path, artifact_manifest(old), summary(FeatureStore(path)))
        out.append(folder)
    return out


def _record_explained(ws: Workspace, path: Path, m: dict, said: dict) -> None:
    summary = {**m["summary"], "explanations": said}
    ws.record(
        path, "features", made_by=m["made_by"], config=m["config"], inputs=m["inputs"], summary=summary, checksums=False
    )


def train_attention(
    ws: Workspace,
    model_spec: str = "tiny",
    cfg=None,
    *,
    corpus_spec: str = "synthetic",
    out=None,
    name: str | None = None,
    resume: bool = False,
    report_queries: int = 200,
    ensure: bool = False,
    text_field: str = "text",
    adopt: str | None = None,
) -> tuple[dict, Path]:
    """Sparse-attention post-training (`workbench attention train`) into <ws>/models/<name> or `out`,
    recorded as a model (the report says whether the constraint was met); returns (report, folder).
    report_queries: queries per task family for the report's accuracy table; adopt: train.adopt_kept."""
    from workbench.attention.report import read_report
    from workbench.attention.train import sparsify
    from workbench.checkpoint import dist_info

    folder = Path(out) if out else ws.path("models", name or f"{slug(Path(model_spec).name)}-sparse")
    if ensure and complete(folder):
        return read_report(folder), folder
    check_artifact(folder, "models", {"model_spec": model_spec, "corpus_spec": corpus_spec.split(",")})
    resume = resume or (ensure and (folder / "checkpoint.pt").is_file())
    report = sparsify(
        model_spec,
        folder,
        cfg,
        corpus_spec,
        resume=resume,
        report_queries=report_queries,
        text_field=text_field,
        adopt=adopt,
    )
    if dist_info()[0] == 0:  # under torchrun, rank 0 records
        ws.record(
            folder,
            "models",
            made_by="workbench attention train",
            config=report["config"],
            inputs={
                "model": report["base_model"],
                "model_spec": ws.rel(model_spec) if Path(model_spec).exists() else model_spec,
                "corpus": report["corpus"],
            },
            summary=_attention_summary(report),
        )
    return report, folder


def _attention_summary(report: dict) -> dict:
    """A sparse model's manifest summary: the verdict, the CEs and the open edges."""
    keys = ("constraint_met", "ce_target", "open_fraction", "mean_open_keys_per_query")
    return {**{k: report[k] for k in keys}, "ce_base": report["ce"]["base"], "ce": report["ce"]["sparse"]}


def embedded_sparse_model(ws: Workspace, name: str = "tiny-sparse", ensure: bool = False) -> tuple[dict, Path]:
    """The embedded sparse-attention model (data/models/<name>, with its card and the circuit comparisons shipped
    with it) copied into <ws>/models/<name> and recorded like a trained one, so the app's Attention and Compare
    pages and the demo find it there (the demo's compare step keeps a shipped family's comparison)."""
    from workbench.attention.card import copy_model, shipped
    from workbench.attention.report import read_report
    from workbench.models import EMBEDDED

    sparse = [n for n in EMBEDDED if (EMBEDDED[n] / "sparsify.json").is_file()]
    if name not in sparse:
        raise BadValueError(f"{name!r} is not an embedded sparse-attention model; choose one of: {', '.join(sparse)}")
    folder = ws.path("models", name)
    if complete(folder):
        if ensure:
            return read_report(folder), folder
        raise OutputExistsError(f"{folder} already holds a model; remove it or use it as it is")
    made_by = f"embedded data/models/{name}"
    with artifact_transaction(ws, folder, "models", made_by, what="a model") as staged:
        copy_model(EMBEDDED[name], staged, shipped(EMBEDDED[name]))
        report = read_report(staged)
        ws.record(
            staged,
            "models",
            made_by=made_by,
            config=report["config"],
            inputs={
                "model": report["base_model"],
                "model_spec": report.get("base_spec", "tiny"),
                "corpus": report["corpus"],
            },
            summary=_attention_summary(report),
        )
    return report, folder


def compare_attention(
    ws: Workspace,
    base,
    sparse,
    sparse_dir,
    task: str,
    n: int = 20,
    *,
    n_samples: int = DEFAULT_SAMPLES,
    progress: bool = True,
    ensure: bool = False,
) -> dict:
    """`workbench attention compare` on one task family, kept with the sparse model as compare/<task>.json
    (where the app finds it); the model's manifest is rewritten to list the new file (ensure: a kept
    comparison is returned as read)."""
    import json

    from workbench.atomic import atomic_write_text
    from workbench.attention.compare import compare

    folder = Path(sparse_dir)
    if ensure and (folder / "compare" / f"{slug(task)}.json").is_file():
        return json_file(folder / "compare" / f"{slug(task)}.json", "attention comparison", "run the compare again")
    res = compare(base, sparse, task, n, n_samples=n_samples, progress=progress)
    (folder / "compare").mkdir(exist_ok=True)
    atomic_write_text(folder / "compare" / f"{slug(task)}.json", json.dumps(res, indent=1))
    rerecord(ws, folder, "models", "workbench attention compare")
    return res


API = "Python API"  # the made_by of what `record` adopts


def record(ws: Workspace, *paths) -> list[Path]:
    """Record what the Python API made, so `workbench ls` and the app list it like a command's output.

    Each path is a cache folder (`workbench.cache.harvest`), an SAE folder or a folder of them
    (`workbench.sae.train`), a saved model folder (`workbench.models.save`), or a circuit file
    (`Circuit.save`, copied into <ws>/circuits/<stem>/ with its exports). Folders stay where they are
    (outside the workspace they are registered in it). Returns the manifests' folders.
    """
    out = []
    for p in map(Path, paths):
        if p.is_file():
            out.append(_record_circuit_file(ws, p))
        elif (p / "manifest.json").is_file():
            out.append(_record_cache(ws, p))
        elif (p / "cfg.json").is_file():
            out.append(_adopt_sae(ws, p))
        elif (p / "config.json").is_file() and (p / "model.safetensors").is_file():
            ws.record(p, "models", made_by=API, config={})
            out.append(p)
        elif saes := sorted(d for d in p.glob("*/") if (d / "cfg.json").is_file()):
            out += [_adopt_sae(ws, d) for d in saes]
        else:
            raise BadValueError(
                f"{p} is none of what `record` takes: a cache folder (manifest.json), an SAE folder (cfg.json) or "
                "a folder of them, a saved model folder (config.json + model.safetensors), or a circuit file"
            )
    return out


def _record_cache(ws: Workspace, folder: Path) -> Path:
    from workbench.cache.reader import ActivationCache

    cache = ActivationCache.open(folder)
    m = cache.manifest
    summary = {"train_tokens": cache.n_tokens("train"), "heldout_tokens": cache.n_tokens("heldout")}
    inputs = {"model": m["model"], "corpus": m["corpus"]}
    ws.record(folder, "caches", made_by=API, config=m["config"], inputs=inputs, summary=summary, checksums=False)
    return folder


def _adopt_sae(ws: Workspace, folder: Path) -> Path:
    from workbench.sae.io import read_info

    meta = json_file(folder / "cfg.json", "SAE's SAELens config", "retrain the SAE").get("metadata", {})
    cache = (folder / meta["dataset_path"]).resolve() if meta.get("dataset_path") else None
    _record_sae(ws, folder, API, cache, {"train": read_info(folder).get("train_config", {})})
    return folder


def _record_circuit_file(ws: Workspace, path: Path) -> Path:
    return import_circuit(ws, path, made_by=API)[1]


def import_circuit(ws: Workspace, path, model=None, model_spec: str | None = None, *, name=None, made_by=None):
    """A workbench or EAP-IG/MIB circuit file recorded in <ws>/circuits/<name> with its exports (`workbench
    circuit import`), checked against `model` when given (a MIB file names no model: it is bound to this one);
    returns (circuit, folder). A circuit-tracer / Neuronpedia graph JSON is recorded as a graph (import_graph)."""
    from workbench.circuits import schema
    from workbench.circuits.component.export import read_circuit
    from workbench.provenance import model_id

    path = Path(path)
    if schema.detect(schema.load(path)) == "neuronpedia":
        return import_graph(ws, path, model, model_spec, name=name, made_by=made_by)
    c = read_circuit(path, model)
    if model is not None:
        c.model_id = c.model_id or model_id(model)
    stem = slug(path.name.removesuffix(".json").removesuffix(".mib"))
    folder = ws.path("circuits", name or (stem if stem != "circuit" else circuit_name(c.query, c.method)))
    command = made_by or "workbench circuit import"
    inputs = _model_inputs(ws, model, model_spec) if model is not None else {"model": c.model_id}
    with ExitStack() as held:
        staged = _claim(held, ws, folder, command, {"source": path})
        _record_circuit(ws, c, staged, command, {**inputs, "source": path.resolve()})
    return c, folder


def import_graph(ws: Workspace, path, model=None, model_spec: str | None = None, *, name=None, made_by=None):
    """A circuit-tracer / Neuronpedia graph JSON recorded in <ws>/circuits/<name>/graph.json as it is (validated as
    the app's upload is, its notes and pins kept), so `workbench ls`, the app's Feature graph page and `circuit check`
    find it; checked against `model` when given (its layers; its id where the file names a workbench one), and then
    bound to it. Returns (schema.FeatureGraph, folder)."""
    from workbench.atomic import write_json
    from workbench.circuits import annotations, schema
    from workbench.provenance import check_same, model_id, workbench_id

    path = Path(path)
    d = schema.load(path)
    fg = schema.read_feature_graph(annotations.without_notes(d))
    scan = str(fg.metadata.get("scan", ""))
    inputs = {"model": scan}
    if model is not None:
        check_same("model", workbench_id(scan), model_id(model), str(path))
        if fg.n_layers != model.cfg.n_layers:
            raise BadValueError(
                f"{path} is a graph of a {fg.n_layers}-layer model ({scan or 'its scan unnamed'}), but this model has "
                f"{model.cfg.n_layers} layers; pass the --model it was made on"
            )
        inputs = _model_inputs(ws, model, model_spec or model.cfg.model_name)
    stem = slug(path.name.removesuffix(".json"))
    folder = ws.path("circuits", name or (stem if stem not in ("graph", "neuronpedia") else slug(scan) + "-graph"))
    command = made_by or "workbench circuit import"
    with ExitStack() as held:
        staged = _claim(held, ws, folder, command, {"source": path})
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
