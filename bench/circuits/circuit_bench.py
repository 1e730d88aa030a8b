"""Query-circuit attribution: the workbench against auto-circuit's EAP-IG, plus memory against prompt length.

1. Embedded model, the same synthetic queries (token ids) on both sides, equal interpolation steps m:
   wall time and peak memory of one query's EAP-IG edge scores (workbench `attribute` vs auto-circuit
   `mask_gradient_prune_scores(integrated_grad_samples=m)`), sides interleaved over rounds.
2. The workbench's full search per query (`find_circuit`: attribution on the query and its samples,
   best-of-N, refinement, exact NDF curve); goal under 10 s per query on 2 cores.
3. Peak memory against prompt length (16-1024 tokens) on a randomly initialised GPT-2-small-shaped
   model, next to the model's own forward+backward on the same prompt.

    .venv/bin/python bench/circuits/circuit_bench.py          # full run (~15 min on 2 busy cores)
    .venv/bin/python bench/circuits/circuit_bench.py --quick  # smoke run of every side
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

OUT = harness.BENCH / "results" / "circuits.md"
WORK = harness.WORK / "circuits"
TASKS = ("ioi", "induction", "greater_than", "addition", "facts")


# ---- shared inputs ---------------------------------------------------------------------------------
def save_model(model, folder: Path) -> Path:
    """config.json + model.safetensors: the layout both venvs load (workbench.models' saved-model layout)."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    cfg = {}
    for k, v in model.cfg.to_dict().items():
        try:
            json.dumps(v)
            cfg[k] = v
        except TypeError:
            pass
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))
    harness.write_text(folder / "config.json", json.dumps({"hooked_transformer_config": cfg}, indent=1))
    if getattr(model, "tokenizer", None) is not None:
        model.tokenizer.save_pretrained(str(folder))
    return folder


def embedded_model() -> tuple[Path, str]:
    from workbench.models import EMBEDDED

    if (EMBEDDED["tiny"] / "model.safetensors").is_file():
        return EMBEDDED["tiny"], "data/models/tiny (trained)"
    folder = WORK / "tiny-random"
    if not (folder / "model.safetensors").is_file():
        from workbench.corpus.vocab import vocabulary
        from workbench.models.tokenizer import build_tokenizer
        from workbench.models.toy import TinyConfig, build

        save_model(build(TinyConfig(), build_tokenizer(vocabulary())), folder)
    return folder, "random-init tiny shape (data/models/tiny absent)"


def gpt2_model() -> Path:
    folder = WORK / "gpt2-random"
    if not (folder / "model.safetensors").is_file():
        from transformer_lens import HookedTransformer, HookedTransformerConfig

        save_model(HookedTransformer(HookedTransformerConfig(**harness.GPT2_SHAPE, seed=0, device="cpu")), folder)
    return folder


def embedded_prompts(model_dir: Path, per_task: int) -> tuple[Path, list[dict]]:
    """Synthetic queries as token ids (clean and counterfactual have equal length, as auto-circuit needs)."""
    from workbench.circuits import prepare
    from workbench.corpus import tasks
    from workbench.models import load

    model, tok = load(str(model_dir), device="cpu")
    rows = []
    for task in TASKS:
        for i, q in enumerate(tasks.queries(task, per_task, seed=0, tokenizer=tok)):
            qi = prepare(model, q.prompt, q.answer, q.counterfactual, q.wrong)
            if len(qi.tokens) != len(qi.cf_tokens):
                continue
            rows.append(
                {
                    "name": f"{task}{i}",
                    "tokens": qi.tokens.tolist(),
                    "cf_tokens": qi.cf_tokens.tolist(),
                    "answer": qi.answer,
                    "wrong": qi.wrong,
                    "prompt": q.prompt,
                }
            )
    path = WORK / "prompts-embedded.json"
    harness.write_text(path, json.dumps(rows))
    return path, rows


