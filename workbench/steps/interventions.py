"""`workbench intervene`: one intervention, or a streamed batch, on a dictionary's units, recorded."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

from workbench.atomic import write_json
from workbench.cache.reader import ActivationCache
from workbench.interventions import engine
from workbench.interventions.batch import prompts_sha256, run_batch
from workbench.interventions.config import InterventionConfig
from workbench.interventions.dictionary import load_dictionary
from workbench.provenance import dictionary_id
from workbench.steps.artifacts import circuit_name, claim, claim_in_place, model_inputs
from workbench.workspace import Workspace


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
    cfg = cfg or InterventionConfig()
    batch = isinstance(prompt, list)
    key = {"prompt": prompts_sha256(prompt) if batch else prompt, "dictionary": ws.rel(dictionary)}
    folder = ws.path("interventions", name or circuit_name(key, cfg.to_dict()))
    source = None
    if mean_cache is not None:
        source = ActivationCache.open(mean_cache)
    with ExitStack() as held:
        inputs = {"dictionary": dictionary, "mean_cache": mean_cache}
        if batch:
            staged = claim_in_place(held, folder, "workbench intervene", inputs, "interventions", resume)
        else:
            staged = claim(held, ws, folder, "workbench intervene", inputs, kind="interventions")
        sites = load_dictionary(dictionary, model, model.cfg.device)
        inputs = {**model_inputs(ws, model, model_spec), "dictionary": Path(dictionary)}
        inputs["dictionary_id"] = dictionary_id(dictionary)
        if batch:
            key = {**key, "config": cfg.to_dict(), "model": inputs["model"], "dictionary_id": inputs["dictionary_id"]}
            result = run_batch(
                staged, model, sites, prompt, cfg, key, mean_source=source, resume=resume, on_result=on_result
            )
            inputs["prompts"] = {"n": len(prompt), "sha256": key["prompt"]}
            summary = {"prompts": result["prompts"], "mean_kl": result["mean_kl"]}
        else:
            result = engine.intervene(model, sites, prompt, cfg, source)
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
