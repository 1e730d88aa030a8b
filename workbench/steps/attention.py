"""`workbench attention train` and `attention compare`: sparse-attention models trained (or the embedded one
copied) and recorded, their circuits compared with the base model's."""

from __future__ import annotations

import json
from pathlib import Path

from workbench.atomic import atomic_write_text
from workbench.attention.card import copy_model, shipped
from workbench.attention.compare import compare, saved_control
from workbench.attention.report import read_report
from workbench.attention.train import sparsify
from workbench.checkpoint import dist_info
from workbench.circuits.config import DEFAULT_SAMPLES
from workbench.errors import BadValueError, OutputExistsError
from workbench.guard import check_artifact
from workbench.models import EMBEDDED
from workbench.readback import json_file
from workbench.steps.artifacts import complete, rerecord, slug
from workbench.transaction import artifact_transaction
from workbench.workspace import Workspace


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
    folder = Path(sparse_dir)
    if ensure and (folder / "compare" / f"{slug(task)}.json").is_file():
        return json_file(folder / "compare" / f"{slug(task)}.json", "attention comparison", "run the compare again")
    control = saved_control(
        folder, str(base.cfg.device)
    )  # a run with a control: base - sparse split into training and gates
    res = compare(base, sparse, task, n, n_samples=n_samples, progress=progress, control=control)
    (folder / "compare").mkdir(exist_ok=True)
    atomic_write_text(folder / "compare" / f"{slug(task)}.json", json.dumps(res, indent=1))
    rerecord(ws, folder, "models", "workbench attention compare")
    return res