def random_prompt(n_tokens: int, seed: int = 0) -> Path:
    gen = torch.Generator().manual_seed(seed + n_tokens)
    toks = torch.randint(0, harness.GPT2_SHAPE["d_vocab"], (2, n_tokens), generator=gen)
    a, w = torch.randint(0, harness.GPT2_SHAPE["d_vocab"], (2,), generator=gen).tolist()
    path = WORK / f"prompt-random-{n_tokens}.json"
    harness.write_text(
        path,
        json.dumps(
            [
                {
                    "name": f"random{n_tokens}",
                    "tokens": toks[0].tolist(),
                    "cf_tokens": toks[1].tolist(),
                    "answer": a,
                    "wrong": w,
                }
            ]
        ),
    )
    return path


# ---- runs ------------------------------------------------------------------------------------------
def side(venv: str, script: str, cfg: dict, tag: str, mem_cap_mb: float | None = None) -> dict:
    t0 = time.time()
    try:
        res = harness.run_side(venv, script, cfg, f"circ-{tag}", mem_cap_mb=mem_cap_mb)
    except harness.MemoryCapError as e:
        res = {"error": e.summary, "over_cap_mb": mem_cap_mb}
    except harness.PeerError as e:
        res = {"error": e.summary}
    med = [q["seconds_median"] for q in res.get("queries", [])]
    print(
        f"  [{tag}] {res.get('side', script)}: "
        + (
            f"FAILED {res['error']}"
            if "error" in res
            else f"median {statistics.median(med) if med else float('nan'):.2f}s/query, +{res['rss_extra_mb']:.0f} MB"
        )
        + f" ({time.time() - t0:.0f}s)",
        flush=True,
    )
    return res


def compare(model_dir: Path, prompts: Path, steps: int, rounds: int, repeats: int) -> dict[str, list[dict]]:
    cfgs = {
        "workbench": ("main", "workbench_circuit.py", {"mode": "attribute"}),
        "auto-circuit": ("circuits", "autocircuit_eap.py", {}),
    }
    out: dict[str, list[dict]] = {k: [] for k in cfgs}
    names = list(cfgs)
    for r in range(rounds):
        for name in names[r % 2 :] + names[: r % 2]:
            venv, script, extra = cfgs[name]
            out[name].append(
                side(
                    venv,
                    script,
                    {"model_dir": str(model_dir), "prompts": str(prompts), "steps": steps, "repeats": repeats, **extra},
                    f"cmp-m{steps}-{name}-r{r}",
                )
            )
    return out


def memory_curve(model_dir: Path, lengths: list[int], steps: int, ac_max: int, cap_mb: float) -> list[dict]:
    rows = []
    for n in lengths:
        p = str(random_prompt(n))
        base = {"model_dir": str(model_dir), "prompts": p, "steps": steps, "repeats": 1, "warmup": 0}
        row = {"n_tokens": n}
        for key, venv, script, extra in (
            ("fwdbwd_params", "main", "workbench_circuit.py", {"mode": "fwdbwd", "grads": "params"}),
            ("fwdbwd_inputs", "main", "workbench_circuit.py", {"mode": "fwdbwd", "grads": "inputs"}),
            ("wb_default", "main", "workbench_circuit.py", {"mode": "attribute", "step_batch": None}),
            ("wb_step1", "main", "workbench_circuit.py", {"mode": "attribute", "step_batch": 1}),
            ("autocircuit", "circuits", "autocircuit_eap.py", {}),
        ):
            if key == "autocircuit" and n > ac_max:
                continue
            row[key] = side(venv, script, {**base, **extra}, f"mem{n}-{key}", cap_mb)
        rows.append(row)
    return rows


# ---- report ----------------------------------------------------------------------------------------
def _per_query(runs: list[dict]) -> dict[str, float]:
    """Median over rounds of each query's median time."""
    acc: dict[str, list[float]] = {}
    for r in runs:
        for q in r.get("queries", []):
            acc.setdefault(q["name"], []).append(q["seconds_median"])
    return {k: statistics.median(v) for k, v in acc.items()}


