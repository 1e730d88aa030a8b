"""Cross-layer transcoders against per-layer sets (issue #31 §4), each part resumable and written to its own
section of bench/results/clts.md:

    python bench/circuits/clt_bench.py --part prep        # caches of tiny and tiny-sparse, a set and CLTs (CLI; skips done)
    python bench/circuits/clt_bench.py --part speed       # training tokens/s: CLT vs set on the same cache rows, dense bounds
    python bench/circuits/clt_bench.py --part memory      # the CLT's memory estimate vs its measured peak; GPT-2-small shape
    python bench/circuits/clt_bench.py --part gpt2        # a random GPT-2-small-shaped CLT: one 256-token graph, peak RSS
    python bench/circuits/clt_bench.py --part queries [--dicts set,clt-l0,clt-params] [--families ...] [--n 20]
    python bench/circuits/clt_bench.py --part dicts       # (render) the dictionaries: recipe, matching, `sae eval` quality
    python bench/circuits/clt_bench.py --part compare     # (render) set vs CLTs on the held-out queries, paired intervals
    python bench/circuits/clt_bench.py --part sparse      # (render) base vs sparse attention through CLTs

`queries` measures one dictionary on one model per (dictionary, family) store under bench/work/clts/, one query
at a time (a restart skips the stored ones): the attribution graph's replacement score and completeness, the
nodes covering 80% of the influence, the feature circuit's size at NDF 0.8 (measured in the real model) and the
heads carrying 80% of the attention-mediated attribution reaching the answer (attention.head_flow.query_heads);
`compare` and `sparse` read those stores and pair them query by query (workbench/intervals.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness  # noqa: E402
from feature_circuit_bench import write_section  # noqa: E402

OUT = harness.BENCH / "results" / "clts.md"
WORK = harness.WORK / "clts"
WS = WORK / "ws"
FAMILIES = ("greater_than", "facts", "addition", "ioi", "induction")  # the fast ones first
CACHE_TOKENS, TRAIN_TOKENS, BATCH, K, N_SET = 200_000, 200_000, 2048, 16, 1024
# a CLT's parameters per layer-feature: its encoder (d) and a decoder into each later layer (L - l of them); a set's
# feature has one encoder and one decoder. Matched parameters: 4 layers x 2 x 1,024 x d = 128 x n x (4 + 10) at d 128
N_CLT_PARAMS = round(N_SET * 8 / 14)
MODELS = {"tiny": "data/models/tiny", "tiny-sparse": "data/models/tiny-sparse"}
# name -> (model, kind, extra `sae train` flags): every dictionary Top-k at k 16 per layer (total L0 64 per token)
DICTS = {
    "set": ("tiny", "transcoders", ["--transcoders", "all", "--n-latents", str(N_SET)]),
    "clt-params": ("tiny", "clts", ["--clt", "--n-latents", str(N_CLT_PARAMS)]),
    "clt-l0": ("tiny", "clts", ["--clt", "--n-latents", str(N_SET)]),
    "sparse-clt": ("tiny-sparse", "clts", ["--clt", "--n-latents", str(N_SET)]),
    "sparse-set": ("tiny-sparse", "transcoders", ["--transcoders", "all", "--n-latents", str(N_SET)]),
}


def cli(*argv: str) -> list[str]:
    return [sys.executable, "-m", "workbench.cli", *argv]


def cache_dir(model: str) -> Path:
    return WS / "caches" / model


def dict_dir(name: str) -> Path:
    """The dictionary's folder: a set's run folder, or the CLT inside its run folder."""
    model, kind, _ = DICTS[name]
    run = WS / kind / name
    if kind == "transcoders":
        return run
    found = sorted(p.parent for p in run.glob("*/clt.json"))
    return found[0] if found else run / "missing"


def prep_commands() -> list[tuple[Path, list[str]]]:
    """(what it makes, the command) for the caches and the dictionaries, in order."""
    out = []
    for model, path in MODELS.items():
        argv = ["cache", "--workspace", str(WS), "--model", path, "--corpus", "synthetic:seed=0"]
        out.append((cache_dir(model) / "manifest.json", cli(*argv, "--tokens", str(CACHE_TOKENS), "--name", model)))
    for name, (model, kind, flags) in DICTS.items():
        argv = ["sae", "train", "--workspace", str(WS), "--cache", str(cache_dir(model)), "--name", name]
        argv += ["--arch", "topk", "--k", str(K), "--tokens", str(TRAIN_TOKENS), "--batch-size", str(BATCH)]
        done = WS / kind / name / ("transcoders.json" if kind == "transcoders" else "*/clt.json")  # a glob
        out.append((done, cli(*argv, "--lr", "0.001", "--seed", "0", "--quiet", *flags)))
    return out


def eval_commands() -> list[tuple[Path, list[str]]]:
    """`sae eval` of every trained dictionary on its model's held-out cache rows (FVU, L0, every MLP replaced at
    once: CE recovered and KL score), into its metrics.json."""
    out = []
    for name, (model, kind, _) in DICTS.items():
        if (dict_dir(name) / ("transcoders.json" if kind == "transcoders" else "clt.json")).is_file():  # trained
            argv = ["sae", "eval", str(dict_dir(name)), "--workspace", str(WS), "--cache", str(cache_dir(model))]
            out.append((dict_dir(name) / "metrics.json", cli(*argv, "--model", MODELS[model])))
    return out


def prep_part(args) -> list[str]:
    """Run what is missing (a stopped run resumes with --resume), logging each command's wall time and load."""
    log_path = WORK / "prep.json"
    log = json.loads(log_path.read_text()) if log_path.is_file() else {}
    for done, argv in [*prep_commands(), *eval_commands()]:
        if list(WS.glob(str(done.relative_to(WS)))):
            continue
        run = WS / done.relative_to(WS).parts[0] / done.relative_to(WS).parts[1]  # <kind>/<name>
        if "train" in argv and (run / "checkpoint.pt").is_file():
            argv = [*argv, "--resume"]  # a stopped run continues from its checkpoint
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        t0, c0 = time.perf_counter(), _children_cpu()
        print(" ".join(argv), flush=True)
        subprocess.run(argv, check=True, cwd=harness.ROOT)
        log[str(done)] = {
            "argv": argv[2:],
            "wall_seconds": time.perf_counter() - t0,
            "cpu_seconds": _children_cpu() - c0,
        }
        log[str(done)].update(load_at_start=load, commit=harness.commit())
        harness.write_text(log_path, json.dumps(log, indent=1))
    return []


