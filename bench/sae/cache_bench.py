"""Activation-cache benchmark: harvest cost, sae-lens comparison, read throughput, read memory.

    .venv/bin/python bench/sae/cache_bench.py            # ~10-15 min on 2 CPU cores; writes bench/results/cache.md

(a) harvest tokens/s vs the bare forward on the same tokens (goal: cache adds <= 25%), on the
    embedded model and on a random-init GPT-2-small-shaped HookedTransformer (d_model 768);
(b) harvest of one hook vs sae-lens's CacheActivationsRunner on the same model, tokens and hook
    (goal: >= 3x faster), with bytes on disk of each; sae-lens runs in its own venv
    (bench/.venv-peers, falls back to this interpreter) with its model loader swapped for the
    benchmark's model, the only change;
(c) random-batch read GB/s of ActivationCache.batches vs a plain sequential read of the same files;
(d) peak RSS of a process reading a > 4 GB cache (goal: < 1.5 GB), next to a naive np.memmap reader.
Timed runs alternate (forward, harvest, forward, ...) and the best of each is reported: on a shared
machine other processes only ever add time. Use --threads 1 there for steadier numbers. Scratch
data lives in bench/work/cache (git-ignored) and is deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import harness  # noqa: E402

WORK = ROOT / "bench" / "work" / "cache"
RESULTS = ROOT / "bench" / "results" / "cache.md"
PEER_PYTHON = ROOT / "bench" / ".venv-peers" / "bin" / "python"


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


class ForwardClock:
    """Adds up the time spent inside model.forward while active: a tool's time minus this is its own
    overhead, measured within one run, so changes in the machine's load between runs cancel."""

    def __init__(self, model):
        self.model, self.seconds = model, 0.0

    def __enter__(self):
        inner = self.model.forward

        def forward(*args, **kwargs):
            t = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t

        self.model.forward = forward  # an instance attribute: nn.Module.__call__ finds it first
        return self

    def __exit__(self, *exc):
        del self.model.forward


# --- peer side: runs under the peer venv (torch, transformer_lens, sae_lens; no workbench) -------


def peer_main(job_file: str) -> None:
    import numpy as np
    import sae_lens.cache_activations_runner as car
    import torch
    from datasets import Dataset
    from sae_lens import CacheActivationsRunner, CacheActivationsRunnerConfig
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    job = json.loads(Path(job_file).read_text())
    torch.set_num_threads(job["threads"])
    model = HookedTransformer(HookedTransformerConfig(**job["cfg"]))
    model.load_state_dict(torch.load(job["weights"]))
    model.eval()
    car.load_model = lambda **_: model  # the benchmark's model instead of a hub download
    tokens = np.load(job["tokens"])
    n, ctx = tokens.shape
    itemsize = torch.empty(0, dtype=getattr(torch, job["dtype"])).element_size()
    runs = []
    for i, hook in enumerate(job["hooks"]):  # CacheActivationsRunner caches one hook per run
        out = Path(job["out"]) / str(i)
        cfg = CacheActivationsRunnerConfig(
            dataset_path="bench-tokens",
            model_name=job["cfg"]["model_name"],
            model_batch_size=job["batch_size"],
            hook_name=hook,
            d_in=model.cfg.d_model,
            training_tokens=n * ctx,
            context_size=ctx,
            new_cached_activations_path=str(out),
            dtype=job["dtype"],
            device="cpu",
            prepend_bos=False,
            buffer_size_gb=(n * ctx + 0.5) * model.cfg.d_model * itemsize / 1e9,
        )  # one buffer = exactly these tokens
        dataset = Dataset.from_dict({"input_ids": tokens})  # pre-tokenized: sae-lens feeds the rows as they are
        t = time.perf_counter()
        with ForwardClock(model) as clock:
            ds = CacheActivationsRunner(cfg, override_dataset=dataset).run()
        runs.append(
            {
                "hook": hook,
                "seconds": time.perf_counter() - t,
                "forward_seconds": clock.seconds,
                "rows": len(ds) * ctx,
                "bytes": du(out),
            }
        )
    print(json.dumps(runs))


# --- reader side: a fresh process so its peak RSS is the reader's alone ----------------------------