def _rss(runs, key="rss_extra_mb"):
    vals = [r[key] for r in runs if key in r]
    return statistics.median(vals) if vals else float("nan")


def compare_section(res: dict, steps: int, prompts: list[dict], repeats: int) -> tuple[list[str], list[str]]:
    wb, ac = _per_query(res["workbench"]), _per_query(res["auto-circuit"])
    common = [k for k in wb if k in ac]
    rows = []
    for p in prompts:
        k = p["name"]
        if k in common:
            rows.append([k, len(p["tokens"]), f"{1000 * wb[k]:.0f}", f"{1000 * ac[k]:.0f}", f"{ac[k] / wb[k]:.2f}x"])
    if not common:
        err = [r.get("error") for rs in res.values() for r in rs if "error" in r]
        return [f"No comparison: {err}"], [f"- attribution vs auto-circuit (m = {steps}): **not measured** ({err[:1]})"]
    wb_m, ac_m = statistics.median(wb[k] for k in common), statistics.median(ac[k] for k in common)
    n_edges = {r.get("n_edges") for r in res["auto-circuit"] if "n_edges" in r}
    wb_edges = {q.get("n_edges") for r in res["workbench"] for q in r.get("queries", [])}
    rows.append(["**median**", "", f"**{1000 * wb_m:.0f}**", f"**{1000 * ac_m:.0f}**", f"**{ac_m / wb_m:.2f}x**"])
    wrap = [r["wrap_s"] for r in res["auto-circuit"] if "wrap_s" in r]
    lines = [
        f"### Attribution pass, embedded model, EAP-IG m = {steps} ({len(common)} queries, "
        f"{len(res['workbench'])} interleaved rounds, median of {repeats} timed calls per query per round after 1 "
        "untimed warm-up call)",
        "",
        *harness.table(["query", "tokens", "workbench ms", "auto-circuit ms", "workbench speed-up"], rows),
        "",
        f"Edges: workbench graph {sorted(wb_edges)}, auto-circuit {sorted(n_edges)}. "
        f"auto-circuit's one-time `patchable_model` wrapping: {statistics.median(wrap) if wrap else float('nan'):.2f}s (not counted). "
        f"Peak RSS above the loaded model (whole process, all queries): workbench {_rss(res['workbench']):.0f} MB, "
        f"auto-circuit {_rss(res['auto-circuit']):.0f} MB.",
        "",
    ]
    met = wb_m <= ac_m
    verdicts = [
        f"- Attribution pass vs auto-circuit at m = {steps}: workbench {1000 * wb_m:.0f} ms vs "
        f"{1000 * ac_m:.0f} ms per query (median), {ac_m / wb_m:.2f}x -> **{'met' if met else 'missed'}** "
        f"(goal: no slower); peak memory above the model {_rss(res['workbench']):.0f} MB vs "
        f"{_rss(res['auto-circuit']):.0f} MB"
    ]
    return lines, verdicts


