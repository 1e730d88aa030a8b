"""The SAE papers' claims on the embedded model, every figure over seeds with a 95% interval.

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python bench/sae/sae_quality.py      # resumes; a rerun does only what is missing

1. harvest a cache of the middle-layer residual stream (blocks.2.hook_resid_post) of the embedded
   model over the synthetic corpus (once, under bench/work/sae_quality/);
2. for each (configuration, seed) in priority order: train it (its own checkpointed run; seed s sets both
   the initialisation and the data order), evaluate it on held-out tokens, and store its row as one JSON
   file (atomic), so an interrupted bench resumes and a rerun only does the missing work;
3. write bench/results/sae_quality.md from every row there is (bench/sae/sae_quality_report.py renders it):
   each figure as the mean over seeds with a t-interval, each claim with its verdict from the interval.

The claims: the Top-k regularisers (an off-support l1 and an l1/l2 penalty before the selection) make
latents more monosemantic at no cost to reconstruction, and l1/l2 makes reconstruction robust to the
inference-time k and helps small-budget probing; the scaffold lowers the dense-latent count at matched
L0, and removing it raises CE far more than removing the same number of top principal directions;
Matryoshka absorbs less than BatchTopK at the same L0; every architecture reaches FVU < 0.2.

    .venv/bin/python bench/sae/sae_quality.py --quick --out /tmp/q.md   # smoke run on tiny sizes
    .venv/bin/python bench/sae/sae_quality.py --report-only             # re-render the table from the stored rows
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402
import sae_quality_report as report  # noqa: E402

# every module the runs use is imported here, at the start: the rows record the commit the run started at
from workbench.cache import ActivationCache, harvest  # noqa: E402
from workbench.corpus import load_corpus  # noqa: E402
from workbench.models import load  # noqa: E402
from workbench.provenance import model_id  # noqa: E402
from workbench.sae import SAEConfig, TrainConfig, evaluate, metrics, probing, subspace, train  # noqa: E402
from workbench.sae.config import EvalConfig  # noqa: E402
from workbench.sae.eval import fvu_at_inference_k  # noqa: E402
from workbench.sae.io import load_sae, read_info  # noqa: E402

HOOK = "blocks.2.hook_resid_post"
PREFIXES = [64, 128, 256, 512, 1024]
L0 = 16  # the matched L0: Top-k's k; 4 blocks of 4 for the block architectures
SCAFFOLD_RANKS = (2, 8, 32)
REG_SWEEP = {"reg_l1_off": (0.01, 0.1), "reg_l1_l2": (0.03, 0.3)}  # each coefficient alone; 0 = the baseline
ROW_VERSION = 1  # bump when the row's extra metrics change: rows are recomputed from the saved SAEs


def k16(arch: str, **kw) -> SAEConfig:
    extra = {"prefixes": PREFIXES} if arch == "matryoshka" else {}
    return SAEConfig(arch, k=L0, n_latents=1024, **extra, **kw)


def reg(arch: str, k: int, field: str | None = None, coef: float = 0.0) -> SAEConfig:
    """Top-k or BatchTopK at k with one Top-k regulariser's coefficient set (none: the coefficient-0 baseline)."""
    return SAEConfig(arch, k=k, n_latents=1024, **({field: coef} if field else {}))


def bits_configs() -> list[SAEConfig]:
    """Blocks of 2-4 against Top-k at the same 12 active dimensions (the bits/token claim)."""
    return [
        SAEConfig("topk", k=12, n_latents=1024),
        SAEConfig("block_topk", n_latents=1024, block_size=2, n_active_blocks=6),
        SAEConfig("block_topk", n_latents=1020, block_size=3, n_active_blocks=4),
        SAEConfig("block_topk", n_latents=1024, block_size=4, n_active_blocks=3),
    ]


