"""bench/results/sae_quality.md from the stored rows of bench/sae_quality.py: figures over seeds, claims' verdicts.

Every figure is the mean over the seeds a configuration has, with its 95% t-interval (workbench.intervals);
every claim compares configurations run with the same seeds and reads its verdict from the interval of
the paired differences.
"""

from __future__ import annotations

import datetime
import re
from collections import defaultdict

import harness

from workbench.intervals import paired_difference, t_interval, verdict

NONINFERIORITY = 0.05  # "no cost to reconstruction": FVU at most 5% (relative) above the baseline's
CE_MARGIN = 0.005  # ... and CE recovered at most 0.005 below it


def config_name(sae: str) -> str:
    return re.sub(r"_seed\d+$", "", sae)


def seed_of(sae: str) -> int:
    return int(sae.rsplit("seed", 1)[1])


def get(row: dict, path: str):
    """row['a']['b'] for path 'a.b' (None when missing)."""
    v = row
    for part in path.split("."):
        if not isinstance(v, dict) or part not in v:
            return None
        v = v[part]
    return v


class Table:
    """The rows grouped by configuration: per configuration, seed -> row."""

    def __init__(self, rows: list[dict]):
        self.by = defaultdict(dict)
        for r in rows:
            self.by[config_name(r["sae"])][seed_of(r["sae"])] = r

    def values(self, name: str, path: str) -> dict[int, float]:
        return {s: v for s, r in self.by.get(name, {}).items() if (v := get(r, path)) is not None}

    def cell(self, name: str, path: str, fmt: str = "{:.3f}") -> str:
        vals = self.values(name, path)
        return t_interval(vals.values()).format(fmt).rsplit(" (n=", 1)[0] if vals else "–"

    def n(self, name: str) -> int:
        return len(self.by.get(name, {}))

    def diff(self, a: str, b: str, path: str, relative: bool = False):
        """Interval of a - b over common seeds (relative: (a - b) / b), or None."""
        va, vb = self.values(a, path), self.values(b, path)
        if relative:
            va = {s: (va[s] - vb[s]) / vb[s] for s in va if s in vb and vb[s]}
            vb = dict.fromkeys(va, 0.0)
        if not set(va) & set(vb):
            return None
        return paired_difference(va, vb)


def claim(t: Table, text: str, a: str, b: str, path: str, direction: str, fmt="{:+.3f}", margin=0.0, rel=False):
    """One claim line: '- text: a - b = mean [lo, hi] (n) -> verdict'."""
    d = t.diff(a, b, path, rel)
    if d is None:
        return f"- {text}: not measured yet ({a}: n={t.n(a)}, {b}: n={t.n(b)})."
    v = verdict(d, direction, margin)
    what = "relative difference" if rel else "difference"
    return f"- {text}: {what} {d.format(fmt)} -> **{v}**."


MAIN_COLUMNS = [
    ("FVU", "fvu", "{:.3f}"),
    ("L0", "l0", "{:.1f}"),
    ("dense", "n_dense", "{:.1f}"),
    ("dead", "n_dead", "{:.0f}"),
    ("bits/token", "bits", "{:.0f}"),
    ("CE recovered", "ce_rec", "{:.4f}"),
    ("absorption", "absorption", "{:.3f}"),
    ("k-sparse probe k=1 (bal. acc.)", "probe.k1", "{:.3f}"),
    ("k-sparse probe k=5 (bal. acc.)", "probe.k5", "{:.3f}"),
    ("sae-probes AUC k=1", "sae_probes.mean_auc_k1", "{:.3f}"),
    ("sae-probes AUC k=5", "sae_probes.mean_auc_k5", "{:.3f}"),
]


def main_table(t: Table, names: list[str]) -> list[str]:
    head = ["SAE (seeds)"] + [c[0] for c in MAIN_COLUMNS]
    body = [[f"{n} ({t.n(n)})"] + [t.cell(n, p, f) for _, p, f in MAIN_COLUMNS] for n in names]
    return harness.table(head, body)