def graph_measures(g) -> dict:
    """What the graph says: replacement and completeness (circuit-tracer's), and the fewest feature and error nodes,
    most influential first, covering 80% of the influence of all feature and error nodes."""
    from workbench.attention.head_flow import fewest_covering
    from workbench.circuits.feature import influence as inf

    node_inf = inf.influence(inf.normalise(g.adjacency), g.n_features, g.logit_probs)
    return {
        **g.scores,
        "nodes_covering_80": fewest_covering(node_inf[: g.n_features + g.n_errors], 0.8),
        "features_given_rows": g.n_features,
        "active_features": g.n_active,
    }


def circuit_row(model, tcs, cq) -> dict:
    """The feature circuit at NDF 0.8 (one resampled counterfactual, seed 0; NDF measured in the real model) and
    its graph's measures; only the graph's when the model does not predict the answer (no gap to recover)."""
    from workbench.circuits.component.api import prediction
    from workbench.circuits.feature.attribution_graph import GraphConfig, build_graph
    from workbench.circuits.feature.feature_circuit import find_feature_circuit
    from workbench.circuits.inputs import prepare
    from workbench.circuits.search import ZeroGapError

    q = prepare(model, cq.prompt, cq.answer, cq.counterfactual, cq.wrong)
    pred = prediction(model, q)
    c0 = time.process_time()
    if pred["predicts_answer"]:
        try:
            c, g = find_feature_circuit(model, tcs, cq, target_ndf=0.8, n_samples=1, seed=0)
            circuit = {"nodes": len(c.nodes), "ndf": c.ndf, "universe": c.universe["nodes"], "edges": len(c.edges)}
            circuit["topk_nodes"] = c.faithfulness["baseline_topk_nodes"]
            return {"graph": graph_measures(g), "circuit": circuit, "cpu_seconds": time.process_time() - c0}
        except ZeroGapError as e:
            skipped = str(e)
    else:
        skipped = f"top-1 {pred['top1']!r}, not the answer"
    g = build_graph(model, tcs, q.tokens, q.answer, q.wrong, GraphConfig(heads=False))
    return {"graph": graph_measures(g), "circuit": {"skipped": skipped}, "cpu_seconds": time.process_time() - c0}


def heads_row(model, tcs, cq) -> dict:
    """The heads carrying 80% of the attention-mediated attribution reaching the answer, and the entries per
    feature edge (attention.head_flow.query_heads, as `attention compare --transcoders` measures them)."""
    from workbench.attention.head_flow import query_heads
    from workbench.circuits.feature.graph_config import HeadFlowConfig
    from workbench.circuits.inputs import prepare

    c0 = time.process_time()
    row = query_heads(model, tcs, prepare(model, cq.prompt, cq.answer, cq.counterfactual, cq.wrong), HeadFlowConfig())
    return {**row, "cpu_seconds": time.process_time() - c0}


MEASURES = {"circuit": circuit_row, "heads": heads_row}


def store_path(name: str, task: str, n: int) -> Path:
    return WORK / "queries" / f"{name}-{task}-n{n}.json"