def other_configs() -> list[SAEConfig]:
    """The rest of the architecture comparison: the block architectures at L0 = 16, held by their target_l0
    controller, and with their fixed default coefficients."""
    b = {"n_latents": 1024, "block_size": 4, "n_active_blocks": L0 // 4}
    return [
        SAEConfig("grassmannian", **b),
        SAEConfig("group_lasso", **b, target_l0=L0),
        SAEConfig("block_jumprelu", **b, target_l0=L0),
        SAEConfig("group_lasso", **b),
        SAEConfig("block_jumprelu", **b),
    ]


def tiers() -> list[list[SAEConfig]]:
    """The configurations in priority order (one core cannot run them all in a sitting): each tier runs at every
    seed before the next starts, so the claims' configurations reach n = 3 first."""
    (f1, (c1a, c1b)), (f2, (c2a, c2b)) = REG_SWEEP.items()
    top = [(f1, c1b), (f2, c2b)]  # the larger coefficient of each first
    return [
        [
            k16("topk"),
            k16("batchtopk"),
            k16("matryoshka"),
            k16("topk", scaffold_rank=8),
            k16("batchtopk", scaffold_rank=8),
        ]
        + [reg(a, L0, f, c) for a in ("topk", "batchtopk") for f, c in top],
        [k16(a, scaffold_rank=r) for a in ("topk", "batchtopk") for r in (2, 32)]
        + [
            k16("matryoshka", scaffold_rank=8),
            SAEConfig("block_topk", n_latents=1024, block_size=4, n_active_blocks=4),
        ],
        [reg(a, 32, f, c) for a in ("topk", "batchtopk") for f, c in [(None, 0.0), *top]],
        [reg(a, k, f, c) for k in (L0, 32) for a in ("topk", "batchtopk") for f, c in ((f1, c1a), (f2, c2a))],
        bits_configs(),
        other_configs(),
    ]


def jobs(seeds: list[int]) -> list[SAEConfig]:
    """Every (configuration, seed) in priority order."""
    return [dataclasses.replace(c, seed=s) for tier in tiers() for s in seeds for c in tier]


def planned_jobs(args) -> list[SAEConfig]:
    """jobs(seeds); --quick keeps Top-k k=16 plain, with scaffold 8 and with l1/l2 0.3 (the smoke run)."""
    out = jobs(args.seeds)
    if args.quick:
        out = [
            c for c in out if c.architecture == "topk" and c.k == L0 and c.scaffold_rank in (0, 8) and not c.reg_l1_off
        ]
        out = [c for c in out if c.reg_l1_l2 in (0, 0.3) and not (c.scaffold_rank and c.reg_l1_l2)]
    return out


def harvest_cache(path: Path, n_tokens: int) -> bool:
    """The cache of the current embedded model at path: kept when its manifest names this model, else
    harvested (replacing one from earlier weights). True if harvested."""
    model, tok = load("tiny", device="cpu")
    manifest = path / "manifest.json"
    if manifest.is_file() and json.loads(manifest.read_text()).get("model") == model_id(model):
        return False
    harvest(
        model,
        load_corpus("synthetic", tok),
        [HOOK],
        path,
        n_tokens,
        batch_size=64,
        heldout_fraction=0.05,
        dtype="float32",
        progress=False,
        overwrite=manifest.is_file(),
    )
    return True


def train_one(cfg: SAEConfig, cache: Path, args) -> Path:
    """Train one (configuration, seed) in its own run folder (resumed from its checkpoint if interrupted); the
    saved SAE folder, or the one already there."""
    name = cfg.resolve(d_in=128).name
    run = args.work / "runs" / f"t{args.n_tokens}" / name  # another training length is another run
    folder = run / name
    if (folder / "cfg.json").is_file():
        return folder
    tc = TrainConfig(
        n_tokens=args.n_tokens,
        batch_size=args.batch_size,
        lr=args.lr,
        warmup_steps=50,
        decay_frac=0.2,
        checkpoint_every=200,
        log_every=25,
        progress=False,
        seed=cfg.seed,
    )
    train(cache, HOOK, [cfg], tc, run, resume=(run / "checkpoint.pt").is_file())
    return folder


def heldout(cache, n: int) -> tuple[torch.Tensor, dict, np.ndarray]:
    """(activations, labels, train mask) of the first n held-out tokens; labels gain 'role_entity', the
    (role, entity) pair (entity ids repeat across roles), for the monosemanticity score."""
    x = cache.rows(HOOK, np.arange(n), split="heldout")
    labels = {k: v[:n] for k, v in cache.labels("heldout").items()}
    ent = labels["entity"].astype(np.int64)
    labels["role_entity"] = np.where(ent >= 0, labels["role"].astype(np.int64) * 100_000 + ent, -1)
    del labels["entity"]
    return x, labels, cache.seq_index("heldout")[:n] % 2 == 0


def extras(folder: Path, data, label_names: dict, pca: dict) -> dict:
    """The metrics evaluate() does not compute, from the codes on the same held-out tokens."""
    x, labels, train_mask = data
    sae = load_sae(folder, device="cpu").eval()
    cfg = read_info(folder)["sae_config"]
    r = int(cfg.get("scaffold_rank") or 0)
    n_sparse = sae.cfg.d_sae - r
    with torch.no_grad():
        z = sae.encode(x.to(sae.dtype))[:, :n_sparse]
    probe_labels = {k: labels[k] for k in label_names}
    out = {
        "mono": metrics.monosemanticity(z, labels),
        "effective": metrics.effective_active(z),
        "sae_probes": probing.sae_probes(z, probe_labels, label_names, train_mask),
    }
    if cfg["architecture"] in ("topk", "batchtopk") and not r:
        k = cfg["k"]
        out["fvu_at_k"] = fvu_at_inference_k(sae, x, [max(1, k // 4), k // 2, k, 2 * k])
    if r:
        U = sae.W_dec.detach()[n_sparse:].T.double()  # [d, r]: the scaffold's output directions
        out["scaffold_alignment"] = {
            "pc_overlap": subspace.overlap(U, pca["components"][:, :r]),
            "outlier_overlap": subspace.axis_overlap(U, pca["outlier_dims"]),
            "chance": r / U.shape[0],
        }
    return out


def row(folder: Path, cache: Path, data, label_names: dict, pca: dict, args) -> dict:
    """evaluate()'s figures (its metrics.json, computed once) and the extras, for one trained SAE."""
    metrics_file = folder / "metrics.json"
    if not metrics_file.is_file():
        evaluate(
            folder, cache, "tiny", EvalConfig(max_tokens=args.eval_tokens, n_sequences=args.n_sequences, device="cpu")
        )
    m = json.loads(metrics_file.read_text())
    r, s = m["reconstruction"], m["splice"]
    info = read_info(folder)
    return {
        "sae": folder.name,
        "config": info["sae_config"],
        "fvu": r["fvu"],
        "l0": r["l0"],
        "block_l0": r.get("block_l0"),
        "n_dense": r["n_dense"],
        "n_dead": r["n_dead"],
        "bits": m["description_length"]["bits_per_token"],
        "ce_rec": s["ce_loss_recovered"],
        "kl_score": s["kl_score"],
        "ce_clean": s["ce_clean"],
        "ce_sae": s["ce_sae"],
        "ce_no_scaffold": s.get("ce_no_scaffold"),
        "absorption": m["absorption"]["absorption"],
        "probe": {f"k{k}": m["probing"][f"mean_k{k}"] for k in (1, 2, 5)},
        "sparsity_coef": info.get("final", {}).get("sparsity_coef"),  # lambda at the end of training
        **extras(folder, data, label_names, pca),
    }


def pca_baseline(cache_path: Path, data, args) -> dict:
    """The stream's top principal directions (from training rows), its outlier dimensions, and the CE with the
    top-r directions projected out for each scaffold rank; stored once in the work folder."""
    path = rows_dir(args) / "pca.json"
    if not path.is_file():
        cache = ActivationCache.open(cache_path)
        x = cache.rows(HOOK, np.arange(min(200_000, cache.n_tokens("train"))), split="train")
        mu, V, share = subspace.principal_components(x, max(SCAFFOLD_RANKS))
        dims, ratio = subspace.outlier_dims(x, 4)
        model, _ = load("tiny", device="cpu")
        tokens = torch.from_numpy(cache.sequences("heldout")[: args.n_sequences])
        special = cache.config.special_ids if cache.config.exclude_special else ()
        removed = {
            r: subspace.projection_removed_ce(model, HOOK, V[:, :r], mu, tokens, special) for r in SCAFFOLD_RANKS
        }
        out = {
            "mean": mu.tolist(),
            "components": V.T.tolist(),
            "variance_share": share.tolist(),
            "outlier_dims": dims,
            "outlier_rms_ratio": ratio,
            "removed": removed,
            "pc_tokens": int(x.shape[0]),
        }
        harness.write_text(path, json.dumps(out))
    out = json.loads(path.read_text())
    out["components"] = torch.tensor(out["components"], dtype=torch.float64).T
    return out


def run(args) -> None:
    cache = args.work / "cache"
    harvest_cache(cache, args.cache_tokens)
    c = ActivationCache.open(cache)
    data = heldout(c, min(args.eval_tokens, c.n_tokens("heldout")))
    label_names = c.manifest.get("label_names", {})
    pca = pca_baseline(cache, data, args)
    for cfg in planned_jobs(args):
        name = cfg.resolve(d_in=128).name
        path = rows_dir(args) / f"{name}.json"
        if path.is_file() and json.loads(path.read_text()).get("row_version") == ROW_VERSION:
            continue
        t = time.time()
        folder = train_one(cfg, cache, args)
        t_train = time.time() - t
        r = row(folder, cache, data, label_names, pca, args)
        r.update(
            row_version=ROW_VERSION, commit=args.commit, train_s=round(t_train), eval_s=round(time.time() - t - t_train)
        )
        harness.write_text(path, json.dumps(r, indent=1))
        print(f"{name}: FVU {r['fvu']:.3f}, L0 {r['l0']:.1f} ({r['train_s']} s + {r['eval_s']} s)", flush=True)
        try:  # the rows are what counts: a rendering bug must not stop the runs (--report-only redoes it)
            write_report(args)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
    write_report(args)


def rows_dir(args) -> Path:
    """Where the rows of these settings live: rows measured with other settings are never mixed in."""
    tag = f"c{args.cache_tokens}_t{args.n_tokens}_e{args.eval_tokens}_s{args.n_sequences}"
    return args.work / "rows" / tag


def write_report(args) -> None:
    rows = [json.loads(p.read_text()) for p in sorted(rows_dir(args).glob("*.json")) if p.name != "pca.json"]
    pca_path = rows_dir(args) / "pca.json"
    pca = json.loads(pca_path.read_text()) if pca_path.is_file() else None
    planned = [c.resolve(d_in=128).name for c in planned_jobs(args)]
    harness.write_text(args.out, report.render(rows, pca, planned, vars(args)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, default=None, help="cache, runs and rows (default: bench/work/sae_quality)")
    p.add_argument("--cache-tokens", type=int, default=1_050_000)
    p.add_argument("--n-tokens", type=int, default=500_000, help="training tokens of every SAE")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eval-tokens", type=int, default=10_000)
    p.add_argument("--n-sequences", type=int, default=64, help="held-out sequences of the spliced-model CE")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    harness.add_common_args(p, harness.BENCH / "results" / "sae_quality.md", threads=1)
    p.add_argument("--quick", action="store_true", help="tiny sizes, one seed, few jobs: checks the script runs")
    p.add_argument("--report-only", action="store_true", help="re-render the table from the stored rows")
    args = p.parse_args()
    harness.set_threads(args.threads)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.quick:
        args.cache_tokens, args.n_tokens, args.eval_tokens, args.n_sequences = 40_000, 20_480, 1_500, 8
        args.seeds = [0, 1]
        if args.work is None:
            harness.WORK.mkdir(parents=True, exist_ok=True)
            args.work = Path(tempfile.mkdtemp(prefix="sae_quality_quick-", dir=harness.WORK))
    args.work = args.work or harness.WORK / "sae_quality"
    args.commit = harness.commit()  # what is measured: the code at the start, not at the end
    if args.report_only:
        write_report(args)
    else:
        torch.manual_seed(0)
        run(args)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