def search_section(run: dict, budget: float, n_samples: int, steps: int, threads) -> tuple[list[str], list[str]]:
    if "error" in run:
        return [f"Full search failed: {run['error']}"], [f"- Full search: **failed** ({run['error']})"]
    qs = run["queries"]
    done = [q for q in qs if "skipped" not in q]
    rows = [
        [
            q["name"],
            f"{q['seconds_median']:.2f}",
            "skipped (zero gap)" if "skipped" in q else f"{q['ndf']:.3f}",
            q.get("n_edges_kept", ""),
            q.get("exact_evaluations", ""),
            q.get("selected", ""),
        ]
        for q in qs
    ]
    worst = max((q["seconds_median"] for q in done), default=float("nan"))
    med = statistics.median(q["seconds_median"] for q in done) if done else float("nan")
    lines = [
        f"### Full query-circuit search, embedded model (`find_circuit`, budget {budget:.0%} of edges, EAP-IG m = "
        f"{steps}, {n_samples} resampled counterfactuals + {n_samples} paraphrases, refinement, exact NDF curve "
        "over the MIB grid)",
        "",
        *harness.table(["query", "seconds", "NDF", "edges", "exact evaluations", "selected candidate"], rows),
        "",
        f"Peak RSS above the loaded model: {run['rss_extra_mb']:.0f} MB.",
        "",
    ]
    verdicts = [
        f"- Full search under 10 s per query on 2 cores (measured with {threads} thread(s) per process): "
        f"median {med:.2f}s, slowest {worst:.2f}s over "
        f"{len(done)} queries -> **{'met' if worst < 10 else 'missed'}**"
    ]
    return lines, verdicts


def _measured(r: dict, key: str) -> dict | None:
    """One memory-curve side's result at one length, None where it failed or was stopped."""
    v = r.get(key)
    return v if v and "error" not in v else None


def _memory_cell(r: dict, key: str) -> str:
    v = r.get(key)
    if not v:
        return "-"
    if "over_cap_mb" in v:
        return f"> {v['over_cap_mb'] / 1024:.0f} GB RSS, stopped"
    if "error" in v:
        return "failed"
    return f"{v['rss_extra_mb']:,.0f} ({v['queries'][0]['seconds_median']:.1f}s)"


def _memory_ratio(r: dict, key: str, ref: str) -> float | None:
    a, b = _measured(r, key), _measured(r, ref)
    return a["rss_extra_mb"] / b["rss_extra_mb"] if a and b and b["rss_extra_mb"] > 0 else None


def memory_section(rows: list[dict], steps: int) -> tuple[list[str], list[str]]:
    """The memory curve's table and its two verdicts per workbench setting (the 2x goal, the 8 GB length)."""
    cell, ratio = _memory_cell, _memory_ratio
    fmt = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
    table_rows = []
    for r in rows:
        table_rows.append(
            [
                r["n_tokens"],
                *(cell(r, k) for k in ("fwdbwd_params", "fwdbwd_inputs", "wb_default", "wb_step1", "autocircuit")),
                f"{fmt(ratio(r, 'wb_default', 'fwdbwd_inputs'))} / {fmt(ratio(r, 'wb_step1', 'fwdbwd_inputs'))}",
                f"{fmt(ratio(r, 'wb_default', 'fwdbwd_params'))} / {fmt(ratio(r, 'wb_step1', 'fwdbwd_params'))}",
            ]
        )
    lines = [
        f"### Peak memory against prompt length: random-init GPT-2-small shape (124M parameters), EAP-IG m = {steps}",
        "",
        "Peak RSS of each process above its RSS after loading the model, MB (time of the one call in brackets). "
        "`all steps` batches all m interpolation steps in one forward-backward (step_batch=None); the library default step_batch='auto' sizes the batch from a 64 MB activation estimate, which on this shape means 4 steps per batch at 16 tokens and 1 from 64 tokens up; "
        "`step_batch=1` runs them one at a time. Reference: the model's own forward + backward of the logit "
        "difference on the same prompt, with gradients to the weights (`params`) or to the activations only "
        "(`inputs`, what attribution needs).",
        "",
        *harness.table(
            [
                "tokens",
                "fwd+bwd params",
                "fwd+bwd inputs",
                "workbench all steps",
                "workbench step_batch=1",
                "auto-circuit",
                "ratio vs fwd+bwd inputs (all steps / step 1)",
                "ratio vs fwd+bwd params (all steps / step 1)",
            ],
            table_rows,
        ),
        "",
    ]
    verdicts = []
    for key, label in (
        ("wb_step1", "step_batch=1"),
        ("wb_default", "all m steps in one batch (step_batch=None, not the default)"),
    ):
        verdicts += memory_verdicts(rows, key, label)
    return lines, verdicts