def header(rows: list[dict], planned: list[str], args: dict) -> list[str]:
    commits = sorted({r.get("commit", "?") for r in rows})
    done = {r["sae"] for r in rows}
    missing = [p for p in planned if p not in done]
    tr = sum(r.get("train_s", 0) for r in rows)
    ev = sum(r.get("eval_s", 0) for r in rows)
    return [
        "# SAE quality on the embedded model: the papers' claims with intervals over seeds",
        "",
        f"- Commit: {', '.join(commits)} (the code each row was measured at; per-row in the work folder)",
        f"- Rendered: {datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds')}; command: "
        "`OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python bench/sae_quality.py` (resumable; one core, shared machine; "
        f"{len(rows)} SAE rows took {tr / 60:.0f} min training + {ev / 60:.0f} min evaluation)",
        f"- Progress: {len(done & set(planned))} of {len(planned)} planned (configuration, seed) runs done"
        + (f"; missing: {len(missing)} (the table shows each configuration's n)" if missing else "; complete"),
        f"- Data: `blocks.2.hook_resid_post` of the embedded model over the synthetic corpus, "
        f"{args['cache_tokens']:,} cached tokens (5% held out). Every SAE trains on {args['n_tokens']:,} tokens "
        f"(batch {args['batch_size']}, Adam lr {args['lr']}, 50 warm-up steps, linear decay over the last 20%); "
        "seed s sets both the initialisation and the data order, and every configuration runs with the same seeds, "
        "so claims compare paired runs.",
        f"- Evaluation on {args['eval_tokens']:,} held-out tokens (probes: fitted on even held-out sequences, "
        f"tested on odd ones); CE with the SAE spliced in on {args['n_sequences']} held-out sequences; dense = fires "
        "on more than 10% of tokens; bits/token = the MDL description length (docs/methods.md §5).",
        "- Every cell: mean over seeds [95% t-interval over seeds]; a single seed shows the value alone. "
        "Verdicts come from the interval of the paired per-seed differences: **shown** (interval on the claimed "
        "side), **not shown** (on the other side), **not distinguishable at this n** (it straddles the margin, "
        "or n < 2).",
        "- Probing protocols: *k-sparse probe* = the workbench's (k latents by class-mean difference, standardised, "
        "L2 logistic regression with fixed lambda 1e-3 and class weights, balanced accuracy over all test tokens); "
        "*sae-probes* = the sae-probes suite's (k latents by class-mean difference, raw values, L2 logistic "
        "regression with C chosen from logspace(5, -5, 10) by validation AUC, refit; AUC and accuracy on balanced "
        "samples of 1024 train / 1024 test tokens). Both: one vs rest per class of the task and role labels, "
        "averaged over classes, then label kinds.",
        "",
    ]


def render(rows: list[dict], pca: dict | None, planned: list[str], args: dict) -> str:
    t = Table(rows)
    order = list(dict.fromkeys(config_name(p) for p in planned))
    names = [n for n in order if n in t.by]
    lines = header(rows, planned, args)
    lines += ["## Every configuration", ""] + main_table(t, names) + [""]
    lines += topk_regularisers(t)
    lines += scaffold(t, pca)
    lines += matryoshka_and_blocks(t, names)
    return "\n".join(lines) + "\n"


# ---- the Top-k regularisers ----------------------------------------------------------------------------

REG_COEFS = {"reg_l1_off": (0.01, 0.1), "reg_l1_l2": (0.03, 0.3)}  # bench/sae_quality.py's REG_SWEEP


def reg_names(arch: str, k: int) -> list[tuple[str, str]]:
    """(label, configuration name) of the baseline and each swept coefficient."""
    base = f"{arch}_n1024_k{k}"
    out = [("0 (baseline)", base)]
    for field, cs in REG_COEFS.items():
        for c in cs:
            off, ratio = (c, 0) if field == "reg_l1_off" else (0, c)
            out.append((f"{'l1 off-support' if off else 'l1/l2'} {c:g}", f"{base}_reg{off:g}_{ratio:g}"))
    return out