def measure(name: str, tasks_: list[str], n: int, measures: list[str], loaded: dict) -> None:
    """One dictionary on the families' held-out queries, query index by query index across the families (so a
    stopped run has every family at about the same n), each query's measures written to its family's store at
    once (a restart skips what is stored). Queries are retargeted at the base model's answer (as `attention
    compare` does), so every dictionary and model answers the same queries."""
    from workbench.cache.overlap import seen_in_training
    from workbench.circuits.feature.transcoders import open_set
    from workbench.corpus import tasks
    from workbench.models import load

    model_name = DICTS[name][0]
    for m in ("tiny", model_name):
        if m not in loaded:
            loaded[m] = load(MODELS[m], device="cpu")[0]
    base, model = loaded["tiny"], loaded[model_name]
    folder = open_set(dict_dir(name))
    tcs = folder.load(device="cpu", model=model)
    seen = seen_in_training(folder.cache)
    family = {t: tasks.queries(t, n, seed=0, tokenizer=base.tokenizer, split="heldout") for t in tasks_}
    for i in range(n):
        for task in tasks_:
            measure_query(name, task, n, i, family[task][i], measures, (base, model, tcs, seen))


def measure_query(name: str, task: str, n: int, i: int, cq, measures: list[str], ctx) -> None:
    from workbench.atomic import write_json
    from workbench.circuits.component.api import retarget

    base, model, tcs, seen = ctx
    path = store_path(name, task, n)
    store = json.loads(path.read_text()) if path.is_file() else {"dictionary": str(dict_dir(name)), "rows": {}}
    row = store["rows"].setdefault(str(i), {})
    todo = [m for m in measures if m not in row]
    if not todo:
        return
    cq = retarget(base, cq)
    row.update(prompt=cq.prompt, answer=cq.answer, wrong=cq.wrong)
    row["in_training_cache"] = seen(model.to_tokens(cq.prompt)[0, 1:].tolist())
    for m in todo:
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        row[m] = MEASURES[m](model, tcs, cq)
        row.setdefault("commit", {})[m] = harness.commit()
        row.setdefault("load_at_start", {})[m] = load
        write_json(path, store, indent=1)
    print(name, task, i, json.dumps({m: row[m].get("cpu_seconds") for m in todo}), flush=True)


def queries_part(args) -> list[str]:
    loaded: dict = {}
    for name in args.dicts.split(","):
        measure(name, args.families.split(","), args.n, args.measures.split(","), loaded)
    return []


def stream_batches(model: str, n: int) -> list:
    """The first n training batches of the cache's [x_0 | y_0 | x_1 | ...] rows (what a set and a CLT both read),
    with each layer's hooks, held in memory so the timed steps read nothing."""
    from workbench.cache import ActivationCache
    from workbench.sae import TrainConfig
    from workbench.sae.trainer import _cache_batches
    from workbench.sae.transcoders import _layer_group

    cache = ActivationCache.open(cache_dir(model))
    stream = []
    for layer in range(4):
        hook, target, _ = _layer_group(cache, cache_dir(model), layer, [])
        stream += [hook, target]
    it = _cache_batches(cache, stream, TrainConfig(batch_size=BATCH, seed=0), None, start=0, rank=0, world_size=1)
    return [next(it) for _ in range(n)], stream


def trainers(n_tokens: int) -> dict:
    """name -> a Trainer of the same recipe as `prep`'s: the set (one Top-k transcoder per layer, each reading its
    layer's columns) and the two CLTs."""
    from workbench.sae import SAEConfig, TrainConfig
    from workbench.sae.config import CLTConfig
    from workbench.sae.trainer import Trainer

    tc = TrainConfig(batch_size=BATCH, lr=1e-3, seed=0, n_tokens=n_tokens)
    d, width = 128, 256
    member = dict(architecture="topk", k=K, transcoder=True)
    per_layer = [SAEConfig(**member, n_latents=N_SET, name=f"L{i}").resolve(d, n_tokens, d) for i in range(4)]
    out = {"set": Trainer(per_layer, tc, columns=[(i * width, (i + 1) * width) for i in range(4)])}
    for name, n in (("clt-l0", N_SET), ("clt-params", N_CLT_PARAMS)):
        cfg = CLTConfig(**member, n_latents=n, name=name).resolve(d, n_tokens, d, 4)
        out[name] = Trainer([cfg], tc)
    return out


def head(title: str, info: dict, args, how: str = "single runs") -> list[str]:
    """A measured section's title and the machine, commit and load it ran at."""
    return ["", f"## {title}", "", *harness.machine_lines(info, {}, str(args.threads), how)]


