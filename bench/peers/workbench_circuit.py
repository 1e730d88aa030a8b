"""Workbench side (main venv) of the circuit benchmark; cfg["mode"] picks what one process measures.

attribute  workbench.circuits.component.attribute(method="eap-ig", steps=m) per query (2 forwards + m forward-backwards)
search     workbench.circuits.find_circuit per synthetic query: attribution on the query and its samples,
           best-of-N, refinement and the exact NDF curve over the MIB grid
fwdbwd     the model's own forward + backward of the logit difference on the prompt, with gradients
           to the weights ("params") or to the activations only ("inputs"): the memory reference
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

import common  # noqa: E402
import torch  # noqa: E402


def attribute_mode(cfg, model, prompts):
    from workbench.circuits import prepare
    from workbench.circuits.component.attribute import attribute

    out = []
    for p in prompts:
        q = prepare(model, p["tokens"], p["answer"], p["cf_tokens"], p["wrong"])
        times, scores = common.timed(
            lambda: attribute(model, q, method="eap-ig", steps=cfg["steps"], step_batch=cfg.get("step_batch")),
            cfg["repeats"],
            cfg.get("warmup", 1),
        )
        out.append(
            {
                "name": p["name"],
                "n_tokens": len(p["tokens"]),
                "seconds": times,
                "seconds_median": common.median(times),
                "n_edges": scores.graph.n_edges,
            }
        )
    return out


def search_mode(cfg, model, prompts):
    from workbench.circuits import find_circuit
    from workbench.circuits.search import ZeroGapError
    from workbench.corpus import tasks

    out = []
    for task, n in cfg["tasks"].items():
        for i, q in enumerate(tasks.queries(task, n, seed=cfg["seed"], tokenizer=model.tokenizer)):
            t0 = time.perf_counter()
            try:
                c = find_circuit(
                    model, q, budget=cfg["budget"], steps=cfg["steps"], n_samples=cfg["n_samples"], curve=True
                )
                row = {
                    "ndf": c.ndf,
                    "n_edges_kept": c.n_edges,
                    "selected": c.faithfulness.get("selected"),
                    "exact_evaluations": c.faithfulness.get("exact_evaluations"),
                }
            except ZeroGapError as e:
                row = {"skipped": str(e)[:200]}
            out.append({"name": f"{task}{i}", "seconds": [time.perf_counter() - t0], **row})
            out[-1]["seconds_median"] = out[-1]["seconds"][0]
    return out


def fwdbwd_mode(cfg, model, prompts):
    grads = cfg["grads"]
    for p in model.parameters():
        p.requires_grad_(grads == "params")
    out = []
    for p in prompts:
        tokens = torch.tensor(p["tokens"])[None]

        def run():
            model.zero_grad(set_to_none=True)
            if grads == "params":
                logits = model(tokens)
            else:
                emb = model.embed(tokens) + model.pos_embed(tokens)
                emb.requires_grad_(True)
                logits = model(emb, start_at_layer=0)
            (logits[0, -1, p["answer"]] - logits[0, -1, p["wrong"]]).backward()

        times, _ = common.timed(run, cfg["repeats"], cfg.get("warmup", 1))
        out.append(
            {"name": p["name"], "n_tokens": len(p["tokens"]), "seconds": times, "seconds_median": common.median(times)}
        )
    return out


def main() -> None:
    cfg = common.load_config()
    if cfg["mode"] == "search":
        from workbench.models import load

        model, _ = load(cfg["model_dir"], device="cpu")
    else:
        model = common.load_model(cfg["model_dir"])
    prompts = common.load_prompts(cfg["prompts"]) if cfg.get("prompts") else []
    base = common.reset_peak()
    fn = {"attribute": attribute_mode, "search": search_mode, "fwdbwd": fwdbwd_mode}[cfg["mode"]]
    queries = fn(cfg, model, prompts)
    peak = common.rss_mb()
    label = {"attribute": "workbench", "search": "workbench search", "fwdbwd": f"forward+backward ({cfg.get('grads')})"}
    common.emit(
        {
            "side": label[cfg["mode"]],
            "mode": cfg["mode"],
            "steps": cfg.get("steps"),
            "step_batch": cfg.get("step_batch"),
            "queries": queries,
            "rss_base_mb": base,
            "rss_peak_mb": peak,
            "rss_extra_mb": peak - base,
            "versions": common.versions("workbench", "transformer-lens"),
        }
    )


if __name__ == "__main__":
    main()
