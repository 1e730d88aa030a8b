"""`workbench model train` and `model import`: the embedded architecture trained, or another model converted into
a workbench model folder, and recorded."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from workbench.errors import BadValueError, OutputExistsError
from workbench.guard import check_artifact
from workbench.lock import output_lock
from workbench.models import ModelSpecError, gguf_import, hf, save
from workbench.models.card import write_import_card
from workbench.models.toy import TinyConfig, train_tiny
from workbench.provenance import model_id
from workbench.steps.artifacts import complete, slug
from workbench.transaction import artifact_transaction
from workbench.workspace import Workspace


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