def dense_forward(n_latents: int, clt: bool):
    """A function timing (encode, decode) CPU seconds of the dense matmuls a step's forward would do without sparsity,
    into preallocated outputs: every layer's encoder [B, d] @ [d, n], and the decoders [B, n] @ [n, d x layers
    written] (4 x 1 for a set, 4 + 3 + 2 + 1 for a CLT)."""
    import torch

    d, writes = 128, ([4, 3, 2, 1] if clt else [1, 1, 1, 1])
    x, code = torch.randn(BATCH, d), torch.randn(BATCH, n_latents)
    enc, out_e = torch.randn(d, n_latents), torch.empty(BATCH, n_latents)
    decs = [torch.randn(n_latents, d * w) for w in writes]
    outs = [torch.empty(BATCH, d * w) for w in writes]

    def timed() -> tuple[float, float]:
        t0 = time.process_time()
        for _ in range(4):
            torch.mm(x, enc, out=out_e)
        t1 = time.process_time()
        for w, o in zip(decs, outs):
            torch.mm(code, w, out=o)
        return t1 - t0, time.process_time() - t1

    return timed


def speed_part(args) -> list[str]:
    """Training steps of the set and the CLTs on the same preloaded cache rows, interleaved step by step (so load
    changes hit all three alike), each step right after its dense bound's matmuls; medians over the steps."""
    import statistics

    steps = args.steps
    batches, _ = stream_batches("tiny", steps + 1)
    tr = trainers(BATCH * (steps + 1))
    dense = {name: dense_forward(t.cfgs[0].n_latents, name != "set") for name, t in tr.items()}
    times: dict[str, list[tuple]] = {name: [] for name in tr}
    for t in tr.values():
        t.initialise(batches[0])
    info = harness.machine_info()
    for x in batches[1:]:
        for name, t in tr.items():
            enc, dec = dense[name]()
            t0, c0 = time.perf_counter(), time.process_time()
            t.train_step(x)
            times[name].append((time.perf_counter() - t0, enc, dec, time.process_time() - c0))
    rows = []
    for name, t in tr.items():
        step, enc, dec, cpu = (statistics.median(v[j] for v in times[name][2:]) for j in range(4))
        ratio = statistics.median(v[3] / (v[1] + v[2]) for v in times[name][2:])
        params = sum(p.numel() for s in t.saes for p in s.parameters())
        rows.append([name, f"{t.cfgs[0].n_latents:,}", f"{params:,}", f"{step * 1e3:.0f}", f"{BATCH / step:,.0f}"])
        # paired: this dictionary's step CPU over the set's in the same round (the same batch, the same load)
        vs_set = statistics.median(v[3] / w[3] for v, w in zip(times[name][2:], times["set"][2:]))
        rows[-1] += [f"{cpu * 1e3:.0f}", f"{BATCH / cpu:,.0f}", f"{enc * 1e3:.1f}", f"{dec * 1e3:.1f}", f"{ratio:.1f}x"]
        rows[-1].append(f"{vs_set:.2f}x")
        print(rows[-1], flush=True)
    lines = head("a. Training speed: CLT vs per-layer set on the same cache rows", info, args, "interleaved steps")
    lines += [
        f"- Rows: the first {steps + 1} batches of {BATCH:,} rows of the embedded model's cache (the `prep` part's "
        f"`{cache_dir('tiny').relative_to(harness.ROOT)}`), [x_l | y_l] of each layer's `ln2.hook_normalized` and "
        "`hook_mlp_out`, read once into memory; every dictionary steps on the same batch in turn; the first batch "
        f"initialises them (not timed), the first 2 timed steps are dropped: medians over {steps - 2} steps",
        f"- Recipe: Top-k, k = {K} per layer (total L0 {4 * K} per token), lr 1e-3, AuxK on, fp32, one thread; a "
        "step is the Trainer's whole `train_step` (forward, backward, Adam, decoder renormalisation, counters); "
        "step CPU ms: this (single-threaded) process's CPU time in the step, the figure to compare under load",
        "- Dense bound: right before each step, the dense matmuls into preallocated outputs that the step's forward "
        "would do without sparse kernels: encode = every layer's [B, d] @ [d, n]; decode = [B, n] @ [n, d x layers "
        "written] per layer (one layer each for the set; 4 + 3 + 2 + 1 for a CLT), in CPU time; step / dense: the "
        "median of each step's CPU time over its encode + decode (a forward only: backward and Adam are not in it)",
        "- Paired: each step's CPU time over the set's step in the same round (same batch, same load), median; "
        "the grouped top-k (`kernels.topk`) takes its fast path at any width since 585 latents stopped falling "
        "back to torch.topk",
        "",
    ]
    cols = ["dictionary", "latents per layer", "parameters", "step ms (median)", "tokens/s", "step CPU ms"]
    cols += ["tokens per CPU s", "dense encode CPU ms"]
    cols += ["dense decode CPU ms", "step CPU / dense forward CPU", "step CPU / set's, paired (median)"]
    return lines + harness.table(cols, rows)