def memory_verdicts(rows: list[dict], key: str, label: str) -> list[str]:
    """One workbench setting against the 2x-of-forward+backward goal, and the longest prompt within 8 GB."""
    ratio = _memory_ratio
    vs_in = [(r["n_tokens"], ratio(r, key, "fwdbwd_inputs")) for r in rows]
    vs_p = [(r["n_tokens"], ratio(r, key, "fwdbwd_params")) for r in rows]
    stopped = [r["n_tokens"] for r in rows if r.get(key) and "over_cap_mb" in r[key]]
    got_in = [x for _, x in vs_in if x is not None]
    got_p = [x for _, x in vs_p if x is not None]
    if not got_in:
        return []
    n_in = [n for n, x in vs_in if x is not None]
    met = max(got_in) <= 2 and not stopped
    verdicts = [
        f"- Attribution memory at most 2x the model's own forward+backward, {label}: worst ratio over "
        f"{min(n_in)}-{max(n_in)} tokens {max(got_in):.2f}x against the activation-gradient fwd+bwd, "
        f"{max(got_p):.2f}x against the weight-gradient fwd+bwd"
        + (f"; stopped above the memory cap at {', '.join(map(str, stopped))} tokens" if stopped else "")
        + f" -> **{'met' if met else 'missed'}** (against the stricter reference)"
    ]
    pts = sorted((r["n_tokens"], _measured(r, key)["rss_peak_mb"]) for r in rows if _measured(r, key))
    fit = [n for n, peak in pts if peak <= 8 * 1024]
    text = (
        f"{max(fit)} tokens measured ({dict(pts)[max(fit)] / 1024:.1f} GB absolute peak RSS)"
        if fit
        else "none of the measured lengths"
    )
    if stopped:
        cap = next(r[key]["over_cap_mb"] for r in rows if r.get(key) and "over_cap_mb" in r[key])
        text += f"; the {stopped[0]}-token run passed the {cap / 1024:.0f} GB cap"
    if len(pts) >= 3:
        # peak(n) ~ a + b n + c n^2 (attention patterns are quadratic): where it reaches 8 GB
        coef = np.polyfit([p[0] for p in pts], [p[1] for p in pts], 2)
        grid = np.arange(16, 65537, 16)
        over = grid[np.polyval(coef, grid) > 8 * 1024]
        if len(over):
            text += f"; a quadratic fit of the measured peaks reaches 8 GB at about {int(over[0]):,} tokens"
    return verdicts + [f"- Longest prompt within 8 GB, {label}: {text} (the model's n_ctx is 1024)"]


NOTES = [
    "- The two EAP-IG variants differ in what they interpolate: the workbench interpolates the input "
    "embedding between counterfactual and clean (EAP-IG-inputs, Hanna et al.; 2 forwards + m "
    "forward-backwards), auto-circuit interpolates every edge mask between clean and counterfactual "
    "activations (1 forward + m + 1 forward-backwards). Both give one score per edge of the same graph "
    "(q/k/v split inputs); equal m is the comparison the goal asks for.",
    "- auto-circuit 1.0.1 needs two TransformerLens 3 renames shimmed (`past_key_value_caching`, "
    "`HookedTransformerKeyValueCache`) and `attrs`, which it imports without declaring; both venvs use "
    "TransformerLens 3.9.0 so the model code is identical.",
    "- 'The attribution may add at most 2x on top of the forward+backward' is read strictly: the "
    "attribution's peak above the loaded model is at most 2x the forward+backward's peak above the loaded "
    "model, on the same prompt.",
    "- Memory is the peak RSS (VmHWM, reset after loading the model) of a fresh process per side and "
    "length, minus its RSS at that reset; the 8 GB question uses the absolute peak RSS of the process.",
]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--steps", type=int, default=5, help="EAP-IG interpolation steps m on both sides")
    ap.add_argument("--per-task", type=int, default=2, help="queries per synthetic task")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget", type=float, default=0.02)
    ap.add_argument("--n-samples", type=int, default=3)
    ap.add_argument("--lengths", default="16,64,256,1024", help="prompt lengths of the memory curve ('' skips it)")
    ap.add_argument("--autocircuit-max-len", type=int, default=256)
    ap.add_argument(
        "--mem-cap-gb",
        type=float,
        default=10.0,
        help="stop a memory-curve side whose RSS passes this (reported as over the cap)",
    )
    harness.add_common_args(ap, OUT)
    args = ap.parse_args()
    if args.quick:
        args.per_task, args.rounds, args.repeats, args.autocircuit_max_len = 1, 1, 1, 64
        args.lengths = "16,64" if args.lengths == ap.get_default("lengths") else args.lengths
    return args