def _proc_status(field: str) -> int:
    """Bytes of VmRSS / VmHWM (peak RSS) of this process image. Not ru_maxrss: Linux carries the
    parent's peak into a child across fork + exec."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def read_main(cache_dir: str, mode: str, threads: str) -> None:
    import numpy as np
    import torch

    torch.set_num_threads(int(threads))
    from workbench.cache import ActivationCache
    from workbench.cache.sampler import RowSampler

    cache = ActivationCache.open(cache_dir)
    hook = cache.hooks[0]
    files = [cache.path / "train" / r["name"] / f"act.{hook}.npy" for r in cache.manifest["shards"]["train"]]
    base_rss = _proc_status("VmRSS")
    batch, n = 4096, cache.n_tokens()
    n_batches = n // batch  # one epoch
    t = time.perf_counter()
    if mode == "sequential":  # plain read() of every file, front to back
        buf = bytearray(64 << 20)
        with_bytes = 0
        for f in files:
            with open(f, "rb", buffering=0) as fh:
                while k := fh.readinto(buf):
                    with_bytes += k
    elif mode in ("batches", "batches_fp16"):
        with_bytes = 0
        dtype = torch.float32 if mode == "batches" else torch.float16
        for _, b in zip(range(n_batches), cache.batches(hook, batch, seed=0, dtype=dtype)):
            with_bytes += b.shape[0] * b.shape[1] * 2  # bytes read from the fp16 cache
    else:  # "naive": the same rows through np.load(mmap_mode="r") without releasing pages
        maps = [np.load(f, mmap_mode="r") for f in files]
        offsets = np.cumsum([0] + [len(m) for m in maps])
        with_bytes = 0
        for _, rows in zip(range(n_batches), RowSampler(n, batch, seed=0).batches()):
            shard = np.searchsorted(offsets, rows, side="right") - 1
            parts = [maps[s][rows[shard == s] - offsets[s]] for s in np.unique(shard)]
            b = torch.from_numpy(np.concatenate(parts)).float()
            with_bytes += b.shape[0] * b.shape[1] * 2
    seconds = time.perf_counter() - t
    peak = _proc_status("VmHWM")
    print(json.dumps({"seconds": seconds, "bytes": with_bytes, "peak_rss": peak, "rss_before": base_rss}))


# --- main side -------------------------------------------------------------------------------------


@dataclass
class Seq:
    tokens: object
    doc_ids: object
    labels: dict


class ArrayCorpus:
    """Pre-tokenized sequences, so harvest and forward are timed on identical tokens and neither
    pays for corpus generation."""

    label_names: dict = {}

    def __init__(self, name, tokens):
        self.spec, self.tokens = f"bench:{name}", tokens

    def sequences(self, ctx_len, start=0, split="train"):
        import numpy as np

        assert split == "train" and ctx_len == self.tokens.shape[1]
        for i in range(start, len(self.tokens)):
            yield Seq(self.tokens[i], np.full(ctx_len, i, dtype=np.int64), {})


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def timed_cpu(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process, all threads): CPU time is what the work costs,
    whatever other jobs on the machine do to the wall clock."""
    t, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t, time.process_time() - c


def forward_all(model, tokens, batch_size, stop):
    import torch

    with torch.inference_mode():
        for i in range(0, len(tokens), batch_size):
            x = torch.from_numpy(tokens[i : i + batch_size])
            model(x) if stop is None else model(x, stop_at_layer=stop)


def peer_run(name, model, tokens, hooks, batch_size, dtype="float32") -> list[dict]:
    import numpy as np
    import torch

    from workbench.models import config_dict

    job_dir = WORK / f"peer-{name.split()[0]}"
    shutil.rmtree(job_dir, ignore_errors=True)
    job_dir.mkdir(parents=True)
    torch.save(model.state_dict(), job_dir / "weights.pt")
    np.save(job_dir / "tokens.npy", tokens)
    cfg = config_dict(model)
    job = {
        "cfg": cfg,
        "weights": str(job_dir / "weights.pt"),
        "tokens": str(job_dir / "tokens.npy"),
        "hooks": hooks,
        "batch_size": batch_size,
        "dtype": dtype,
        "out": str(job_dir / "out"),
        "threads": torch.get_num_threads(),
    }
    (job_dir / "job.json").write_text(json.dumps(job))
    python = PEER_PYTHON if PEER_PYTHON.exists() else Path(sys.executable)
    res = subprocess.run([str(python), __file__, "--peer", str(job_dir / "job.json")], capture_output=True, text=True)
    if res.returncode:
        raise RuntimeError(f"sae-lens run failed:\n{res.stderr[-4000:]}")
    shutil.rmtree(job_dir)
    runs = json.loads(res.stdout.strip().splitlines()[-1])
    assert all(r["rows"] == tokens.size for r in runs), runs
    return runs