def memory_part(args) -> list[str]:
    """The CLTs' memory estimate (transcoders.clt_footprint plus the cache's buffers) against the peak RSS of a
    process training them for a few steps from the cache (the `prep` recipe); the GPT-2-small shape estimated."""
    from workbench.sae import TrainConfig, memory
    from workbench.sae.config import CLTConfig
    from workbench.sae.transcoders import clt_footprint

    info = harness.machine_info()
    rows = []
    for name, n, arch in (
        ("clt-l0", N_SET, "topk"),
        ("clt-params", N_CLT_PARAMS, "topk"),
        ("clt-matryoshka", N_SET, "matryoshka"),
    ):
        r = harness.run_side(
            "main",
            "workbench_clt.py",
            {
                "mode": "memory",
                "architecture": arch,
                "cache": str(cache_dir("tiny")),
                "n_latents": n,
                "k": K,
                "batch": BATCH,
                "steps": args.steps,
            },
            f"cltmem-{name}",
        )
        rows.append(
            [
                name,
                f"{n:,}",
                f"{r['estimate_mib']:,.0f}",
                f"{r['peak_above_start_mib']:,.0f}",
                f"{r['peak_above_start_mib'] / r['estimate_mib']:.2f}",
                f"{r['peak_rss_mib']:,.0f}",
            ]
        )
        print(rows[-1], flush=True)
    gpt2 = []
    for n, k, batch in ((24576, 32, 4096), (12288, 32, 4096), (12288, 32, 1024), (12288, 32, 256)):
        cfg = CLTConfig(architecture="topk", k=k, n_latents=n, transcoder=True).resolve(768, 10**8, 768, 12)
        fp = clt_footprint(cfg, batch, batch * TrainConfig().init_batches, "cpu", False)
        weights = 4 * (12 * 768 * n + 768 * n * 78)
        gpt2.append([f"{n:,}", k, f"{batch:,}", f"{weights / memory.MIB:,.0f}", f"{fp.total / memory.MIB:,.0f}"])
    lines = head("a. Memory: the CLT's estimate vs its measured peak; a GPT-2-small-shaped CLT estimated", info, args)
    lines += [
        f"- Measured: `bench/peers/workbench_clt.py` trains the CLT (Top-k, or Matryoshka at its default prefixes; k = {K}, batch {BATCH:,}) for "
        f"{args.steps} steps from the embedded model's cache through `sae.transcoders.train_clt` (the CLI's path) "
        "in its own process; peak = VmHWM minus the RSS after imports; estimate = what the run checks against the "
        "budget (`_check_clt_memory`: `clt_footprint` + the cache reader's buffers)",
        "",
    ]
    lines += harness.table(
        [
            "CLT",
            "latents per layer",
            "estimate MiB",
            "measured peak above start MiB",
            "measured / estimate",
            "process peak RSS MiB",
        ],
        rows,
    )
    lines += [
        "",
        "GPT-2-small shape (12 layers, d 768; estimated only, nothing allocated): `clt_footprint` (weights, "
        "Adam, gradients, counters, one step's working set of every member)",
        "",
    ]
    return lines + harness.table(["latents per layer", "k", "batch", "weights MiB", "training estimate MiB"], gpt2)


def gpt2_part(args) -> list[str]:
    """A random GPT-2-small-shaped model with a random Top-k CLT over its 12 layers: one 256-token graph."""
    cfg = dict(mode="gpt2", n_tokens=256, n_latents=args.gpt2_latents, k=32, max_feature_nodes=500, batch=8)
    info = harness.machine_info()
    r = harness.run_side("main", "workbench_clt.py", cfg, "cltgpt2", timeout=6 * 3600, mem_cap_mb=10000)
    harness.write_text(WORK / "gpt2.result.json", json.dumps({"cfg": cfg, "result": r}, indent=1))
    lines = head("a. A GPT-2-small-shaped CLT: one graph at 256 tokens (random weights)", info, args)
    lines += [
        f"- Model: random HookedTransformer, 12 layers, d_model 768, 12 heads, d_mlp 3072, vocabulary 50,257; a "
        f"random Top-k CLT (k = {cfg['k']} per layer, {cfg['n_latents']:,} latents per layer, each writing every "
        f"later layer: {r['clt_parameters']:,} parameters, fp32), built in memory (`bench/peers/workbench_clt.py`). "
        "Random weights: the figures are time and memory only; the scores mean nothing",
        f"- Graph: {cfg['n_tokens']} random tokens, `build_graph(max_feature_nodes={cfg['max_feature_nodes']}, "
        f"batch_size={cfg['batch']}, heads=False)` (no head split: its cost is not in these figures), the "
        "top logits as targets; peak RSS = the process's VmHWM reset after loading model and CLT",
        "",
    ]
    cols = ["tokens", "active features", "rows", "kept edges", "RSS after loading MiB", "graph peak RSS MiB"]
    row = [cfg["n_tokens"], f"{r['active']:,}", f"{r['rows']:,}", f"{r['kept_edges']:,}"]
    row += [
        f"{r['rss_loaded_mib']:,.0f}",
        f"{r['peak_rss_mib']:,.0f}",
        f"{r['cpu_seconds']:,.0f}",
        f"{r['seconds']:,.0f}",
    ]
    return lines + harness.table(cols + ["CPU s", "wall s"], [row])


