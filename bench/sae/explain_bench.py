"""Explanations benchmark: the cost of template explanations with detection and fuzzing scores, and the scorers'
calibration against the embedded corpus's planted labels (docs/methods.md section 13).

    .venv/bin/python bench/sae/explain_bench.py --threads 1            # 1,024 latents, 200k held-out tokens
    .venv/bin/python bench/sae/explain_bench.py --quick --threads 1    # smoke run: 256 latents, 5k tokens

The cache and the Top-k SAE (k=32) of the embedded model `tiny` are made as bench/sae/features_bench.py makes them
(its `prepare`, the same folder layout), the feature store built over the held-out tokens, then
`workbench features explain --scorers detection fuzz` runs in a measured subprocess (CPU seconds and peak RSS of
the process tree). The calibration runs in this process on the same store: every labelled latent for the exact
scorers, the first --steer-latents for the intervention scorer.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import features_bench  # noqa: E402
import harness  # noqa: E402

ROOT = harness.ROOT


def explain_cost(sae: Path, latents: int, env: dict) -> tuple[float, float, float]:
    cmd = [sys.executable, "-m", "workbench.cli", "features", "explain", str(sae), "--latents", str(latents)]
    cmd += ["--scorers", "detection", "fuzz", "--overwrite", "--quiet"]
    wall, cpu, peak, out = features_bench.run_measured(cmd, env)
    print(out.strip().splitlines()[-1])
    return wall, cpu, peak


def own_score_lines(sae: Path) -> list[str]:
    """What the template explanations themselves score (the run just measured), with t-intervals over latents."""
    from workbench.features import FeatureStore
    from workbench.features.explanations import load_explanations
    from workbench.intervals import t_interval

    _, lines = load_explanations(FeatureStore(sae))
    kinds = [x["predicate"]["kind"] for x in lines.values() if x["predicate"]]
    rows = []
    for scorer, key in (
        ("detection", "auc"),
        ("detection", "balanced_accuracy"),
        ("detection", "specificity_random"),
        ("detection", "specificity_near"),
        ("fuzz", "token_accuracy"),
        ("fuzz", "balanced_accuracy"),
    ):
        vals = [x["scores"][scorer][key] for x in lines.values() if x["scores"][scorer][key] is not None]
        rows.append([scorer, key, t_interval(vals).format()])
    return [
        f"Predicates: {kinds.count('label')} planted-label conjunctions, {kinds.count('tokens')} token lists, "
        f"{len(lines) - len(kinds)} latents that never fired.",
        "",
        *harness.table(["scorer", "metric", "mean [95% CI] over latents"], rows),
    ]


def calibration_lines(sae: Path, steer_latents: int) -> list[str]:
    from workbench.features.calibration import calibrate
    from workbench.features.explain import ExplainConfig

    cfg = ExplainConfig(steer_prompts=4)
    exact = calibrate(sae, cfg, ("detection", "fuzz"))
    steer = calibrate(sae, cfg, ("intervention",), steer_latents, model=str(ROOT / "data" / "models" / "tiny"))
    rows = []
    for r in exact["rows"] + steer["rows"]:
        rows.append(
            [
                r["scorer"],
                r["metric"],
                r["control"],
                r["n"],
                r["true"].format(),
                f"{r['control_mean']:.3f}",
                r["difference"].format(),
                f"{r['true_higher']:.0%}",
            ]
        )
    head = ["scorer", "metric", "control", "latents", "true label: mean [95% CI]", "control mean"]
    head += ["true - control [95% CI]", "true higher"]
    share = exact["named_share"]
    return [
        f"Labelled latents scored: {exact['n_latents']} (exact scorers), {steer['n_latents']} (intervention: its "
        "'label' is the latent's own promoted tokens against another latent's and random ones).",
        "",
        *harness.table(head, rows),
        "",
        f"Latents with a precise planted label (precision >= 0.9): {exact['precise_latents']}; the template "
        f"explanation names that label for {share:.1%} of them (goal >= 70%)."
        if share is not None
        else "No latent has a precise planted label.",
    ]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 256 latents, 5k tokens")
    ap.add_argument("--tokens", type=int, default=200_000, help="held-out rows of the store (default: %(default)s)")
    ap.add_argument("--latents", type=int, default=1024, help="SAE width, all explained (default: %(default)s)")
    ap.add_argument("--train-tokens", type=int, default=400_000, help="SAE training tokens (default: %(default)s)")
    ap.add_argument("--steer-latents", type=int, default=200, help="latents steered (default: %(default)s)")
    ap.add_argument("--work", default=str(harness.WORK / "features"), help="scratch folder (default: %(default)s)")
    harness.add_common_args(ap, ROOT / "bench" / "results" / "explanations.md", threads=1)
    a = ap.parse_args(argv)
    info = harness.machine_info()  # the commit measured: at the start
    if a.quick:
        a.tokens, a.latents, a.train_tokens, a.steer_latents = 5_000, 256, 10_000, 20
    ws = Path(a.work) / ("quick" if a.quick else "ws")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}
    if a.threads:
        env.update(OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads))
    threads = harness.set_threads(a.threads)
    saes, _ = features_bench.prepare(ws, a.tokens, [a.latents], a.train_tokens, env)
    sae = saes[a.latents]
    if not (sae / "features" / "manifest.json").is_file():
        features_bench.build([sae], ws, a.tokens, env)
    wall, cpu, peak = explain_cost(sae, a.latents, env)
    lines = [
        "# Feature explanations: cost and calibration (bench/sae/explain_bench.py)",
        "",
        *harness.machine_lines(info, {}, threads, "CPU seconds are the load-robust figure"),
        f"- Model: the embedded `tiny`; SAE: Top-k (k=32), {a.latents} latents, trained on {a.train_tokens:,} "
        f"tokens; store over {a.tokens:,} held-out tokens of the synthetic corpus"
        + (" (--quick smoke run)" if a.quick else ""),
        "",
        "## Cost: template explanation + detection + fuzzing for every latent",
        "",
        *harness.table(
            ["latents", "tokens", "CPU s", "wall s", "peak RSS MB"],
            [[a.latents, f"{a.tokens:,}", f"{cpu:.1f}", f"{wall:.1f}", f"{peak:.0f}"]],
        ),
        "",
        "Goal: <= 60 CPU s. Measured on `workbench features explain` alone (the store already built).",
        "",
        "## What the template explanations score",
        "",
        *own_score_lines(sae),
        "",
        "## Calibration against planted labels (tiny only; the small model, sets and CLTs were not run: CPU)",
        "",
        "Each latent's true label (the store's best planted label by F1) scored as its explanation, against a label "
        "shuffled from another latent and a random value of the same kind; intervals are Student-t over latents "
        "(workbench/intervals.py). A one-label predicate is 0 or 1, so its detection AUC equals its balanced "
        "accuracy.",
        "",
        *calibration_lines(sae, a.steer_latents),
    ]
    harness.write_text(a.out, "\n".join(lines) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