class HarvestRuns:
    """Timed harvests of one model's tokens into WORK/cache, per key: wall time, time inside model.forward, bytes."""

    def __init__(self, name, model, tokens, special_ids, batch_size):
        import numpy as np

        self.model, self.tokens, self.special_ids, self.batch_size = model, tokens, special_ids, batch_size
        self.corpus = ArrayCorpus(name, tokens)
        self.kept = int((~np.isin(tokens, special_ids)).sum())
        self.out = WORK / "cache"
        self.sizes, self.in_forward = {}, {}

    def __call__(self, key, hooks, n=None, with_cpu=False, **kw):
        from workbench.cache import harvest

        shutil.rmtree(self.out, ignore_errors=True)
        with ForwardClock(self.model) as clock:
            wall, cpu = timed_cpu(
                lambda: harvest(
                    self.model,
                    self.corpus,
                    hooks,
                    self.out,
                    self.kept if n is None else n,
                    ctx_len=self.tokens.shape[1],
                    batch_size=self.batch_size,
                    heldout_fraction=0,
                    special_ids=self.special_ids,
                    progress=False,
                    **kw,
                )
            )
        self.in_forward.setdefault(key, []).append((wall, clock.seconds))
        self.sizes[key] = du(self.out)
        return (wall, cpu) if with_cpu else wall


def time_all_hooks(name, runs: HarvestRuns, hooks, rounds, t: dict, cpu: dict, log) -> None:
    """(a): the forward alone, the harvest of every hook, and the forward stopped at the last hook, per round."""
    from workbench.cache.hooks import stop_layer

    model, tokens, batch_size = runs.model, runs.tokens, runs.batch_size
    for r in range(rounds):
        t["forward"].append(timed(lambda: forward_all(model, tokens, batch_size, None)))
        for key, w_c in (
            ("harvest", runs("harvest", hooks, with_cpu=True)),
            ("forward_to_last_hook", timed_cpu(lambda: forward_all(model, tokens, batch_size, stop_layer(hooks)))),
        ):
            t[key].append(w_c[0])
            cpu[key].append(w_c[1])
        log(
            f"  {name} (a) round {r}: "
            + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in t.items() if v)
            + f" (CPU: harvest {cpu['harvest'][-1]:.2f}s, forward to last hook {cpu['forward_to_last_hook'][-1]:.2f}s)"
        )


def time_one_hook(name, runs: HarvestRuns, one, rounds, t: dict, log) -> None:
    """(b): one hook, every position stored (sae-lens keeps BOS), the same batches on both sides, per round."""
    from workbench.cache.hooks import stop_layer

    model, tokens, batch_size = runs.model, runs.tokens, runs.batch_size
    for r in range(rounds):
        t["forward_to_hook"].append(timed(lambda: forward_all(model, tokens, batch_size, stop_layer([one]))))
        t["ours_fp16"].append(runs("ours_fp16", [one], n=tokens.size, exclude_special=False))
        t["ours_fp32"].append(runs("ours_fp32", [one], n=tokens.size, exclude_special=False, dtype="float32"))
        peer = peer_run(name, model, tokens, [one], batch_size)[0]
        t["saelens"].append(peer["seconds"])
        runs.in_forward.setdefault("saelens", []).append((peer["seconds"], peer["forward_seconds"]))
        runs.sizes["saelens"] = peer["bytes"]
        log(
            f"  {name} (b) round {r}: "
            + ", ".join(f"{k} {t[k][-1]:.2f}s" for k in ("forward_to_hook", "ours_fp16", "ours_fp32", "saelens"))
        )