# measure -> (how to read it from a stored query row, digits); None where the query has no value
READ = {
    "replacement": (lambda r: r.get("circuit", {}).get("graph", {}).get("replacement"), 3),
    "completeness": (lambda r: r.get("circuit", {}).get("graph", {}).get("completeness"), 3),
    "nodes covering 80% of influence": (lambda r: r.get("circuit", {}).get("graph", {}).get("nodes_covering_80"), 1),
    "feature circuit nodes at NDF 0.8": (lambda r: r.get("circuit", {}).get("circuit", {}).get("nodes"), 1),
    "heads for 80%": (lambda r: r.get("heads", {}).get("heads_needed"), 2),
    "entries per edge covering 80%": (lambda r: (r.get("heads", {}).get("entries") or {}).get("covering"), 2),
}


def values(name: str, task: str, n: int, measure: str) -> dict:
    """query index -> the measure's value, over the stored queries that have it."""
    read = READ[measure][0]
    rows = stored_rows(name, task, n)
    return {i: read(r) for i, r in rows.items() if read(r) is not None}


def stored_rows(name: str, task: str, n: int) -> dict:
    """query index -> its stored row (measured or not yet)."""
    path = store_path(name, task, n)
    return json.loads(path.read_text())["rows"] if path.is_file() else {}


def paired_cell(a: dict, b: dict, digits: int) -> str:
    """'a / b, a - b [95% CI] (n)' over the queries both have."""
    from workbench.intervals import paired_difference

    both = sorted(set(a) & set(b))
    if not both:
        return "-"
    mean = lambda v: sum(v[i] for i in both) / len(both)  # noqa: E731
    gap = paired_difference({i: a[i] for i in both}, {i: b[i] for i in both})
    return f"{mean(a):.{digits}f} / {mean(b):.{digits}f}; {gap.format('{:.' + str(digits) + 'f}')}"


def pairing_table(a: str, b: str, n: int, measures: list[str], tasks: list[str]) -> list[str]:
    """Per family and over all families pooled: a / b means and a - b with its paired interval, per measure."""
    rows = []
    for task in [*tasks, "all"]:
        fams = tasks if task == "all" else [task]
        cells = []
        for m in measures:
            va = {f"{t}:{i}": v for t in fams for i, v in values(a, t, n, m).items()}
            vb = {f"{t}:{i}": v for t in fams for i, v in values(b, t, n, m).items()}
            cells.append(paired_cell(va, vb, READ[m][1]))
        rows.append([task if task != "all" else "**all families**", *cells])
    return harness.table(["family", *[f"{m}: {a} / {b}; {a} - {b} [95% CI] (n)" for m in measures]], rows)


def store_facts(names: list[str], tasks: list[str], n: int) -> list[str]:
    """Per dictionary: queries stored per measure, skipped circuits, prompts in the training cache, commits, loads."""
    out = []
    for name in names:
        rows = [r for t in tasks for r in stored_rows(name, t, n).values()]
        done = {m: sum(m in r for r in rows) for m in MEASURES}
        skipped = sum("skipped" in r.get("circuit", {}).get("circuit", {}) for r in rows)
        stamps = [c for r in rows for c in r.get("commit", {}).values()]
        commits = sorted({c.split()[0] for c in stamps})
        dirty = sum("uncommitted" in c for c in stamps)
        loads = [float(v.split()[0]) for r in rows for v in r.get("load_at_start", {}).values()]
        seen = sum(bool(r.get("in_training_cache")) for r in rows)
        cpu = {m: sum(r[m].get("cpu_seconds", 0.0) for r in rows if m in r) / max(1, done[m]) for m in MEASURES}
        out.append(
            f"- `{name}` ({dict_dir(name)}): stored {done['circuit']} of "
            f"{n * len(tasks)} queries with graph + circuit ({skipped} without a circuit: the model's top-1 is not "
            f"the answer, or no gap), {done['heads']} with heads; prompts in the training cache {seen}; CPU s per "
            f"query: circuit {cpu['circuit']:.1f}, heads {cpu['heads']:.1f}; commits {', '.join(commits) or '-'} "
            f"({dirty} of {len(stamps)} measures with uncommitted changes to workbench/ or bench/); "
            f"1-min load at the queries' starts {min(loads, default=0):.1f}-{max(loads, default=0):.1f}"
        )
    return out


