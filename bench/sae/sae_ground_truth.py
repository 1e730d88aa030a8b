"""The SAE claims against ground truth: synthetic activations with a known dictionary (issue #25, item 4).

    OMP_NUM_THREADS=1 nohup nice -n 5 .venv/bin/python bench/sae/sae_ground_truth.py --threads 1 \\
        > bench/work/sae_ground_truth/run.log 2>&1 &   # 2-8 min per SAE on one shared core; rerun to resume
    .venv/bin/python bench/sae/sae_ground_truth.py --quick --out /tmp/gt.md   # smoke run on tiny sizes

1. sae-lens's `sae_lens.synthetic` makes a feature dictionary (unit vectors in d = 128) with Zipfian firing
   probabilities, parent -> child hierarchies (a child fires only with its parent; some sibling sets are
   mutually exclusive) and low-rank correlated firing. Beside it (sae_lens.synthetic has no multi-dimensional
   features) this script plants k-dimensional subspace features: when one fires, its contribution is a random
   direction of its planted subspace (k = 2, 3, 4) times a magnitude.
2. The rows go into a workbench activation cache (workbench.cache.write_array_cache), block by block from
   seeds, so the held-out ground truth is regenerated exactly (and checked against the cache's rows).
3. Every architecture trains through the workbench's own trainer (workbench.sae.train) at matched L0, one
   run per (architecture, seed); the seed sets the SAE's initialisation and the data order.
4. Each saved SAE is loaded back as its SAELens object (workbench.sae.io.load_sae) and measured on the
   held-out rows: sae-lens's own MCC, feature uniqueness and classification F1 against the true dictionary;
   absorption on the known parent/child pairs; subspace recovery by principal angles.

Per-(architecture, seed) results are JSON files written atomically under bench/work/sae_ground_truth/results;
a rerun skips finished ones, resumes an interrupted training from its checkpoint and rewrites the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

from workbench.atomic import write_json  # noqa: E402
from workbench.cache import write_array_cache  # noqa: E402
from workbench.errors import DamagedFileError  # noqa: E402
from workbench.intervals import t_interval, verdict  # noqa: E402
from workbench.sae import SAEConfig, TrainConfig, train  # noqa: E402

HOOK = "synthetic"
OUT = harness.BENCH / "results" / "sae_ground_truth.md"
WORK = harness.WORK / "sae_ground_truth"


BLOCK_ARCHS = ("block_topk", "grassmannian", "group_lasso", "block_jumprelu")


@dataclass
class TruthConfig:
    """The data-generation parameters (all recorded in the table)."""

    n_features: int = 2048  # sae_lens.synthetic dictionary features
    d: int = 128
    zipf_exponent: float = 0.5
    max_prob: float = 0.2
    min_prob: float = 0.0005
    n_roots: int = 64  # hierarchy: parents (features 0..n_roots-1), each with `branching` children
    branching: int = 4
    mutually_exclusive_portion: float = 0.5  # share of parents whose children never fire together
    corr_rank: int = 16  # low-rank correlation of the firing (Gaussian copula)
    corr_scale: float = 0.1
    magnitude_mean: float = 1.0
    magnitude_std: float = 0.3
    subspace_dims: tuple[int, ...] = (2, 3, 4)  # planted multi-dimensional features, per dimension:
    subspaces_per_dim: int = 8
    subspace_prob: float = 0.02  # firing probability of each planted subspace (independent of the rest)
    n_tokens: int = 1_050_000  # cache rows, train + held-out (an SAE reads the train rows about twice)
    heldout_fraction: float = 0.05
    block_rows: int = 16_384  # rows generated per seed
    shard_rows: int = 262_144  # rows per cache shard: the unit a resumed write keeps
    # the dictionary and the data; never an SAE seed: sae_lens draws the dictionary as torch.randn(n_features, d)
    # from torch.Generator().manual_seed(seed), the very draw an SAE of that seed starts its decoder from
    seed: int = 12345

    def source(self) -> str:
        digest = hashlib.sha256(json.dumps(dataclasses.asdict(self), sort_keys=True).encode()).hexdigest()[:12]
        return f"sae_lens.synthetic+subspaces:{digest}"


@dataclass
class RunConfig:
    """The SAEs and their training (matched L0 = k = n_active_blocks x block_size)."""

    architectures: tuple[str, ...] = ("topk", "batchtopk", "matryoshka") + BLOCK_ARCHS
    seeds: tuple[int, ...] = (0, 1, 2)
    k: int = 16
    n_latents: int = 2304  # the dictionary's 2048 features plus room for the planted subspaces
    block_size: int = 4
    train_tokens: int = 3_000_000  # about three passes over the train rows
    batch_size: int = 1024
    lr: float = 1e-3  # at 3e-4 and 1M rows Top-k's FVU was still falling steadily (0.378 at the end)


class GroundTruth:
    """The known generator: a sae_lens SyntheticModel plus the planted subspaces."""

    def __init__(self, cfg: TruthConfig):
        from sae_lens.synthetic import (
            HierarchyConfig,
            LowRankCorrelationConfig,
            SyntheticModel,
            SyntheticModelConfig,
            ZipfianFiringProbabilityConfig,
        )

        self.cfg = cfg
        self.model = SyntheticModel(
            SyntheticModelConfig(
                num_features=cfg.n_features,
                hidden_dim=cfg.d,
                firing_probability=ZipfianFiringProbabilityConfig(cfg.zipf_exponent, cfg.max_prob, cfg.min_prob),
                hierarchy=HierarchyConfig(
                    total_root_nodes=cfg.n_roots,
                    branching_factor=cfg.branching,
                    max_depth=1,
                    mutually_exclusive_portion=cfg.mutually_exclusive_portion,
                    compensate_probabilities=True,
                ),
                correlation=LowRankCorrelationConfig(cfg.corr_rank, cfg.corr_scale, seed=cfg.seed),
                std_firing_magnitudes=cfg.magnitude_std,
                mean_firing_magnitudes=cfg.magnitude_mean,
                seed=cfg.seed,
            )
        )
        rng = np.random.default_rng([cfg.seed, 1])
        dims = [k for k in cfg.subspace_dims for _ in range(cfg.subspaces_per_dim)]
        self.subspaces = [torch.from_numpy(np.linalg.qr(rng.standard_normal((cfg.d, k)))[0]).float() for k in dims]
        self.pairs = [(r.feature_index, c.feature_index) for r in self.model.hierarchy.roots for c in r.children]

    @property
    def features(self) -> torch.Tensor:
        return self.model.feature_dict.feature_vectors.detach()

    def sample(self, split: str, start: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows [n, d] float32, dictionary features firing [n, n_features], subspaces firing [n, n_sub]) of
        rows start..start+n of a split: the same for the same arguments (a seed per block)."""
        seed = np.random.SeedSequence([self.cfg.seed, split == "heldout", start]).generate_state(1)[0]
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(int(seed))
            f = self.model.activation_generator.sample(n)
            x = self.model.feature_dict(f)
            fire = torch.rand(n, len(self.subspaces)) < self.cfg.subspace_prob
            for s, U in enumerate(self.subspaces):
                rows = fire[:, s].nonzero().squeeze(1)
                direction = torch.nn.functional.normalize(torch.randn(len(rows), U.shape[1]), dim=1)
                mag = (self.cfg.magnitude_mean + self.cfg.magnitude_std * torch.randn(len(rows), 1)).relu()
                x[rows] += (mag * direction) @ U.T
        return x.numpy().astype(np.float32), (f > 0).numpy(), fire.numpy()

    def rows(self, split: str, start: int, n: int) -> np.ndarray:
        return self.sample(split, start, n)[0]