def time_every_hook_both(name, runs: HarvestRuns, hooks, log) -> dict:
    """sae-lens caches one hook per run: every hook of (a), all positions, against one harvest of them all."""
    peer = peer_run(name, runs.model, runs.tokens, hooks, runs.batch_size)
    ours = runs("multi", hooks, n=runs.tokens.size, exclude_special=False)
    res = {
        "ours": ours,
        "ours_bytes": runs.sizes["multi"],
        "saelens": sum(r["seconds"] for r in peer),
        "saelens_bytes": sum(r["bytes"] for r in peer),
    }
    log(f"  {name} all {len(hooks)} hooks: ours {ours:.1f}s, sae-lens {res['saelens']:.1f}s")
    return res


def bench_model(name, model, tokens, special_ids, batch_size, rounds, peer_rounds, multi_hook_peer, log) -> dict:
    """(a) and (b) for one model; each timing is the best of alternating runs."""
    import numpy as np

    L = model.cfg.n_layers
    hooks = [f"blocks.{i}.hook_resid_post" for i in range(L)] + [f"blocks.{i}.hook_mlp_out" for i in range(L)]
    one = f"blocks.{L // 2}.hook_resid_post"
    runs = HarvestRuns(name, model, tokens, special_ids, batch_size)
    forward_all(model, tokens[:batch_size], batch_size, None)  # warm-up
    keys = ("forward", "harvest", "forward_to_last_hook", "forward_to_hook", "ours_fp16", "ours_fp32", "saelens")
    t = {k: [] for k in keys}
    cpu = {"harvest": [], "forward_to_last_hook": []}
    time_all_hooks(name, runs, hooks, rounds, t, cpu, log)
    time_one_hook(name, runs, one, peer_rounds, t, log)
    in_forward = runs.in_forward
    res = {
        "name": name,
        "tokens": tokens.size,
        "rows": runs.kept,
        "hooks": len(hooks),
        "one_hook": one,
        "d_model": model.cfg.d_model,
        "n_layers": L,
        "sizes": runs.sizes,
        "t": {k: min(v) for k, v in t.items()},
        "ratio": {
            "in_run": float(np.median([w / f for w, f in in_forward["harvest"]])),
            "harvest/forward": np.median(np.array(t["harvest"]) / t["forward"]),
            "harvest/forward_to_last_hook": np.median(np.array(t["harvest"]) / t["forward_to_last_hook"]),
            "cpu": np.median(np.array(cpu["harvest"]) / cpu["forward_to_last_hook"]),
        },
        "beyond": {k: float(np.median([w - f for w, f in v])) for k, v in in_forward.items()},
        "rounds": (rounds, peer_rounds),
    }
    if multi_hook_peer:
        res["multi"] = time_every_hook_both(name, runs, hooks, log)
    shutil.rmtree(runs.out, ignore_errors=True)
    return res


def tiny_model():
    from workbench.models import load
    from workbench.models.toy import TinyConfig, build

    try:
        return load("tiny", device="cpu")[0], "embedded tiny"
    except ValueError:  # weights not built yet: the same architecture, random init
        from workbench.corpus.vocab import vocabulary
        from workbench.models.tokenizer import build_tokenizer

        return build(TinyConfig(), build_tokenizer(vocabulary())), "tiny (random init: data/models/tiny missing)"


def gpt2_shaped(n_layers=12):
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    return HookedTransformer(
        HookedTransformerConfig(
            **{**harness.GPT2_SHAPE, "n_layers": n_layers},
            seed=0,
            model_name=f"gpt2-small-shaped-random-{n_layers}L",
            device="cpu",
        )
    ).eval()