def eval_figures(folder: Path) -> dict:
    """A set's or CLT's `sae eval` figures (its metrics.json; empty before the eval): FVU per layer, total L0, CE
    recovered and KL score with every MLP replaced at once."""
    from workbench.sae.clt_io import is_clt

    m = json.loads((folder / "metrics.json").read_text()) if (folder / "metrics.json").is_file() else {}
    if is_clt(folder):
        return {"fvu": m.get("fvu_per_layer", []), "l0": m.get("l0"), "replaced": m.get("all_replaced", {})}
    members = [m.get("members", {}).get(n, {}) for n in sorted(m.get("members", {}))]
    l0 = sum(x.get("l0", 0) for x in members) if members else None
    return {
        "fvu": [x.get("fvu") for x in members],
        "l0": l0,
        "replaced": next(iter(m.get("all_replaced", {}).values()), {}),
    }


def quality(name: str) -> dict:
    """A dictionary's `sae eval` figures (eval_figures); its parameters; the training run's wall and CPU seconds
    and load (prep.json)."""
    from safetensors.torch import load_file

    folder, (_, kind, _) = dict_dir(name), DICTS[name]
    if kind == "transcoders":
        files = sorted(folder.glob("L*/sae_weights.safetensors"))
    else:
        files = [folder / "clt_weights.safetensors"]
    trained = ("W_enc", "W_dec", "b_enc", "b_dec")  # not the buffers (scales, the input centre b_in)
    params = sum(t.numel() for f in files for k, t in load_file(str(f)).items() if k.rsplit(".", 1)[-1] in trained)
    prep = json.loads((WORK / "prep.json").read_text()) if (WORK / "prep.json").is_file() else {}
    run = next((v for k, v in prep.items() if f"/{kind}/{name}/" in k), {})
    return {**eval_figures(folder), "parameters": params, "run": run}


def dicts_part(args) -> list[str]:
    """The dictionaries measured: recipe, parameters, how they were matched, and their `sae eval` quality."""
    rows = []
    for name, (model, kind, flags) in DICTS.items():
        q = quality(name)
        r, run = q["replaced"], q["run"]
        rows.append(
            [
                f"`{name}`",
                model,
                "per-layer set" if kind == "transcoders" else "CLT",
                flags[flags.index("--n-latents") + 1],
                f"{q['parameters']:,}",
                ", ".join(f"{v:.3f}" for v in q["fvu"] if v is not None) or "-",
                f"{q['l0']:.1f}" if q["l0"] is not None else "-",
                f"{r['ce_loss_recovered']:.3f}" if "ce_loss_recovered" in r else "-",
                f"{r['kl_score']:.3f}" if "kl_score" in r else "-",
                f"{run['wall_seconds']:.0f} / {run['cpu_seconds']:.0f} ({run['load_at_start'].split()[0]})"
                if run
                else "-",
            ]
        )
    prep = json.loads((WORK / "prep.json").read_text()) if (WORK / "prep.json").is_file() else {}
    commits = sorted({v["commit"] for v in prep.values()})
    lines = [
        "",
        "## The dictionaries",
        "",
        f"- Commits of the prep runs (bench/work/clts/prep.json): {', '.join(commits)}",
    ]
    lines += [
        f"- Caches: `workbench cache --model data/models/tiny[-sparse] --corpus synthetic:seed=0 --tokens "
        f"{CACHE_TOKENS}` (the default hooks: every layer's `ln2.hook_normalized` and `hook_mlp_out`); every "
        f"dictionary `workbench sae train --cache CACHE --arch topk --k {K} --tokens {TRAIN_TOKENS} --batch-size "
        f"{BATCH} --lr 0.001 --seed 0` with `--transcoders all --n-latents N` (a set) or `--clt --n-latents N` (a "
        "CLT, `clt_loss` sum, `clt_sparsity` per_layer), one thread, `nice -n 5` (bench/circuits/clt_bench.py --part prep)",
        f"- Matched total L0: every dictionary is Top-k with k = {K} on each of the 4 layers, so {4 * K} features "
        "are active per token in total, exactly (Top-k, not an average). Matched parameters: a set's feature has an "
        "encoder and one decoder (2 x d x 1,024 x 4 layers), a CLT's layer-l feature an encoder and a decoder into "
        f"each of the 4 - l layers it writes (d x n x (4 + 10)), so n = 1,024 x 8 / 14 = {N_CLT_PARAMS} latents "
        "per layer for `clt-params` (biases differ slightly: counts below). `clt-l0` has the set's 1,024 latents "
        "per layer (matched L0 and width, 1.75x the parameters)",
        "- Quality: `workbench sae eval DICT --cache CACHE --model MODEL` on the cache's held-out rows: FVU of each "
        "layer's MLP output, total L0, CE recovered and KL score with every MLP replaced at once",
        "",
    ]
    cols = ["dictionary", "model", "kind", "latents per layer", "parameters", "FVU per layer", "L0 total"]
    cols += ["CE recovered, all MLPs", "KL score, all MLPs", "training wall / CPU s (1-min load)"]
    return lines + harness.table(cols, rows)