def main() -> None:
    args = parse_args()
    t_start = time.time()
    WORK.mkdir(parents=True, exist_ok=True)
    info = harness.machine_info()
    threads = harness.set_threads(args.threads)
    versions = {
        "main": harness.venv_versions("main", ("torch", "transformer-lens", "workbench")),
        "circuits": harness.venv_versions("circuits", ("torch", "transformer-lens", "auto-circuit")),
    }
    model_dir, source = embedded_model()
    prompts_path, prompts = embedded_prompts(model_dir, args.per_task)
    print(f"embedded model: {source}; {len(prompts)} queries", flush=True)
    cmp = compare(model_dir, prompts_path, args.steps, args.rounds, args.repeats)
    print("full search", flush=True)
    search = side(
        "main",
        "workbench_circuit.py",
        {
            "mode": "search",
            "model_dir": str(model_dir),
            "steps": args.steps,
            "tasks": {t: args.per_task for t in TASKS},
            "seed": 0,
            "budget": args.budget,
            "n_samples": args.n_samples,
        },
        "search",
    )
    print("memory against prompt length", flush=True)
    lengths = [int(x) for x in args.lengths.split(",") if x.strip()]
    # --lengths '' skips the memory curve (and building the 124M-parameter GPT-2-shaped model)
    mem = (
        memory_curve(gpt2_model(), lengths, args.steps, args.autocircuit_max_len, args.mem_cap_gb * 1024)
        if lengths
        else []
    )
    harness.write_text(WORK / "raw.json", json.dumps({"compare": cmp, "search": search, "memory": mem}, indent=1))
    s1, v1 = compare_section(cmp, args.steps, prompts, args.repeats)
    s2, v2 = search_section(
        search, args.budget, args.n_samples, args.steps, search.get("versions", {}).get("threads", "?")
    )
    s3, v3 = memory_section(mem, args.steps)
    text = [
        "# Query-circuit benchmark",
        "",
        *harness.machine_lines(info, versions, threads),
        f"- Embedded model: {source} (`{model_dir.relative_to(harness.ROOT) if model_dir.is_relative_to(harness.ROOT) else model_dir}`); "
        f"queries: {args.per_task} per task from `tasks.queries(task, n, seed=0)` for {', '.join(TASKS)} "
        "(token ids shared by both sides; metric: logit difference answer - wrong at the last position; "
        "ablation: the counterfactual prompt)",
        f"- Command: `.venv/bin/python bench/circuits/circuit_bench.py {' '.join(sys.argv[1:])}` (total {time.time() - t_start:.0f}s)",
        "",
        "## Goals",
        "",
        *v1,
        *v2,
        *v3,
        "",
        "## Tables",
        "",
        *s1,
        *s2,
        *s3,
        "## Notes",
        "",
        *NOTES,
        "",
    ]
    harness.write_text(args.out, "\n".join(text))
    print(f"wrote {args.out} ({time.time() - t_start:.0f}s)")


if __name__ == "__main__":
    main()