def reg_columns(k: int) -> list[tuple[str, str, str]]:
    return [
        ("monosemantic share (prec. >= 0.8)", "mono.share_monosemantic", "{:.3f}"),
        ("mean best-label precision", "mono.mean_best_precision", "{:.3f}"),
        ("FVU", "fvu", "{:.4f}"),
        ("CE recovered", "ce_rec", "{:.4f}"),
        *[(f"FVU at k'={kk}", f"fvu_at_k.{kk}", "{:.3f}") for kk in (max(1, k // 4), k // 2, 2 * k)],
        *[(f"k-sparse probe k={p}", f"probe.k{p}", "{:.3f}") for p in (1, 2, 5)],
        *[(f"sae-probes AUC k={p}", f"sae_probes.mean_auc_k{p}", "{:.3f}") for p in (1, 2, 5)],
        ("effective latents / token", "effective.per_token", "{:.2f}"),
        ("effective latents (dictionary)", "effective.dictionary", "{:.0f}"),
    ]


def reg_checks(k: int) -> list[tuple[str, str, str, float, bool]]:
    """(paper claim, path, direction, margin, relative) of each check against the coefficient-0 baseline."""
    return [
        ("monosemanticity", "mono.share_monosemantic", "higher", 0.0, False),
        ("monosemanticity", "mono.mean_best_precision", "higher", 0.0, False),
        ("no cost to reconstruction", "fvu", "lower", NONINFERIORITY, True),
        ("no cost to reconstruction", "ce_rec", "higher", CE_MARGIN, False),
        *[
            ("robust to the inference-time k", f"fvu_at_k.{kk}", "lower", 0.0, False)
            for kk in (max(1, k // 4), k // 2, 2 * k)
        ],
        *[("small-budget probing", f"probe.k{p}", "higher", 0.0, False) for p in (1, 2, 5)],
        *[("small-budget probing", f"sae_probes.mean_auc_k{p}", "higher", 0.0, False) for p in (1, 2, 5)],
        ("concentrates the code", "effective.per_token", "lower", 0.0, False),
    ]


def topk_regularisers(t: Table) -> list[str]:
    out = [
        "## The Top-k regularisers at matched L0 (k = 16 and 32)",
        "",
        "Each coefficient alone, swept from 0 (the baseline). Monosemanticity: per latent firing on at least 20 "
        "held-out tokens, the precision P(label = c | fires) of its best label c over every class of the task, "
        "role and (role, entity) labels; chance (a latent firing at random) is the largest class share. FVU at "
        "k': the trained SAE run with each token keeping its k' largest ReLU pre-activations (BatchTopK too). "
        "Effective latents: exp of the entropy of a token's activation mass over latents (mean over tokens), "
        "and of the total mass over the dictionary (docs/methods.md §5).",
        "",
    ]
    tally = defaultdict(lambda: defaultdict(list))
    for arch in ("topk", "batchtopk"):
        for k in (16, 32):
            names = reg_names(arch, k)
            if not any(n in t.by for _, n in names):
                continue
            cols = reg_columns(k)
            out += [f"### {arch}, k = {k}", ""]
            body = [[lab, t.n(n)] + [t.cell(n, p, f) for _, p, f in cols] for lab, n in names]
            out += harness.table(["coefficient", "n"] + [c[0] for c in cols], body) + [""]
            out += reg_verdicts(t, names, k, arch, tally)
    out += reg_summary(tally)
    return out


ABBREV = {"shown": "shown", "not shown": "NOT shown", "not distinguishable at this n": "n.d."}


def reg_verdicts(t: Table, names, k: int, arch: str, tally) -> list[str]:
    """Per swept coefficient, the paired difference from the baseline for each check, and its verdict."""
    checks = reg_checks(k)
    base = names[0][1]
    body = []
    for lab, n in names[1:]:
        cells = []
        for claim_name, path, direction, margin, rel in checks:
            d = t.diff(n, base, path, rel)
            if d is None:
                cells.append("–")
                continue
            v = verdict(d, direction, margin)
            tally[(lab.rsplit(" ", 1)[0], claim_name)][v].append(f"{arch} k={k} {lab} {path}")
            cells.append(f"{d.format('{:+.3f}').rsplit(' (n=', 1)[0]} {ABBREV[v]}")
        body.append([lab, min(t.n(n), t.n(base))] + cells)
    head = ["vs baseline", "n"] + [f"{c[1]} ({c[2]}{', rel., margin ' + str(c[3]) if c[4] else ''})" for c in checks]
    return (
        ["Paired difference from the baseline (mean [95% interval]) and verdict:", ""]
        + harness.table(head, body)
        + [""]
    )


def reg_summary(tally) -> list[str]:
    """The paper's four claims (and the concentration it rests on): verdicts counted over the swept cells."""
    out = ["### The paper's claims here", ""]
    wanted = [
        ("l1 off-support", "monosemanticity"),
        ("l1/l2", "monosemanticity"),
        ("l1 off-support", "no cost to reconstruction"),
        ("l1/l2", "no cost to reconstruction"),
        ("l1/l2", "robust to the inference-time k"),
        ("l1/l2", "small-budget probing"),
        ("l1/l2", "concentrates the code"),
    ]
    for reg, claim_name in wanted:
        cells = tally.get((reg, claim_name))
        if not cells:
            out.append(f"- {reg}, {claim_name}: not measured yet.")
            continue
        counts = ", ".join(f"{ABBREV[v]} {len(c)}" for v, c in sorted(cells.items()))
        out.append(f"- **{reg} — {claim_name}**: over {sum(len(c) for c in cells.values())} checks: {counts}.")
    return out + [""]


# ---- the scaffold ----------------------------------------------------------------------------------------


def scaffold(t: Table, pca: dict | None) -> list[str]:
    out = ["## The scaffold at matched L0 (k = 16)", ""]
    for arch, ranks in (("topk", (2, 8, 32)), ("batchtopk", (2, 8, 32)), ("matryoshka", (8,))):
        base = f"{arch}_n1024_k16"
        for r in ranks:
            n = f"{base}_scaffold{r}"
            out.append(
                claim(
                    t,
                    f"{arch} rank {r}: fewer dense latents than without the scaffold",
                    n,
                    base,
                    "n_dense",
                    "lower",
                    "{:+.1f}",
                )
            )
            out.append(claim(t, f"{arch} rank {r}: better k-sparse probing (k=5)", n, base, "probe.k5", "higher"))
            out.append(
                claim(t, f"{arch} rank {r}: better sae-probes AUC (k=5)", n, base, "sae_probes.mean_auc_k5", "higher")
            )
    out += ["", "### Causal test and alignment", ""]
    if pca is None:
        return out + ["- the principal-direction baseline is not computed yet.", ""]
    out += [
        f"CE with the scaffold's output removed from the spliced SAE vs CE with the same number of top principal "
        f"directions (of {pca['pc_tokens']:,} training tokens) projected out of the clean stream "
        "(x -> x - Q Q^T (x - mean)), both over clean CE on the same held-out sequences; the principal-direction "
        "figure has no seed (it does not depend on an SAE). Alignment: mean squared cosine of the principal angles "
        "between the scaffold's output subspace and the top-r principal subspace, and the mean share of the "
        f"outlier dimensions {pca['outlier_dims']} (largest mean |x|; RMS "
        f"{', '.join(f'{v:.1f}' for v in pca['outlier_rms_ratio'])}x the median dimension's) inside it; chance r/d.",
        "",
    ]
    head = [
        "scaffold",
        "n",
        "CE no scaffold / clean",
        "CE top-r PCs removed / clean",
        "PC overlap",
        "outlier overlap",
        "chance",
        "verdict: scaffold removal hurts more",
    ]
    body = []
    for arch, ranks in (("topk", (2, 8, 32)), ("batchtopk", (2, 8, 32)), ("matryoshka", (8,))):
        for r in ranks:
            n = f"{arch}_n1024_k16_scaffold{r}"
            if n not in t.by:
                continue
            rem = pca["removed"][str(r)]
            pca_ratio = rem["ce_removed"] / rem["ce_clean"]
            ratios = {s: row["ce_no_scaffold"] / row["ce_clean"] for s, row in t.by[n].items()}
            d = paired_difference(ratios, dict.fromkeys(ratios, pca_ratio))
            body.append(
                [
                    n,
                    t.n(n),
                    t_interval(ratios.values()).format("{:.2f}").rsplit(" (n=", 1)[0],
                    f"{pca_ratio:.2f}",
                    t.cell(n, "scaffold_alignment.pc_overlap"),
                    t.cell(n, "scaffold_alignment.outlier_overlap"),
                    f"{r / 128:.3f}",
                    f"{d.format('{:+.2f}').rsplit(' (n=', 1)[0]} {verdict(d, 'higher')}",
                ]
            )
    return out + harness.table(head, body) + [""]


# ---- Matryoshka and the block architectures ---------------------------------------------------------------


def matryoshka_and_blocks(t: Table, names: list[str]) -> list[str]:
    m, b = "matryoshka_n1024_k16", "batchtopk_n1024_k16"
    out = ["## Matryoshka, block-sparse SAEs and every architecture", ""]
    out.append(claim(t, "Matryoshka absorbs less than BatchTopK (same L0)", m, b, "absorption", "lower"))
    out.append(claim(t, "Matryoshka probes better than BatchTopK (k-sparse probe, k=1)", m, b, "probe.k1", "higher"))
    out.append(
        claim(
            t, "Matryoshka probes better than BatchTopK (sae-probes AUC, k=1)", m, b, "sae_probes.mean_auc_k1", "higher"
        )
    )
    out.append(claim(t, "Matryoshka costs a little FVU vs BatchTopK", m, b, "fvu", "higher"))
    for blk in ("block_topk_n1024_b2x6", "block_topk_n1020_b3x4", "block_topk_n1024_b4x3"):
        out.append(
            claim(
                t,
                f"{blk} describes the data in fewer bits than Top-k k=12",
                blk,
                "topk_n1024_k12",
                "bits",
                "lower",
                "{:+.1f}",
            )
        )
    fvus = []
    for n in names:
        vals = t.values(n, "fvu")
        if vals:
            iv = t_interval(vals.values())
            v = (
                "shown"
                if iv.n >= 2 and iv.hi < 0.2
                else "not shown"
                if iv.n >= 2 and iv.lo > 0.2
                else "not distinguishable at this n"
            )
            fvus.append((n, iv, v))
    if fvus:
        worst = max(fvus, key=lambda f: f[1].mean)
        counts = defaultdict(int)
        for _, _, v in fvus:
            counts[v] += 1
        out.append(
            f"- FVU < 0.2 for every configuration: {', '.join(f'{v} {c}' for v, c in counts.items())} of {len(fvus)} "
            f"(worst {worst[0]} at {worst[1].format()})."
        )
    return out + [""]