def paired_section(args, title: str, measures: list[str], about: list[str], pairings: list[tuple]) -> list[str]:
    """A section: what each dictionary's stores hold, how it was measured, then one paired table per (heading, A,
    B)."""
    tasks = args.families.split(",")
    names = list(dict.fromkeys(x for _, a, b in pairings for x in (a, b)))
    lines = ["", f"## {title} ({args.n} held-out queries per family)", "", *store_facts(names, tasks, args.n), *about]
    for heading, a, b in pairings:
        lines += ["", f"### {heading}", "", *pairing_table(a, b, args.n, measures, tasks)]
    return lines


def compare_part(args) -> list[str]:
    about = [
        "- Queries: `tasks.queries(task, 20, seed=0, split='heldout')` (feature_circuit_bench's), retargeted at "
        "the model's own correct top-1 (`retarget`); graph: the answer and wrong answer as targets, every feature "
        "with influence given a row, circuit-tracer's pruning (0.8 / 0.98); circuit: `find_feature_circuit(target_ndf"
        "=0.8, n_samples=1, seed=0)`, NDF measured in the real model (in-sample: searched and scored on the query); "
        "nodes covering 80%: the fewest feature and error nodes, most influential first, whose influence covers 80% "
        "of all feature and error nodes' influence; heads: `attention.head_flow.query_heads` (share 0.8)",
        "- Each cell: mean over the queries both dictionaries have (A / B), then A - B with its paired Student-t 95% "
        "interval and n (`workbench/intervals.py`); circuit sizes are integers and heads small integers, so the t "
        "interval is an approximation",
    ]
    pairings = [
        ("Matched total L0 and parameter count: set vs `clt-params`", "set", "clt-params"),
        ("Matched total L0 and latents per layer (the CLT has 1.75x the parameters): set vs `clt-l0`", "set", "clt-l0"),
    ]
    measures = [m for m in READ if not m.startswith("entries")]
    return paired_section(args, "b. CLT vs per-layer set on the embedded model", measures, about, pairings)


def sparse_part(args) -> list[str]:
    about = [
        "- Through CLTs: base `tiny` through `clt-l0`, sparse `tiny-sparse` through `sparse-clt` (the same recipe "
        "trained on the sparse model's own cache); beside it, the per-layer sets of the same recipe (`set`, "
        "`sparse-set`: 200k training tokens, so not the sets of feature_circuits.md's table, which had 400k); both "
        "models asked for the base model's answer (as `attention compare` does); measures as `attention compare "
        "--transcoders` (docs/methods.md §11), per query through `attention.head_flow.query_heads`; base - sparse "
        "with its paired Student-t 95% interval",
    ]
    pairings = [
        ("Through CLTs: `clt-l0` (tiny) vs `sparse-clt` (tiny-sparse)", "clt-l0", "sparse-clt"),
        ("Through per-layer sets of the same recipe: `set` (tiny) vs `sparse-set` (tiny-sparse)", "set", "sparse-set"),
    ]
    measures = ["heads for 80%", "entries per edge covering 80%"]
    return paired_section(args, "c. Base vs sparse attention through CLTs", measures, about, pairings)


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parts = {"prep": prep_part, "speed": speed_part, "memory": memory_part, "gpt2": gpt2_part}
    parts.update(queries=queries_part, dicts=dicts_part, compare=compare_part, sparse=sparse_part)
    ap.add_argument("--part", choices=list(parts), required=True)
    ap.add_argument("--dicts", default="set,clt-params,clt-l0", help=f"queries: of {list(DICTS)}")
    ap.add_argument("--families", default=",".join(FAMILIES), help="queries: task families (default: %(default)s)")
    ap.add_argument("--measures", default="circuit,heads", help=f"queries: of {list(MEASURES)} (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=12, help="speed/memory: timed training steps (default: %(default)s)")
    ap.add_argument("--gpt2-latents", type=int, default=12288, help="gpt2: latents per layer (default: %(default)s)")
    ap.add_argument("--n", type=int, default=20, help="queries: held-out queries per family (default: %(default)s)")
    harness.add_common_args(ap, OUT, threads=1)
    args = ap.parse_args()
    harness.set_threads(args.threads)
    if args.threads:  # torch is imported already (feature_circuit_bench), after which the env var comes too late
        torch.set_num_threads(args.threads)
    WORK.mkdir(parents=True, exist_ok=True)
    lines = parts[args.part](args)
    if lines:
        write_section(args.out, args.part, lines)


if __name__ == "__main__":
    main()