def write_cache(truth: GroundTruth, path: Path, progress: bool):
    """The cache of the generator's rows (resumed, or reused when finished with the same source)."""
    c = truth.cfg
    return write_array_cache(
        path,
        truth.rows,
        HOOK,
        c.d,
        c.n_tokens,
        source=c.source(),
        heldout_fraction=c.heldout_fraction,
        block_rows=c.block_rows,
        shard_tokens=c.shard_rows,
        resume=True,
        progress=progress,
    )


def heldout(truth: GroundTruth, cache) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """The held-out rows with their ground truth, regenerated block by block and checked against the cache."""
    n, b = cache.n_tokens("heldout"), truth.cfg.block_rows
    xs, fs, ss = [], [], []
    for a in range(0, n, b):
        x, f, s = truth.sample("heldout", a, min(b, n - a))
        if not np.array_equal(cache.rows(HOOK, np.arange(a, a + len(x)), split="heldout").numpy(), x):
            raise DamagedFileError(f"the cache at {cache.path} does not hold the generator's held-out rows {a}..")
        xs.append(torch.from_numpy(x))
        fs.append(f)
        ss.append(s)
    return torch.cat(xs), np.concatenate(fs), np.concatenate(ss)


def sae_config(arch: str, run: RunConfig, seed: int) -> SAEConfig:
    """Every architecture at L0 = run.k: Top-k's k, or run.k / block_size active blocks (a target_l0 for the
    thresholded block architectures)."""
    base = dict(n_latents=run.n_latents, seed=seed, k=run.k)
    if arch in ("topk", "batchtopk", "matryoshka"):
        return SAEConfig(arch, **base)
    blocks = dict(block_size=run.block_size, n_active_blocks=run.k // run.block_size)
    if arch in ("group_lasso", "block_jumprelu"):
        return SAEConfig(arch, **base, **blocks, target_l0=float(run.k))
    return SAEConfig(arch, **base, **blocks)


def train_one(cache_path: Path, arch: str, seed: int, run: RunConfig, work: Path, progress: bool) -> Path:
    out = work / "runs" / f"{arch}_seed{seed}"
    tc = TrainConfig(
        n_tokens=run.train_tokens,
        batch_size=run.batch_size,
        lr=run.lr,
        seed=seed,
        checkpoint_every=200,
        device="cpu",
        progress=progress,
    )
    [folder] = train(cache_path, HOOK, [sae_config(arch, run, seed)], tc, out, resume=(out / "checkpoint.pt").is_file())
    return folder


def run_all(args, truth_cfg: TruthConfig, run: RunConfig, work: Path) -> None:
    """Cache, then every (seed, architecture) not finished yet; the table is rewritten after each."""
    import truth_metrics

    t = time.time()
    truth = GroundTruth(truth_cfg)
    cache = write_cache(truth, work / "cache", progress=False)
    timings = {"truth_and_cache_s": round(time.time() - t, 1)}
    t = time.time()
    X, F, S = heldout(truth, cache)
    timings["heldout_truth_s"] = round(time.time() - t, 1)
    facts = {"true_l0": float(F.sum(1).mean()), "subspace_l0": float(S.sum(1).mean()), "heldout_rows": len(X)}
    write_json(work / "data.json", {**facts, **timings, "truth": dataclasses.asdict(truth_cfg)}, indent=1)
    for seed in run.seeds:
        for arch in run.architectures:
            path = work / "results" / f"{arch}_seed{seed}.json"
            if path.is_file() and json.loads(path.read_text()).get("run") == _run_key(run):
                continue
            t = time.time()
            folder = train_one(cache.path, arch, seed, run, work, args.progress)
            train_s = time.time() - t
            t = time.time()
            unit = sae_config(arch, run, seed).unit_size
            m = truth_metrics.measure(folder, truth, X, F, S, unit, truth_cfg.block_rows)
            row = {"arch": arch, "seed": seed, "run": _run_key(run), "commit": args.info["commit"], "metrics": m}
            row |= {"train_s": round(train_s, 1), "eval_s": round(time.time() - t, 1)}
            write_json(path, row, indent=1)
            print(f"{arch} seed {seed}: train {train_s:.0f} s, {json.dumps(m)}", flush=True)
            write_report(args, work, truth_cfg, run)


def _run_key(run: RunConfig) -> dict:
    """What a finished result must have been trained with to be kept (the seeds list aside)."""
    return {k: v for k, v in dataclasses.asdict(run).items() if k not in ("seeds", "architectures")}


def load_results(work: Path, run: RunConfig) -> list[dict]:
    rows = [json.loads(p.read_text()) for p in sorted((work / "results").glob("*.json"))]
    return [r for r in rows if r["run"] == _run_key(run) and r["arch"] in run.architectures and r["seed"] in run.seeds]


COLUMNS = [  # (metric key, column title, digits)
    ("l0", "L0", 1),
    ("fvu", "FVU", 3),
    ("dead", "dead", 0),
    ("mcc", "MCC", 3),
    ("uniqueness", "uniqueness", 3),
    ("f1", "classification F1", 3),
    ("absorption", "absorption", 3),
    ("parent_miss", "parent miss", 3),
    ("absorption_excess", "absorption − miss", 3),
    ("subspace_cos2", "subspace cos²", 3),
    ("subspace_angle", "largest angle (°)", 1),
    ("subspace_f1", "subspace F1", 3),
]

DEFINITIONS = """\
- **L0**, **FVU**: mean active latents per held-out row; squared reconstruction error over the rows' total
  variance. **dead**: latents that never fire on the held-out rows.
- **MCC** (sae-lens `mean_correlation_coefficient`): the mean |cosine| between decoder rows and true feature
  vectors under the best one-to-one matching (Hungarian). **uniqueness** (sae-lens `feature_uniqueness`):
  distinct best-matching true features over the number of latents. **classification F1** (sae-lens
  `ClassificationMetricsCalculator`): each latent, as a detector of its best-matching true feature (by
  decoder cosine), scored by F1 over the held-out rows; the mean over latents. These three use the
  sae_lens.synthetic dictionary only (the planted subspaces have no single true direction), so latents
  spent on subspaces count against them for every architecture alike.
- **absorption**: over the known parent → child pairs (whose child fires at least 20 times held out, and the
  parent at least 20 times with none of its children), the share of the child's firings on which the
  parent's best-matching latent (largest |cosine| with the parent's true vector) is silent; the mean over
  pairs. **parent miss**: the same latent's silence when the parent fires with none of its children.
  **absorption − miss**: their difference per pair, averaged: the silence that the child's presence adds.
- **subspace cos²**: for each planted k-dimensional subspace U, the best-matching unit's captured share
  ||Qᵀ U||²_F / k (Q an orthonormal basis of the unit's decoder rows): the mean cos² of the k principal
  angles between U and the unit's span; 1 = U lies in the span. A block architecture's unit is a block
  (every block tried); a one-latent architecture's is the 4 latents chosen greedily to capture U best (its
  best-matching "block"). A random 4-dimensional span captures 4/d on average. **largest angle**: that
  unit's largest principal angle with U, in degrees. **subspace F1**: "any latent of the unit is active" as
  a detector of "the subspace fires". All: means over the planted subspaces."""


def _by_arch(rows: list[dict], key: str) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for r in rows:
        out.setdefault(r["arch"], {})[r["seed"]] = r["metrics"][key]
    return out


def _fmt(values: list[float], digits: int = 3) -> str:
    """'mean [low, high] (n=...)' for a table cell (workbench.intervals); '–' when nothing is measured."""
    return t_interval(values).format(f"{{:.{digits}f}}") if values else "–"


def claim(rows: list[dict], key: str, a: str, b: str, sign: int, text: str) -> str:
    """One claim line: the per-seed paired difference a - b of `key`, its interval and the verdict."""
    by = _by_arch(rows, key)
    seeds = sorted(set(by.get(a, {})) & set(by.get(b, {})))
    diffs = [by[a][s] - by[b][s] for s in seeds]
    if not diffs:
        return f"- {text}: not measured yet ({a} and {b} share no finished seed)"
    return (
        f"- {text}: {a} {_fmt([by[a][s] for s in seeds])} vs {b} {_fmt([by[b][s] for s in seeds])}; "
        f"paired difference {a} − {b} = {_fmt(diffs)} over {len(diffs)} seeds → "
        f"**{verdict(t_interval(diffs), 'lower' if sign < 0 else 'higher')}**"
    )


def claims(rows: list[dict]) -> list[str]:
    """Matryoshka's absorption (and what it costs), then the block claim for every block architecture run."""
    out = [
        claim(rows, "absorption", "matryoshka", "topk", -1, "Matryoshka absorbs less than Top-k (absorption)"),
        claim(rows, "absorption_excess", "matryoshka", "topk", -1, "… read against the parent's plain miss rate"),
        claim(rows, "absorption", "matryoshka", "batchtopk", -1, "Matryoshka absorbs less than BatchTopK"),
        claim(rows, "mcc", "matryoshka", "topk", -1, "… at a cost: its dictionary matches the truth worse (MCC)"),
    ]
    for arch in (a for a in BLOCK_ARCHS if any(r["arch"] == a for r in rows)):
        text = f"A {arch} block recovers a planted subspace better than Top-k's best 4 latents (subspace cos²)"
        out.append(claim(rows, "subspace_cos2", arch, "topk", +1, text))
        out.append(claim(rows, "subspace_f1", arch, "topk", +1, "… and as one unit detects its firing better (F1)"))
    return out


def _commit_line(rows: list[dict]) -> str:
    """Which rows were measured at which commit (the Commit line above is the rendering's)."""
    by: dict[str, dict[str, list[str]]] = {}
    for r in sorted(rows, key=lambda r: r["seed"]):
        by.setdefault(r.get("commit", "not recorded"), {}).setdefault(r["arch"], []).append(str(r["seed"]))
    parts = [f"{c}: " + ", ".join(f"{a} seeds {','.join(s)}" for a, s in v.items()) for c, v in by.items()]
    return "- Rows measured at: " + "; ".join(parts)


def write_report(args, work: Path, truth_cfg: TruthConfig, run: RunConfig) -> None:
    rows = load_results(work, run)
    data = json.loads((work / "data.json").read_text())
    import sae_lens

    versions = {"main": {"sae-lens": sae_lens.__version__, "torch": torch.__version__}}
    lines = ["# SAE claims against ground truth (sae_lens.synthetic + planted subspaces)", ""]
    lines += harness.machine_lines(args.info, versions, args.threads_line, "each SAE trained alone")
    lines += [_commit_line(rows)]
    lines += ["", "Every figure: mean [95% t-interval] over the seeds finished (n in the seeds column); measured on the "
              f"{data['heldout_rows']:,} held-out rows of the cache (never trained on).", "", "## Claims", ""]  # fmt: skip
    lines += claims(rows) + ["", "## Results", ""]
    header = ["architecture", "seeds"] + [c[1] for c in COLUMNS]
    table = []
    for arch in run.architectures:
        mine = [r for r in rows if r["arch"] == arch]
        cells = [_fmt([r["metrics"][k] for r in mine], d) for k, _, d in COLUMNS]
        table.append([arch, ",".join(str(r["seed"]) for r in mine) or "–"] + cells)
    lines += harness.table(header, table)
    dims = truth_cfg.subspace_dims
    lines += ["", "Subspace recovery by the planted subspace's dimension (cos² / subspace F1):", ""]
    sub = [
        [arch]
        + [
            f"{_fmt([r['metrics'][f'subspace_cos2_k{k}'] for r in rows if r['arch'] == arch])} / "
            f"{_fmt([r['metrics'][f'subspace_f1_k{k}'] for r in rows if r['arch'] == arch])}"
            for k in dims
        ]
        for arch in run.architectures
    ]
    lines += harness.table(["architecture"] + [f"k = {k}" for k in dims], sub)
    missing = [f"{a} seed {s}" for s in run.seeds for a in run.architectures
               if not any(r["arch"] == a and r["seed"] == s for r in rows)]  # fmt: skip
    lines += ["", f"Not finished yet: {', '.join(missing)}." if missing else "Every (architecture, seed) finished."]
    lines += ["", "## Data", ""] + _data_lines(truth_cfg, run, data)
    lines += ["", "## Metrics", "", DEFINITIONS, "", "## Timings", ""] + _timing_lines(rows, data)
    harness.write_text(args.out, "\n".join(lines) + "\n")


def _data_lines(truth_cfg: TruthConfig, run: RunConfig, data: dict) -> list[str]:
    c = truth_cfg
    return [
        f"- Dictionary (sae_lens.synthetic `SyntheticModel`, seed {c.seed}): {c.n_features} unit feature vectors in "
        f"d = {c.d} (random, not orthogonalised), bias of norm 1; Zipfian firing probabilities (exponent "
        f"{c.zipf_exponent}, {c.min_prob}..{c.max_prob}); magnitudes N({c.magnitude_mean}, {c.magnitude_std}) "
        "clipped at 0.",
        f"- Hierarchy: {c.n_roots} parents (the most frequent features) with {c.branching} children each "
        f"({c.n_roots * c.branching} parent → child pairs); a child fires only with its parent; the children of "
        f"{c.mutually_exclusive_portion:.0%} of the parents are mutually exclusive; probabilities compensated so a "
        "child's overall rate stays its base rate.",
        f"- Correlated firing: a low-rank Gaussian copula (rank {c.corr_rank}, scale {c.corr_scale}).",
        f"- Planted subspaces (this script, beside sae_lens.synthetic, which has only one-dimensional features): "
        f"{c.subspaces_per_dim} random subspaces of each dimension {list(c.subspace_dims)}; each fires "
        f"independently with probability {c.subspace_prob} and then adds a uniformly random unit direction of its "
        f"subspace times a N({c.magnitude_mean}, {c.magnitude_std}) magnitude.",
        f"- Rows: {c.n_tokens:,} (held-out share {c.heldout_fraction}), generated in blocks of {c.block_rows:,} "
        f"rows, each from its own seed; source id `{c.source()}`. Measured true L0: "
        f"{data['true_l0']:.2f} dictionary features + {data['subspace_l0']:.2f} subspaces per row.",
        f"- SAEs: {run.n_latents} latents, matched L0 = {run.k} (Top-k/BatchTopK/Matryoshka k = {run.k}; block "
        f"Top-k and Grassmannian {run.k // run.block_size} active blocks of {run.block_size}; group lasso and block "
        f"JumpReLU blocks of {run.block_size} held at L0 {run.k} by their target_l0 controller; Matryoshka's default "
        f"prefixes); {run.train_tokens:,} training rows, batch {run.batch_size}, Adam lr {run.lr} (the workbench's "
        "warm-up and decay), every other field the workbench's default; seed = initialisation and data order.",
    ]


def _timing_lines(rows: list[dict], data: dict) -> list[str]:
    lines = [
        f"- Dictionary + cache: {data['truth_and_cache_s']:.0f} s (0 when reused); held-out truth regenerated "
        f"and checked: {data['heldout_truth_s']:.0f} s."
    ]
    for r in sorted(rows, key=lambda r: (r["arch"], r["seed"])):
        lines.append(f"- {r['arch']} seed {r['seed']}: train {r['train_s']:.0f} s, evaluate {r['eval_s']:.0f} s")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.add_common_args(p, OUT, threads=1)
    p.add_argument("--archs", nargs="*", default=list(RunConfig.architectures), help="architectures to train")
    p.add_argument("--seeds", type=int, nargs="*", default=list(RunConfig.seeds), help="SAE seeds (init + data order)")
    p.add_argument("--train-tokens", type=int, default=RunConfig.train_tokens, help="training rows per SAE")
    p.add_argument("--work", type=Path, default=None, help="scratch folder (default: bench/work/sae_ground_truth)")
    p.add_argument("--progress", action="store_true", help="progress bars")
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks the script runs (seconds, not minutes)")
    args = p.parse_args()
    args.threads_line = harness.set_threads(args.threads)
    if args.threads:
        torch.set_num_threads(args.threads)
    truth_cfg, run = TruthConfig(), RunConfig(tuple(args.archs), tuple(args.seeds), train_tokens=args.train_tokens)
    if args.quick:
        truth_cfg = TruthConfig(n_features=256, d=32, n_roots=8, subspaces_per_dim=2, n_tokens=24_576,
                                heldout_fraction=1 / 6, block_rows=4096, shard_rows=8192)  # fmt: skip
        run = dataclasses.replace(run, n_latents=320, train_tokens=8192, batch_size=512)
    if truth_cfg.seed in run.seeds:
        raise SystemExit(f"--seeds {truth_cfg.seed} is the dictionary's seed: that SAE would start at the answer")
    work = args.work or (WORK.with_name(WORK.name + "_quick") if args.quick else WORK)
    args.info = harness.machine_info()
    run_all(args, truth_cfg, run, work)
    write_report(args, work, truth_cfg, run)


if __name__ == "__main__":
    main()