def big_cache(n_rows, log) -> tuple[Path, float]:
    """A > 4 GB cache written by a real harvest of hook_embed (no transformer blocks run: I/O-bound)."""
    import numpy as np

    from workbench.cache import harvest

    model = gpt2_shaped(n_layers=1)
    ctx = 1024
    tokens = np.random.default_rng(0).integers(0, 50257, size=(-(-n_rows // ctx), ctx))
    out = WORK / "big"
    shutil.rmtree(out, ignore_errors=True)
    seconds = timed(
        lambda: harvest(
            model,
            ArrayCorpus("random", tokens),
            ["hook_embed"],
            out,
            n_rows,
            ctx_len=ctx,
            batch_size=16,
            heldout_fraction=0,
            special_ids=[],
            progress=False,
        )
    )
    log(f"  big cache: {du(out) / 1e9:.2f} GB written in {seconds:.1f}s")
    return out, seconds


def read_run(cache_dir, mode) -> dict:
    import torch

    res = subprocess.run(
        [sys.executable, __file__, "--read", str(cache_dir), mode, str(torch.get_num_threads())],
        capture_output=True,
        text=True,
    )
    if res.returncode:
        raise RuntimeError(f"read worker failed:\n{res.stderr[-4000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


GB, MB = 1e9, 1e6


def report(models, big, big_write_s, reads, started, commit, load, threads) -> str:
    lines = [
        "# Activation cache benchmark",
        "",
        f"- Commit: {commit}",
        "",
        f"Run {started} by `bench/sae/cache_bench.py` on {os.cpu_count()} CPU cores ({platform.machine()}), "
        f"torch {threads} thread(s), no GPU; wall-clock, page cache warm. Load average before/after: "
        f"{load[0]:.1f} / {load[1]:.1f}: the machine was shared with other jobs, so runs alternate and each timing "
        f"is the best of its rounds ((a): {models[0]['rounds'][0]} rounds tiny, {models[-1]['rounds'][0]} GPT-2-shaped; "
        f"(b): {models[0]['rounds'][1]} / {models[-1]['rounds'][1]}).",
        "",
    ]
    lines += harvest_section(models) + one_hook_section(models) + reads_section(big, big_write_s, reads)
    return "\n".join(lines) + "\n"


def harvest_section(models) -> list[str]:
    """(a): the harvest of every hook against the bare forward on the same tokens."""
    lines = [
        "## (a) Harvest vs the bare forward on the same tokens (goal: the cache adds <= 25%)",
        "",
        "Hooks: every `blocks.*.hook_resid_post` and every `blocks.*.hook_mlp_out`, float16, BOS/EOS excluded, "
        "pre-tokenized sequences (no corpus generation in either timing). `forward` is `model(tokens)`; the harvest "
        "stops after the deepest hook, so it skips `ln_final` and the unembedding, and `forward to last hook` "
        "(`stop_at_layer`) is the stricter baseline. Harvest time includes checksums, fsync, stats and manifest. "
        "tok/s are from the best run; the time ratios are medians of the per-round ratios (the runs of one round "
        "are adjacent in time, so slow drifts in the machine's load cancel); the CPU ratio is process CPU time "
        "(all threads). The most robust figure is the last: harvest time / the time the same harvest spent inside "
        "`model.forward` (hooks included), measured within each run, so the machine's load affects both alike.",
        "",
        "| model | tokens | hooks | forward tok/s | forward to last hook tok/s | harvest tok/s | "
        "harvest time / forward | harvest time / forward to last hook | harvest CPU / forward to last hook CPU | "
        "harvest time / its own forward time | on disk |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in models:
        t, n, q = m["t"], m["tokens"], m["ratio"]
        lines.append(
            f"| {m['name']} (d_model {m['d_model']}, {m['n_layers']} layers) | {n:,} | {m['hooks']} | "
            f"{n / t['forward']:,.0f} | {n / t['forward_to_last_hook']:,.0f} | {n / t['harvest']:,.0f} | "
            f"{q['harvest/forward']:.2f} | {q['harvest/forward_to_last_hook']:.2f} | {q['cpu']:.2f} | "
            f"**{q['in_run']:.2f}** | {m['sizes']['harvest'] / MB:,.1f} MB |"
        )
    return lines


def one_hook_section(models) -> list[str]:
    """(b): one hook, the workbench's harvest against sae-lens' CacheActivationsRunner, and the many-hooks line."""
    lines = [
        "",
        "## (b) One hook: workbench harvest vs sae-lens CacheActivationsRunner (goal: >= 3x faster)",
        "",
        "Same model, same pre-tokenized sequences, same hook and batch size, every position stored (sae-lens "
        "keeps BOS, so ours runs with exclude_special=False here). sae-lens stores float32 (its default); ours "
        "is shown in its default float16 and in float32. Each time covers the tool's whole job after the model "
        "is loaded (sae-lens: activation store, forward, Arrow shards, consolidation, shuffle index; ours: "
        "forward, shards, checksums, fsync, stats, manifest). `forward to hook` is the bare forward both tools "
        "must run (`stop_at_layer` after the hook's block). The last columns are each tool's time outside "
        "`model.forward`, measured within its own runs (median), i.e. what the caching itself costs.",
        "",
        "| model | hook | tokens | forward to hook | sae-lens fp32 | ours fp16 | ours fp32 | speed-up fp16 | "
        "speed-up fp32 | on disk sae-lens | ours fp16 | ours fp32 | outside the forward: sae-lens | ours fp16 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in models:
        t, z = m["t"], m["sizes"]
        f = t["forward_to_hook"]
        lines.append(
            f"| {m['name']} | {m['one_hook']} | {m['tokens']:,} | {f:.1f} s | {t['saelens']:.1f} s | "
            f"{t['ours_fp16']:.1f} s | {t['ours_fp32']:.1f} s | {t['saelens'] / t['ours_fp16']:.2f}x | "
            f"{t['saelens'] / t['ours_fp32']:.2f}x | {z['saelens'] / MB:,.1f} MB | {z['ours_fp16'] / MB:,.1f} MB | "
            f"{z['ours_fp32'] / MB:,.1f} MB | {m['beyond']['saelens']:.2f} s | {m['beyond']['ours_fp16']:.2f} s |"
        )
    for m in models:
        if "multi" in m:
            x = m["multi"]
            lines += [
                "",
                f"Many hooks ({m['name']}, all {m['hooks']} hooks of (a), every position): sae-lens needs one "
                f"run per hook, {x['saelens']:.1f} s in total and {x['saelens_bytes'] / MB:,.1f} MB; one workbench "
                f"harvest takes {x['ours']:.1f} s and {x['ours_bytes'] / MB:,.1f} MB "
                f"(**{x['saelens'] / x['ours']:.1f}x** faster).",
            ]
    return lines


def reads_section(big, big_write_s, reads) -> list[str]:
    """(c) and (d): read throughput and the reader's peak memory on the > 4 GB cache."""
    seq, bat, b16, naive = reads["sequential"], reads["batches"], reads["batches_fp16"], reads["naive"]
    lines = [
        "",
        f"## (c) Read throughput on a {big['bytes'] / GB:.2f} GB cache "
        f"({big['rows']:,} rows x d 768, float16, {big['shards']} shards)",
        "",
        f"The cache was written by a real harvest of `hook_embed` (no blocks run, so it is I/O-bound) in "
        f"{big_write_s:.1f} s = {big['bytes'] / GB / big_write_s:.2f} GB/s including checksums, fsync and stats. "
        "Reads go through the page cache (it fits in RAM here); batch bytes count the float16 rows read.",
        "",
        "| read | GB/s | batches/s | seconds |",
        "|---|---|---|---|",
        f"| plain sequential read() of the act files | {seq['bytes'] / GB / seq['seconds']:.2f} | - | {seq['seconds']:.1f} |",
        f"| `cache.batches(hook, 4096)`: shuffled float32 tensors, one epoch | "
        f"{bat['bytes'] / GB / bat['seconds']:.2f} | {bat['bytes'] / (4096 * 768 * 2) / bat['seconds']:.0f} | "
        f"{bat['seconds']:.1f} |",
        f"| `cache.batches(hook, 4096, dtype=torch.float16)`: same, no conversion | "
        f"{b16['bytes'] / GB / b16['seconds']:.2f} | {b16['bytes'] / (4096 * 768 * 2) / b16['seconds']:.0f} | "
        f"{b16['seconds']:.1f} |",
        f"| random-batch (float32) / sequential | {bat['bytes'] / bat['seconds'] / (seq['bytes'] / seq['seconds']):.2f} | | |",
        "",
        "## (d) Peak resident memory of a process reading the whole > 4 GB cache (goal: < 1.5 GB)",
        "",
        "| reader | peak RSS | RSS after imports | cache size |",
        "|---|---|---|---|",
    ]
    for label, r in [
        ("`cache.batches` (one epoch, batch 4096)", bat),
        ("plain sequential read()", seq),
        ("naive: np.load(mmap_mode='r') + fancy indexing, same rows", naive),
    ]:
        lines.append(
            f"| {label} | {r['peak_rss'] / GB:.2f} GB | {r['rss_before'] / GB:.2f} GB | {big['bytes'] / GB:.2f} GB |"
        )
    lines += [
        "",
        "Pages of a file mapping count in a process's RSS (and a fault maps up to 64 KiB around each row), "
        "which is what the naive row shows; `batches` reads whole chunks with pread into one ~128 MB window "
        "buffer, so the cache stays in the page cache, outside the reader's RSS.",
    ]
    return lines


def main_bench(args) -> None:
    import numpy as np
    import torch

    from workbench.corpus import SyntheticCorpus

    if args.threads:
        torch.set_num_threads(args.threads)
    started, commit = time.strftime("%Y-%m-%d %H:%M"), harness.commit()  # the code measured: at the start
    load0 = os.getloadavg()[0]
    log = lambda s: print(s, flush=True)  # noqa: E731
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    try:
        models = []
        tiny, tiny_name = tiny_model()
        corpus = SyntheticCorpus(tiny.tokenizer, seed=0)
        it = corpus.sequences(ctx_len=tiny.cfg.n_ctx)
        tokens = np.stack([next(it).tokens for _ in range(args.tiny_seqs)])
        log(f"(a)+(b) {tiny_name}")
        models.append(
            bench_model(
                tiny_name, tiny, tokens, tiny.tokenizer.all_special_ids, 64, args.rounds, args.peer_rounds, True, log
            )
        )
        gpt2 = gpt2_shaped()
        gtokens = np.random.default_rng(0).integers(0, 50256, size=(args.gpt2_seqs, 128))
        gtokens[:, 0] = 50256  # <|endoftext|> as BOS, excluded like any special token
        log("(a)+(b) GPT-2-small-shaped random init")
        models.append(
            bench_model(
                "GPT-2-small-shaped (random init)",
                gpt2,
                gtokens,
                [50256],
                8,
                args.gpt2_rounds,
                args.peer_rounds - 1,
                False,
                log,
            )
        )
        del gpt2
        log("(c)+(d) big cache")
        out, write_s = big_cache(args.big_rows, log)
        from workbench.cache import ActivationCache

        c = ActivationCache.open(out)
        big = {"bytes": du(out), "rows": c.n_tokens(), "shards": len(c.manifest["shards"]["train"])}
        reads = {}
        for mode in ("sequential", "batches", "batches_fp16", "naive"):
            reads[mode] = read_run(out, mode)
            log(f"  read {mode}: {reads[mode]}")
        text = report(
            models, big, write_s, reads, started, commit, (load0, os.getloadavg()[0]), torch.get_num_threads()
        )
        harness.write_text(args.out, text)
        print(text)
    finally:
        shutil.rmtree(WORK, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peer", help=argparse.SUPPRESS)
    p.add_argument("--read", nargs=3, help=argparse.SUPPRESS)
    p.add_argument("--tiny-seqs", type=int, default=2048, help="sequences of 64 tokens for the tiny model")
    p.add_argument("--gpt2-seqs", type=int, default=32, help="sequences of 128 tokens for the GPT-2-shaped model")
    p.add_argument("--rounds", type=int, default=5, help="alternating (a) rounds, tiny model; the best is kept")
    p.add_argument("--gpt2-rounds", type=int, default=3, help="alternating (a) rounds, GPT-2-shaped model")
    p.add_argument("--peer-rounds", type=int, default=3, help="(b) rounds with sae-lens, tiny (GPT-2-shaped: one less)")
    p.add_argument("--threads", type=int, help="torch threads for every timed run (default: torch's default)")
    p.add_argument("--big-rows", type=int, default=3_000_000, help="rows of the > 4 GB cache (d 768, fp16)")
    p.add_argument("--out", type=Path, default=RESULTS, help="markdown report (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="tiny sizes, one round each: checks the script runs")
    args = p.parse_args()
    if args.quick:
        # sae-lens caches at least one model batch (64 tiny / 8 GPT-2 sequences); GPT-2 gets peer_rounds - 1
        args.tiny_seqs, args.gpt2_seqs, args.rounds, args.gpt2_rounds, args.peer_rounds = 64, 8, 1, 1, 2
        args.big_rows = 20_000
    if args.peer:
        peer_main(args.peer)
    elif args.read:
        read_main(*args.read)
    else:
        main_bench(args)


if __name__ == "__main__":
    main()
