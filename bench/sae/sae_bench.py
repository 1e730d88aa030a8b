"""Top-k SAE training: the workbench against sae-lens, sparsify and dictionary_learning.

Same cached activations, same batches in the same order, Top-k k=32, 16x expansion, batch 4096,
fp32 on the CPU, Adam at one constant learning rate for every side. Reports tokens/s (median step),
peak memory above the loaded data, held-out FVU after the same number of tokens, how many steps
each side's AuxK worked on (its own dead-latent count above 0), the time of the one dense encoder
matmul B x d_in x n, and the workbench's other architectures relative to Top-k.

The hard case is d_in 768 on real activations whose latents die (so AuxK runs on every side):
six 128-d streams of the embedded model side by side (`--datasets wide`). A random-init GPT-2-small
shape (`gpt2`) is the easy d 768 case: no latent dies there.

    .venv/bin/python bench/sae/sae_bench.py --threads 1   # full run (~1 h on 2 busy cores)
    .venv/bin/python bench/sae/sae_bench.py --quick       # a smoke run of every side (~3 min)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

OUT = harness.BENCH / "results" / "sae.md"
# (label, venv, script, variant)
PEERS = [
    ("workbench", "main", "workbench_sae.py", {}),
    ("workbench, encoder_init='transpose' (diagnostic)", "main", "workbench_sae.py", {"encoder_init": "transpose"}),
    ("sae-lens", "sae", "saelens_sae.py", {}),
    (
        "sae-lens (sparse acts)",
        "sae",
        "saelens_sae.py",
        {"use_sparse_activations": True, "rescale_acts_by_decoder_norm": False},
    ),
    ("sparsify", "sae", "sparsify_sae.py", {}),
    ("dictionary_learning", "sae", "dictlearn_sae.py", {}),
]
GOALS = {"sae-lens": 3.0, "sparsify": 1.5, "dictionary_learning": 2.0}
# sides that run only in the first --slow-rounds rounds: several times slower than the workbench (one
# run gives their FVU and a step time far from any goal's edge) or a diagnostic
SLOW = {"sae-lens", "sae-lens (sparse acts)", "dictionary_learning", "workbench, encoder_init='transpose' (diagnostic)"}
STEP_OVER_MATMUL_GOAL = 1.6  # workbench step / preallocated encoder matmul, at d 768
# workbench architectures timed against plain Top-k (block size 4 divides both widths; 8 blocks x 4 = k)
VARIANTS = [
    ("topk", {}),
    ("matryoshka", {"architecture": "matryoshka"}),
    ("batchtopk", {"architecture": "batchtopk"}),
    ("block_topk b4x8", {"architecture": "block_topk", "block_size": 4, "n_active_blocks": 8}),
    ("group_lasso b4", {"architecture": "group_lasso", "block_size": 4}),
    ("block_jumprelu b4", {"architecture": "block_jumprelu", "block_size": 4}),
    ("grassmannian b4x8", {"architecture": "grassmannian", "block_size": 4, "n_active_blocks": 8}),
    ("topk + scaffold r16", {"scaffold_rank": 16}),
]


# ---- shared inputs ---------------------------------------------------------------------------------
def _save_split(acts: np.ndarray, n_train: int, folder: Path, meta: dict) -> dict:
    """Scale once so the mean train norm is sqrt(d) (the same inputs for every side), then save."""
    acts = acts.astype(np.float32)
    scale = float(np.sqrt(acts.shape[1]) / np.linalg.norm(acts[:n_train], axis=1).mean())
    acts *= scale
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "train.npy", acts[:n_train])
    np.save(folder / "heldout.npy", acts[n_train:])
    meta = {**meta, "scale": scale, "n_train": n_train, "n_heldout": len(acts) - n_train, "d": acts.shape[1]}
    harness.write_text(folder / "meta.json", json.dumps(meta, indent=1))
    return meta


def _cached(name: str, spec: dict, make) -> dict:
    folder = harness.WORK / "sae" / f"{name}-{hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]}"
    if (folder / "meta.json").is_file():
        meta = json.loads((folder / "meta.json").read_text())
    else:
        t0 = time.time()
        meta = make(folder)
        print(
            f"  prepared {name}: {meta['n_train']} + {meta['n_heldout']} tokens in {time.time() - t0:.0f}s", flush=True
        )
    return {**meta, "train": str(folder / "train.npy"), "heldout": str(folder / "heldout.npy")}


@torch.no_grad()
def _harvest(model, tokens: torch.Tensor, hooks: tuple[str, ...], layer: int, batch: int) -> list[np.ndarray]:
    """[tokens, d_model] per hook, running the model up to `layer` (the deepest hook's block)."""
    out = {h: [] for h in hooks}
    for i in range(0, len(tokens), batch):
        _, cache = model.run_with_cache(tokens[i : i + batch], names_filter=list(hooks), stop_at_layer=layer + 1)
        for h in hooks:
            out[h].append(cache[h].reshape(-1, model.cfg.d_model).numpy())
    return [np.concatenate(out[h]) for h in hooks]


def _side_by_side(streams: list[np.ndarray], n_train: int) -> np.ndarray:
    """Several hooks per token concatenated, each divided by its mean train norm first (else the widest-norm
    stream would dominate); one hook as it is."""
    if len(streams) == 1:
        return streams[0]
    return np.concatenate([s / np.linalg.norm(s[:n_train], axis=1).mean() for s in streams], axis=1)


def gpt2_acts(
    n_train: int, n_heldout: int, seed: int = 0, layer: int = 5, ctx: int = 128, hooks: tuple[str, ...] = ()
) -> dict:
    """Residual stream (or `hooks` of `layer`, side by side) of a randomly initialised GPT-2-small-shaped model on
    uniform random tokens."""
    spec = {
        "model": "gpt2-small-shape random init",
        "seed": seed,
        "layer": layer,
        "ctx": ctx,
        "n_train": n_train,
        "n_heldout": n_heldout,
    } | ({"hooks": list(hooks)} if hooks else {})
    hooks = hooks or (f"blocks.{layer}.hook_resid_post",)

    def make(folder):
        from transformer_lens import HookedTransformer, HookedTransformerConfig

        model = HookedTransformer(HookedTransformerConfig(**harness.GPT2_SHAPE, seed=seed, device="cpu")).eval()
        n_seq = -(-(n_train + n_heldout) // ctx)
        gen = torch.Generator().manual_seed(seed)
        tokens = torch.randint(0, harness.GPT2_SHAPE["d_vocab"], (n_seq, ctx), generator=gen)
        streams = [a[: n_train + n_heldout] for a in _harvest(model, tokens, hooks, layer, 16)]
        return _save_split(_side_by_side(streams, n_train), n_train, folder, {**spec, "hook": " + ".join(hooks)})

    return _cached("gpt2" if len(hooks) == 1 else "gpt2-pair", spec, make)


def _tiny_model():
    """The embedded model (a random-init model of its shape if absent) and a description of which."""
    from workbench.models import ModelSpecError, load

    try:
        model, tok = load("tiny", device="cpu")
        return model, tok, "data/models/tiny"
    except ModelSpecError:
        from workbench.corpus.vocab import vocabulary
        from workbench.models.tokenizer import build_tokenizer
        from workbench.models.toy import TinyConfig, build

        tok = build_tokenizer(vocabulary())
        return build(TinyConfig(), tok).eval(), tok, "random-init tiny shape (data/models/tiny absent)"


# the hard case: six 128-d activation streams of the embedded model side by side, d_in = 768
WIDE_HOOKS = tuple(f"blocks.{layer}.hook_{h}" for layer in (1, 2, 3) for h in ("resid_mid", "resid_post"))


def tiny_acts(
    n_train: int, n_heldout: int, hooks: tuple[str, ...] = ("blocks.1.hook_resid_post",), name: str | None = None
) -> dict:
    """Activations of the embedded model on the synthetic corpus. Several hooks are concatenated per
    token, each scaled to the same mean norm first (else the widest-norm stream would dominate)."""
    model, tok, source = _tiny_model()
    from workbench.models import model_id

    spec = {"model": model_id(model), "source": source, "n_train": n_train, "n_heldout": n_heldout}
    spec |= {"layer": int(hooks[0].split(".")[1])} if len(hooks) == 1 else {"hooks": list(hooks)}

    def make(folder):
        from workbench.corpus import load_corpus

        ctx = model.cfg.n_ctx
        src = load_corpus("synthetic", tok, seed=0)
        last = max(int(h.split(".")[1]) for h in hooks)
        parts = []
        for split, n in (("train", n_train), ("heldout", n_heldout)):
            it = src.sequences(ctx_len=ctx, split=split)
            seqs = torch.from_numpy(np.stack([next(it).tokens for _ in range(-(-n // ctx))]))
            acts = _harvest(model, seqs, hooks, last, 64)
            parts.append([a[:n] for a in acts])
        streams = [np.concatenate([tr, ho]) for tr, ho in zip(*parts)]
        hook = " + ".join(hooks)
        return _save_split(_side_by_side(streams, n_train), n_train, folder, {**spec, "hook": hook, "ctx": ctx})

    return _cached(name or ("tiny" if len(hooks) == 1 else "tiny-wide"), spec, make)


# ---- runs ------------------------------------------------------------------------------------------
def base_cfg(data: dict, steps: int, lr: float) -> dict:
    batch = 4096
    return dict(
        train=data["train"],
        heldout=data["heldout"],
        batch_size=batch,
        n_steps=steps,
        k=32,
        expansion=16,
        lr=lr,
        dead_tokens=max(batch, steps * batch // 4),
        auxk_alpha=1 / 32,
        seed=0,
        warmup_steps=2,
    )


def run_round_robin(
    cfg: dict, rounds: int, tag: str, peers=PEERS, slow_rounds: int | None = None
) -> dict[str, list[dict]]:
    """Every side once per round, the order rotated each round, so load from other jobs hits all sides;
    the SLOW sides only in the first slow_rounds rounds (None: every round)."""
    results: dict[str, list[dict]] = {p[0]: [] for p in peers}
    for r in range(rounds):
        order = peers[r % len(peers) :] + peers[: r % len(peers)]
        for label, venv, script, variant in order:
            if slow_rounds is not None and r >= slow_rounds and label in SLOW:
                continue
            t0 = time.time()
            try:
                res = harness.run_side(
                    venv,
                    script,
                    {**cfg, "variant": variant, "time_matmul": label in ("workbench", "wb topk")},
                    f"sae-{tag}",
                    timeout=4 * 3600,
                )
                dead = f", AuxK on {res['auxk_steps']}/{res['n_steps']} steps" if "auxk_steps" in res else ""
                print(
                    f"  [{tag} r{r}] {label}: {res['tokens_per_s']:.0f} tok/s, fvu {res['fvu']:.4f}, "
                    f"+{res['rss_train_mb']:.0f} MB{dead} ({time.time() - t0:.0f}s)",
                    flush=True,
                )
            except harness.PeerError as e:
                err = e.summary
                res = {"error": err}
                print(f"  [{tag} r{r}] {label}: FAILED {err}", flush=True)
            results[label].append(res)
    return results


def run_variants(cfg: dict, rounds: int, tag: str) -> dict[str, list[dict]]:
    peers = [(f"wb {name}", "main", "workbench_sae.py", {**v, "label": f"wb {name}"}) for name, v in VARIANTS]
    return run_round_robin(cfg, rounds, tag, peers)


# ---- report ----------------------------------------------------------------------------------------
def _ok(runs):
    return [r for r in runs if "error" not in r]


def _med(runs, key):
    vals = [r[key] for r in _ok(runs) if r.get(key) is not None]
    return statistics.median(vals) if vals else float("nan")


def main_table(
    name: str, data: dict, cfg: dict, res: dict[str, list[dict]], goals=GOALS, matmul_goal=STEP_OVER_MATMUL_GOAL
) -> tuple[list[str], list[str]]:
    """The section of one data set and its verdicts: speed-up against each side in `goals` (at no worse FVU) and
    the workbench step over its encoder matmul (against `matmul_goal` at d 768). data["d"] is the input width."""
    wb = res["workbench"]
    wb_tps, wb_fvu = _med(wb, "tokens_per_s"), _med(wb, "fvu")
    rows, verdicts = [], []
    for label, runs in res.items():
        ok = _ok(runs)
        if not ok:
            rows.append([label, "failed", "", "", "", "", "", "", runs[0]["error"][:160] if runs else ""])
            continue
        tps, fvu = _med(runs, "tokens_per_s"), _med(runs, "fvu")
        ratio = wb_tps / tps
        rows.append(
            [
                label,
                f"{1000 * _med(runs, 'step_s_median'):.0f}",
                f"{tps:,.0f}",
                f"{ratio:.2f}x" if label != "workbench" else "1",
                f"{fvu:.4f}",
                f"{_med(runs, 'auxk_steps'):.0f} / {cfg['n_steps']}",
                f"{100 * _med(runs, 'dead_frac_timed'):.1f}%",
                f"{_med(runs, 'rss_train_mb'):,.0f} / {_med(runs, 'rss_peak_mb'):,.0f}",
                f"{len(ok)} run(s)",
            ]
        )
        base = label.split(" (")[0]
        if base in goals:
            goal = goals[base]
            met = ratio >= goal and wb_fvu <= fvu
            verdicts.append(
                f"- vs {label}: {ratio:.2f}x tokens/s (goal >= {goal}x) at FVU {wb_fvu:.4f} vs {fvu:.4f} "
                f"-> **{'met' if met else 'missed'}**"
                + (
                    ""
                    if met
                    else (f" (speed short by {goal / ratio:.2f}x)" if ratio < goal else "")
                    + (" (workbench FVU worse)" if wb_fvu > fvu else "")
                )
            )
    step, mm, mm_pre = _med(wb, "step_s_median"), _med(wb, "matmul_s_median"), _med(wb, "matmul_prealloc_s_median")
    rel, rel_pre = _med(wb, "step_over_matmul"), _med(wb, "step_over_matmul_prealloc")
    goal = (
        f" (goal <= {matmul_goal}x at d 768) -> **{'met' if rel_pre <= matmul_goal else 'missed'}**"
        if data["d"] == 768 and matmul_goal
        else (" (the goal is set at d 768)" if matmul_goal else " (no goal set)")
    )
    verdicts.append(
        f"- workbench step / dense encoder matmul into a preallocated output ({cfg['batch_size']} x {data['d']} x "
        f"{16 * data['d']}, timed right before each step): median ratio {rel_pre:.2f}x (step {1000 * step:.0f} "
        f"ms, matmul {1000 * mm_pre:.0f} ms){goal}; against a matmul that allocates its output "
        f"({1000 * mm:.0f} ms), as measured before: {rel:.2f}x"
    )
    source = f" ({data['source']})" if data.get("source") else ""
    lines = [
        f"### {name}: d_in = {data['d']}, n = {16 * data['d']}, {cfg['n_steps']} steps = "
        f"{cfg['n_steps'] * cfg['batch_size']:,} tokens",
        "",
        f"Activations: {data['model']}{source}, `{data['hook']}`, scaled by {data['scale']:.4g} "
        f"to mean row norm sqrt(row width); {data['n_train']:,} train tokens, FVU on {data['n_heldout']:,} held-out tokens.",
        "",
    ]
    lines += harness.table(
        [
            "side",
            "step ms (median)",
            "tokens/s",
            "workbench speed-up",
            "held-out FVU",
            "steps with AuxK on",
            "dead latents (timed steps)",
            "peak MB above data / absolute",
            "runs",
        ],
        rows,
    )
    return lines + [""], verdicts


def variant_table(res: dict[str, list[dict]]) -> list[str]:
    base = _med(res["wb topk"], "step_s_median")
    rows = []
    for label, runs in res.items():
        if not _ok(runs):
            rows.append([label, "failed", "", "", runs[0]["error"][:120]])
            continue
        s = _med(runs, "step_s_median")
        rows.append(
            [
                label.removeprefix("wb "),
                f"{1000 * s:.0f}",
                f"{s / base:.2f}x",
                f"{_med(runs, 'fvu'):.4f}",
                f"{_med(runs, 'rss_train_mb'):,.0f}",
            ]
        )
    return harness.table(["architecture", "step ms (median)", "vs Top-k", "held-out FVU", "peak MB above data"], rows)


def report_head(title: str, script: str, machine: tuple, settings: str, t_start: float) -> list[str]:
    """A training benchmark's report up to its goals: the machine (harness.machine_lines' arguments), the
    settings, the command as run; the verdicts follow."""
    return [
        f"# {title}",
        "",
        *harness.machine_lines(*machine),
        f"- Settings: {settings}",
        f"- Command: `.venv/bin/python bench/{script} {' '.join(sys.argv[1:])}` (total {time.time() - t_start:.0f}s)",
        "",
        "## Goals",
        "",
    ]


NOTES = [
    "- sparsify: its Trainer runs a Hugging Face model itself, so bench/peers/sparsify_sae.py replays its "
    "per-batch code (fvu loss + AuxK, decoder-parallel gradient removal, renormalisation) with Adam "
    "instead of the default signum; without Triton it decodes with torch's embedding_bag (CPU).",
    "- sae-lens: SAETrainer.step per batch (its fit loop minus logging). `sae-lens (sparse acts)` is its "
    "documented fast path for fp32 without autocast (`use_sparse_activations=True`); on torch 2.13 CPU its "
    "backward fails (NotImplementedError: aten::view on SparseCPU) unless `rescale_acts_by_decoder_norm=False`, "
    "so that row also turns the rescale off.",
    "- dictionary_learning: TopKTrainer.update per batch; its 10M-token dead threshold is a constructor "
    "constant, overwritten to the run's value.",
    "- FVU is measured on held-out tokens with each library's own reconstruction in the original units; "
    "after few tokens it mostly reflects initialisation and early learning speed.",
    "- Six streams side by side: `blocks.{1,2,3}.hook_resid_mid` and `hook_resid_post` of the embedded model "
    "for the same tokens, each stream divided by its mean train norm (so no stream dominates), concatenated "
    "to d 768, then scaled like every data set. The streams are strongly correlated (each resid_post "
    "contains its resid_mid), so the 12,288 latents have far fewer directions to share than at d 768 in a "
    "real model, and many die: the case where AuxK does work on every side.",
    "- Dead latents: each side's own count (tokens or batches since the latent last fired, against the same "
    "threshold), read before each step; 'steps with AuxK on' counts the steps where it was above 0.",
    "- The workbench side that times the reference matmuls keeps a preallocated B x n output buffer resident, "
    "so its peak memory includes B x n x 4 bytes that training does not use.",
    "- The workbench's default `encoder_init='fit'` starts W_enc as W_dec^T (unit rows) and scales it so the "
    "first batch's reconstruction has the least-squares size. The diagnostic row `encoder_init='transpose'` "
    "is the same trainer without that scale (the unscaled transpose overshoots: FVU > 1 at step 0), which "
    "was the workbench default before.",
]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="few steps, one round: checks every side runs")
    ap.add_argument("--steps-768", type=int, default=40, help="steps at d 768 (wide, gpt2)")
    ap.add_argument("--steps-tiny", type=int, default=60)
    ap.add_argument("--rounds-768", type=int, default=3)
    ap.add_argument("--rounds-tiny", type=int, default=3)
    ap.add_argument(
        "--slow-rounds",
        type=int,
        default=1,
        help=f"rounds in which the slow sides run ({', '.join(sorted(SLOW))}); the rest run every round",
    )
    ap.add_argument(
        "--variant-steps",
        type=int,
        default=4,
        help="steps per architecture at d 768 (the embedded model uses up to 30)",
    )
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument(
        "--datasets",
        default="tiny,wide",
        help="which activations: tiny (the embedded model, d 128), wide (six streams of the embedded model side by "
        "side, d 768: latents die, AuxK works), gpt2 (a random-init GPT-2-small shape, d 768: no latent dies)",
    )
    ap.add_argument("--no-variants", action="store_true", help="skip the workbench architecture timings")
    harness.add_common_args(ap, OUT)
    args = ap.parse_args()
    if args.quick:
        args.steps_768, args.steps_tiny, args.rounds_768, args.rounds_tiny, args.variant_steps = 3, 6, 1, 1, 3
    args.chosen = args.datasets.split(",")
    if set(args.chosen) - {"tiny", "wide", "gpt2"}:
        ap.error(f"--datasets {args.datasets!r}: choose from tiny, wide, gpt2")
    return args


def measure(args) -> tuple[list[str], list[str], dict, dict]:
    """Every chosen data set, round robin over the sides, then the workbench architectures on it: the report's
    sections, its verdicts, the raw runs and the last data set's training config."""
    chosen = args.chosen
    print("preparing activations", flush=True)
    runs = []
    if "tiny" in chosen:
        runs.append(("Embedded model", tiny_acts(args.steps_tiny * 4096, 16384), args.steps_tiny, args.rounds_tiny))
    if "wide" in chosen:
        wide = tiny_acts(args.steps_768 * 4096, 8192, WIDE_HOOKS)
        runs.append(("Embedded model, six streams side by side", wide, args.steps_768, args.rounds_768))
    if "gpt2" in chosen:
        runs.append(("GPT-2-small shape", gpt2_acts(args.steps_768 * 4096, 8192), args.steps_768, args.rounds_768))
    sections, verdicts, raw = [], [], {}
    for name, data, steps, rounds in runs:
        cfg = base_cfg(data, steps, args.lr)
        print(f"{name}: {steps} steps x {rounds} round(s)", flush=True)
        res = run_round_robin(cfg, rounds, f"d{data['d']}", slow_rounds=args.slow_rounds)
        raw[name] = {"data": data, "cfg": cfg, "sides": res}
        lines, v = main_table(name, data, cfg, res)
        sections += lines
        verdicts += [f"**{name}** (d_in = {data['d']})"] + v + [""]
        if args.no_variants:
            continue
        vcfg = {**cfg, "n_steps": min(steps, args.variant_steps if data["d"] > 128 else 30)}
        print(f"{name}: architectures, {vcfg['n_steps']} steps", flush=True)
        vres = run_variants(vcfg, 1, f"var{data['d']}")
        raw[name]["architectures"] = vres
        sections += [
            f"Workbench architectures on the same data ({vcfg['n_steps']} steps, one run each; "
            "block variants use blocks of 4 latents, 8 active = 32 latents):",
            "",
        ]
        sections += variant_table(vres) + [""]
    return sections, verdicts, raw, cfg


def main() -> None:
    args = parse_args()
    t_start = time.time()
    info = harness.machine_info()
    threads = harness.set_threads(args.threads)
    versions = {
        "main": harness.venv_versions("main", ("torch", "transformer-lens", "workbench")),
        "sae": harness.venv_versions("sae", ("torch", "sae-lens", "eai-sparsify", "dictionary-learning")),
    }
    sections, verdicts, raw, cfg = measure(args)
    settings = (
        f"Top-k k = {cfg['k']}, 16x expansion, batch {cfg['batch_size']}, fp32, CPU; "
        f"Adam lr {args.lr} constant (no warm-up, no decay) on every side; AuxK on (alpha 1/32 where the "
        "library takes a coefficient; sae-lens keeps its own default coefficient 1.0), a latent is dead "
        "after a quarter of the run's tokens; each library's own initialisation (b_dec: workbench "
        "geometric median, dictionary_learning geometric median, sparsify batch mean, sae-lens zeros). "
        "Step time = wall time of one full optimiser step (forward, backward, Adam, decoder "
        "renormalisation, dead-latent bookkeeping); tokens/s = batch / median step time over all but the "
        "first 2 steps. Memory = peak RSS of the side's own process during training (VmHWM, reset after imports "
        "and loading the data) minus its RSS at that reset, i.e. weights + optimiser state + step "
        "temporaries; 'absolute' is the process's peak RSS during training."
    )
    text = [
        *report_head("SAE training benchmark", "sae_bench.py", (info, versions, threads), settings, t_start),
        *verdicts,
        "## Tables",
        "",
        *sections,
        "## Notes",
        "",
        *NOTES,
        "",
    ]
    harness.write_text(harness.WORK / "sae" / "raw.json", json.dumps(raw, indent=1))
    harness.write_text(args.out, "\n".join(text))
    print(f"wrote {args.out} ({time.time() - t_start:.0f}s)")


if __name__ == "__main__":
    main()
