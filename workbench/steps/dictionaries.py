"""`workbench sae train` and `sae eval`: SAEs, transcoder sets and CLTs trained from a cache, evaluated, and recorded
(the rows of workbench.dictionaries.kinds name these steps)."""

from __future__ import annotations

from pathlib import Path

from workbench.checkpoint import rank_zero_writes
from workbench.dictionaries.kinds import CLT, SAE, TRANSCODERS, WORKSPACE_KINDS, kind_of, named
from workbench.errors import BadValueError
from workbench.guard import check_artifact, check_in_place
from workbench.readback import json_file
from workbench.sae import clt_eval, clt_io
from workbench.sae import eval as sae_eval
from workbench.sae.config import EvalConfig, SAEConfig, TrainConfig
from workbench.sae.io import read_info
from workbench.sae.scores import shown
from workbench.sae.trainer import train
from workbench.sae.transcoders import SET_MANIFEST, read_manifest, started, train_set
from workbench.sae.transcoders import train_clt as train_clt_run
from workbench.steps.artifacts import complete, manifest_of, rerecord, run_folder, slug
from workbench.workspace import MANIFEST, Workspace

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
    run = run_folder(ws, SAE.workspace, out, name, slug(hook))
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


def _record_saes(ws: Workspace, run: Path, folders, cache_dir, train_cfg: TrainConfig) -> None:
    side = [p for p in (run / "checkpoint.pt", run / "run.json") if p.is_file()]
    for folder in folders:
        record_sae(ws, folder, "workbench sae train", Path(cache_dir), {"train": train_cfg.to_dict()}, side)


def record_sae(ws: Workspace, folder: Path, made_by: str, cache_dir, extra: dict, side=()) -> None:
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

    run = run_folder(ws, TRANSCODERS.workspace, out, name, "transcoders")
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
    run = run_folder(ws, CLT.workspace, out, name, CLT.name)
    check_artifact(run, None, {"cache_dir": cache_dir})
    with rank_zero_writes(run, "workbench sae train --clt") as records:
        folder = train_clt_run(cache_dir, layers, clt_cfg, train_cfg, run, resume=resume)
        if records:
            m = clt_io.read_manifest(folder)
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


def evaluate_one(ws: Workspace, sae_dir, cache_dir, model_spec, cfg) -> dict:
    """One SAE's metrics.json, and its manifest's headline."""
    metrics = sae_eval.evaluate(sae_dir, cache_dir, model_spec, cfg)
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
    return any(k == "fvu" or k.startswith(ALL_MLPS) for k in manifest_of(folder).get("summary", {}))


def evaluate_clt(ws: Workspace, clt_dir, cache_dir, model_spec, cfg) -> dict:
    """A CLT's metrics.json, and its manifest's headline: FVU over every layer, total L0, CE/KL all replaced."""
    m = clt_eval.evaluate_clt(clt_dir, cache_dir, model_spec, cfg)
    r = m.get("all_replaced", {})
    headline = {"fvu": m["fvu"], "l0": m["l0"], **{k: r[k] for k in ("ce_loss_recovered", "kl_score") if k in r}}
    inputs = {"cache": Path(cache_dir), "eval_model": model_spec}
    summary = {**manifest_of(clt_dir).get("summary", {}), **headline}
    rerecord(ws, clt_dir, CLT.workspace, "workbench sae eval", inputs, summary)
    return m


def evaluate_set(ws: Workspace, set_dir, cache_dir, model_spec, cfg) -> dict:
    if model_spec is None:
        raise BadValueError(
            f"{set_dir} is a transcoder set: its evaluation replaces MLPs in the model; drop --no-model"
        )
    result = sae_eval.evaluate_set(set_dir, cache_dir, model_spec, cfg)
    for name, flat in result["members"].items():
        summary = {k: shown(flat, k) for k in SAE_HEADLINE if k in flat}
        rerecord(ws, Path(set_dir) / name, SAE.workspace, "workbench sae eval", {"cache": Path(cache_dir)}, summary)
    summary = {f"{ALL_MLPS}[{k}]": shown(v, "ce_loss_recovered") for k, v in result["all_replaced"].items()}
    inputs = {"cache": Path(cache_dir), "eval_model": model_spec}
    rerecord(ws, set_dir, TRANSCODERS.workspace, "workbench sae eval", inputs, summary)
    return result
