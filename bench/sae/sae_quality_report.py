"""bench/results/sae_quality.md from the stored rows of bench/sae/sae_quality.py: figures over seeds, claims' verdicts.

Every figure is the mean over the seeds a configuration has, with its 95% t-interval (workbench.intervals);
every claim compares configurations run with the same seeds and reads its verdict from the interval of
the paired per-seed differences. The closing section gathers each paper's claims with their verdicts.
"""

from __future__ import annotations

import datetime
import re
from collections import defaultdict

import harness

from workbench.intervals import NOT_SHOWN, SHOWN, UNDECIDED, Interval, paired_difference, t_interval, verdict

NONINFERIORITY = 0.05  # "no cost to reconstruction": FVU at most 5% (relative) above the baseline's
CE_MARGIN = 0.005  # ... and CE recovered at most 0.005 below it
REG_COEFS = {"reg_l1_off": (0.01, 0.1), "reg_l1_l2": (0.03, 0.3)}  # bench/sae/sae_quality.py's REG_SWEEP
REG_LABEL = {"reg_l1_off": "l1 off-support", "reg_l1_l2": "l1/l2"}
SHORT = {SHOWN: "shown", NOT_SHOWN: "NOT shown", UNDECIDED: "n.d."}


def config_name(sae: str) -> str:
    return re.sub(r"_seed\d+$", "", sae)


def get(row: dict, path: str):
    """row['a']['b'] for path 'a.b' (None when missing)."""
    v = row
    for part in path.split("."):
        if not isinstance(v, dict) or part not in v:
            return None
        v = v[part]
    return v


def derive(row: dict) -> dict:
    """The row with figures computed from stored ones: the number of monosemantic latents (share x scored), which
    a share alone hides when latents die (the share's denominator shrinks)."""
    m = row.get("mono")
    if m and m.get("share_monosemantic") is not None:
        row = {**row, "mono": {**m, "n_monosemantic": m["share_monosemantic"] * m["n_scored"]}}
    return row


def bare(iv: Interval, fmt: str) -> str:
    """'mean [lo, hi]' without the n (tables give n in a column)."""
    return iv.format(fmt).rsplit(" (n=", 1)[0]


class Table:
    """The rows grouped by configuration (per configuration: seed -> row), and the verdicts drawn from them."""

    def __init__(self, rows: list[dict]):
        self.by = defaultdict(dict)
        for r in rows:
            self.by[config_name(r["sae"])][int(r["sae"].rsplit("seed", 1)[1])] = derive(r)
        self.verdicts = defaultdict(list)  # (paper, claim) -> [(what, verdict)]

    def values(self, name: str, path: str) -> dict[int, float]:
        return {s: v for s, r in self.by.get(name, {}).items() if (v := get(r, path)) is not None}

    def cell(self, name: str, path: str, fmt: str = "{:.3f}") -> str:
        vals = self.values(name, path)
        return bare(t_interval(vals.values()), fmt) if vals else "–"

    def n(self, name: str) -> int:
        return len(self.by.get(name, {}))

    def diff(self, a: str, b: str, path: str, relative: bool = False) -> Interval | None:
        """Interval of a - b over the common seeds (relative: (a - b) / b), or None."""
        va, vb = self.values(a, path), self.values(b, path)
        if relative:
            va = {s: (va[s] - vb[s]) / vb[s] for s in va if s in vb and vb[s]}
            vb = dict.fromkeys(va, 0.0)
        return paired_difference(va, vb) if set(va) & set(vb) else None

    def check(self, key: tuple[str, str], what: str, d: Interval | None, direction: str, margin=0.0) -> str | None:
        """The verdict on one check, recorded under (paper, claim) for the closing section."""
        if d is None:
            return None
        v = verdict(d, direction, margin)
        self.verdicts[key].append((what, v))
        return v

    def claim(self, key, text: str, a: str, b: str, path: str, direction: str, fmt="{:+.3f}", margin=0.0, rel=False):
        """One claim line: '- text: difference mean [lo, hi] (n) -> verdict'."""
        d = self.diff(a, b, path, rel)
        v = self.check(key, text, d, direction, margin)
        if v is None:
            return f"- {text}: not measured yet ({a}: n={self.n(a)}, {b}: n={self.n(b)})."
        return f"- {text}: {'relative difference' if rel else 'difference'} {d.format(fmt)} -> **{v}**."


MAIN_COLUMNS = [
    ("FVU", "fvu", "{:.3f}"),
    ("L0", "l0", "{:.1f}"),
    ("dense", "n_dense", "{:.1f}"),
    ("dead", "n_dead", "{:.0f}"),
    ("bits/token", "bits", "{:.0f}"),
    ("CE recovered", "ce_rec", "{:.4f}"),
    ("absorption", "absorption", "{:.3f}"),
    ("k-sparse probe k=1 / k=5", "probe.k1|probe.k5", "{:.3f}"),
    ("sae-probes AUC k=1 / k=5", "sae_probes.mean_auc_k1|sae_probes.mean_auc_k5", "{:.3f}"),
]


def main_table(t: Table, names: list[str]) -> list[str]:
    def cells(n, paths, fmt):
        return " / ".join(t.cell(n, p, fmt) for p in paths.split("|"))

    body = [[n, t.n(n)] + [cells(n, p, f) for _, p, f in MAIN_COLUMNS] for n in names]
    return harness.table(["SAE", "n"] + [c[0] for c in MAIN_COLUMNS], body)


def header(rows: list[dict], planned: list[str], args: dict) -> list[str]:
    commits = sorted({r.get("commit", "?") for r in rows})
    done = {r["sae"] for r in rows}
    missing = len([p for p in planned if p not in done])
    tr, ev = sum(r.get("train_s", 0) for r in rows), sum(r.get("eval_s", 0) for r in rows)
    return [
        "# SAE quality on the embedded model: the papers' claims with intervals over seeds",
        "",
        f"- Commit: {', '.join(commits)} (the code the rows were measured at; each row records its own; up to "
        "fd7eea9 the commits differ only in the bench's job order, tests, this rendering and refactors of "
        "workbench/sae that leave training and the metrics as they were: config checks, one probe-class rule)",
        f"- Rendered {datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds')} from the stored rows; "
        "command: `OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python bench/sae/sae_quality.py` (resumable: a rerun does only "
        f"the missing work; one core of a shared 2-core machine: {len(rows)} SAEs took {tr / 60:.0f} min training "
        f"+ {ev / 60:.0f} min evaluation)",
        f"- Progress: {len(done & set(planned))} of {len(planned)} planned (configuration, seed) runs"
        + (
            f"; {missing} still missing, run in priority order (the column n gives each row's seeds)" if missing else ""
        ),
        f"- Data: `blocks.2.hook_resid_post` of the embedded model over the synthetic corpus, "
        f"{args['cache_tokens']:,} cached tokens (5% held out). Every SAE trains on the same {args['n_tokens']:,} "
        f"tokens (batch {args['batch_size']}, Adam lr {args['lr']}, 50 warm-up steps, linear decay over the last "
        "20%; the earlier one-seed table used 2,000,000; fewer here to fit three seeds); seed s sets both the "
        "initialisation and the data order, the same seeds for every configuration, so claims compare paired runs.",
        f"- Evaluation on {args['eval_tokens']:,} held-out tokens (probes fitted on even held-out sequences, tested "
        f"on odd ones); CE with the SAE spliced in on {args['n_sequences']} held-out sequences; dense = fires on "
        "more than 10% of tokens; bits/token = the MDL description length (docs/methods.md §5).",
        "- Cells: mean over seeds [95% t-interval over seeds]; one seed shows its value alone. Verdicts come from "
        "the interval of the paired per-seed differences: **shown** (on the claimed side of the margin), "
        "**NOT shown** (on the other side), **n.d.** = not distinguishable at this n (it straddles the margin, "
        "or n < 2).",
        "- Probing protocols, both one vs rest per class of the task and role labels, averaged over classes, then "
        "label kinds: *k-sparse probe* = the workbench's (k latents by class-mean difference, standardised, L2 "
        "logistic regression, fixed lambda 1e-3, class-weighted; balanced accuracy over all test tokens); "
        "*sae-probes* = the sae-probes suite's (k latents by class-mean difference, raw values, L2 logistic "
        "regression with C from logspace(5, -5, 10) by validation AUC, refitted; test AUC on balanced samples of "
        "1024 train / 1024 test tokens).",
        "",
    ]


def render(rows: list[dict], pca: dict | None, planned: list[str], args: dict) -> str:
    t = Table(rows)
    names = [n for n in dict.fromkeys(config_name(p) for p in planned) if n in t.by]
    lines = header(rows, planned, args) + ["## Every configuration", ""] + main_table(t, names) + [""]
    lines += topk_regularisers(t)
    lines += scaffold(t, pca)
    lines += matryoshka_and_blocks(t, names)
    lines += closing(t)
    return "\n".join(lines) + "\n"


# ---- the Top-k regularisers ----------------------------------------------------------------------------

TOPK_REG = "Top-k regularisers"


def reg_names(arch: str, k: int) -> list[tuple[str, str, str | None]]:
    """(label, configuration name, regulariser field or None) of the baseline and each swept coefficient."""
    base = f"{arch}_n1024_k{k}"
    out = [("0 (baseline)", base, None)]
    for field, cs in REG_COEFS.items():
        for c in cs:
            off, ratio = (c, 0) if field == "reg_l1_off" else (0, c)
            out.append((f"{REG_LABEL[field]} {c:g}", f"{base}_reg{off:g}_{ratio:g}", field))
    return out


def reg_columns(k: int) -> list[tuple[str, str, str]]:
    small = (max(1, k // 4), k // 2, 2 * k)
    return [
        ("monosemantic share", "mono.share_monosemantic", "{:.3f}"),
        ("mean best precision", "mono.mean_best_precision", "{:.3f}"),
        ("scored latents", "mono.n_scored", "{:.0f}"),
        ("monosemantic latents", "mono.n_monosemantic", "{:.0f}"),
        ("dead", "n_dead", "{:.0f}"),
        ("FVU", "fvu", "{:.4f}"),
        ("CE recovered", "ce_rec", "{:.4f}"),
        *[(f"FVU at k'={kk}", f"fvu_at_k.{kk}", "{:.3f}") for kk in small],
        *[(f"k-sparse probe k={p}", f"probe.k{p}", "{:.3f}") for p in (1, 2, 5)],
        *[(f"sae-probes AUC k={p}", f"sae_probes.mean_auc_k{p}", "{:.3f}") for p in (1, 2, 5)],
        ("effective latents / token", "effective.per_token", "{:.2f}"),
        ("effective latents (dictionary)", "effective.dictionary", "{:.0f}"),
    ]


def reg_checks(k: int) -> list[tuple[str, str, str, str, float, bool]]:
    """(paper claim, column label, path, direction, margin, relative) of each check against the baseline."""
    labels = {p: lab for lab, p, _ in reg_columns(k)}
    checks = [
        ("more monosemantic", "mono.share_monosemantic", "higher", 0.0, False),
        ("more monosemantic", "mono.mean_best_precision", "higher", 0.0, False),
        ("more monosemantic latents in number (not only in share)", "mono.n_monosemantic", "higher", 0.0, False),
        ("no cost to reconstruction", "fvu", "lower", NONINFERIORITY, True),
        ("no cost to reconstruction", "ce_rec", "higher", CE_MARGIN, False),
        *[
            ("robust to the inference-time k", f"fvu_at_k.{kk}", "lower", 0.0, False)
            for kk in (max(1, k // 4), k // 2, 2 * k)
        ],
        *[("better small-budget probing", f"probe.k{p}", "higher", 0.0, False) for p in (1, 2, 5)],
        *[("better small-budget probing", f"sae_probes.mean_auc_k{p}", "higher", 0.0, False) for p in (1, 2, 5)],
        ("fewer effective latents per token", "effective.per_token", "lower", 0.0, False),
    ]
    return [(c, labels[p], p, d, m, r) for c, p, d, m, r in checks]


def topk_regularisers(t: Table) -> list[str]:
    chance = next((get(r, "mono.chance") for rs in t.by.values() for r in rs.values()), None)
    out = [
        "## The Top-k regularisers at matched L0 (k = 16 and 32)",
        "",
        "Each coefficient alone, swept from 0 (the baseline), on Top-k and BatchTopK. *Monosemantic share*: of the "
        "latents firing on at least 20 held-out tokens (*scored latents*), the share whose best label has precision "
        "P(label | fires) >= 0.8, over every class of the task, role and (role, entity) labels; *mean best "
        f"precision* over the same latents; *monosemantic latents* = share x scored latents, the count a share hides "
        f"when latents die (a latent firing at random scores {chance or 0:.3f}, the largest class "
        "share). *FVU at k'*: the trained SAE run with each token keeping its k' largest ReLU pre-activations "
        "(BatchTopK too). *Effective latents*: exp of the entropy of a token's activation mass over latents (mean "
        "over tokens), and of the total mass over the dictionary (docs/methods.md §5). Verdict checks: "
        f"monosemanticity higher; FVU at most {NONINFERIORITY:.0%} above the baseline's (relative) and CE recovered at "
        f"most {CE_MARGIN} below it; FVU at each k' lower; probing higher; effective latents per token lower.",
        "",
    ]
    for arch in ("topk", "batchtopk"):
        for k in (16, 32):
            names = reg_names(arch, k)
            if any(n in t.by for _, n, _ in names):
                out += reg_section(t, arch, k, names)
    return out


def reg_section(t: Table, arch: str, k: int, names) -> list[str]:
    cols, checks = reg_columns(k), reg_checks(k)
    out = [f"### {arch}, k = {k}", ""]
    body = [[lab, t.n(n)] + [t.cell(n, p, f) for _, p, f in cols] for lab, n, _ in names]
    out += harness.table(["coefficient", "n"] + [c[0] for c in cols], body) + [
        "",
        "Paired difference from the baseline and verdict:",
        "",
    ]
    base = names[0][1]
    body = []
    for lab, n, field in names[1:]:
        if n not in t.by:
            continue
        cells = []
        for claim_name, col, path, direction, margin, rel in checks:
            d = t.diff(n, base, path, rel)
            v = t.check(
                (f"{TOPK_REG}: {REG_LABEL[field]}", claim_name), f"{arch} k={k} {lab}: {col}", d, direction, margin
            )
            cells.append("–" if v is None else f"{bare(d, '{:+.3f}')} {SHORT[v]}")
        body.append([lab, min(t.n(n), t.n(base))] + cells)
    head = ["vs baseline", "n"] + [f"{c[1]}{' (relative)' if c[5] else ''}" for c in checks]
    return out + harness.table(head, body) + [""]


# ---- the scaffold ----------------------------------------------------------------------------------------

SCAFFOLD = "Scaffold"
SCAFFOLDS = (("topk", (2, 8, 32)), ("batchtopk", (2, 8, 32)), ("matryoshka", (8,)))


def scaffold(t: Table, pca: dict | None) -> list[str]:
    out = ["## The scaffold at matched L0 (k = 16)", ""]
    head = [
        "scaffold",
        "n",
        "dense latents: with - without",
        "k-sparse probe k=5: with - without",
        "sae-probes AUC k=5: with - without",
    ]
    body = []
    for arch, ranks in SCAFFOLDS:
        base = f"{arch}_n1024_k16"
        for r in ranks:
            n = f"{base}_scaffold{r}"
            if n not in t.by:
                continue
            cells = []
            for claim_name, path, direction, fmt in (
                ("fewer dense latents", "n_dense", "lower", "{:+.1f}"),
                ("better sparse probing", "probe.k5", "higher", "{:+.3f}"),
                ("better sparse probing", "sae_probes.mean_auc_k5", "higher", "{:+.3f}"),
            ):
                d = t.diff(n, base, path)
                v = t.check((SCAFFOLD, claim_name), f"{arch} rank {r}: {path}", d, direction)
                cells.append("–" if v is None else f"{bare(d, fmt)} {SHORT[v]}")
            body.append([n, min(t.n(n), t.n(base))] + cells)
    out += harness.table(head, body) + [""] if body else ["- not measured yet.", ""]
    return out + scaffold_causal(t, pca)


def scaffold_causal(t: Table, pca: dict | None) -> list[str]:
    out = ["### Causal test and alignment", ""]
    if pca is None:
        return out + ["- the principal-direction baseline is not computed yet.", ""]
    out += [
        "CE with the scaffold's output removed from the spliced SAE, and CE with the same number of top principal "
        f"directions (of {pca['pc_tokens']:,} training tokens) projected out of the clean stream "
        "(x -> x - Q Q^T (x - mean)), each over clean CE on the same held-out sequences (the principal-direction "
        "figure has no seed: it involves no SAE). Alignment: the mean squared cosine of the principal angles between "
        "the scaffold's output subspace and the top-r principal subspace, and the mean share of the outlier "
        f"dimensions {pca['outlier_dims']} (largest mean |x|; RMS "
        f"{', '.join(f'{v:.1f}' for v in pca['outlier_rms_ratio'])}x the median dimension's) inside it; a random "
        "subspace scores r/d on both.",
        "",
    ]
    head = ["scaffold", "n", "CE no scaffold / clean", "CE top-r PCs removed / clean", "removal ratio: scaffold - PCs"]
    head += ["PC overlap", "outlier overlap", "r/d"]
    body = []
    for arch, ranks in SCAFFOLDS:
        for r in ranks:
            n = f"{arch}_n1024_k16_scaffold{r}"
            if n not in t.by:
                continue
            rem = pca["removed"][str(r)]
            pc_ratio = rem["ce_removed"] / rem["ce_clean"]
            ratios = {s: row["ce_no_scaffold"] / row["ce_clean"] for s, row in t.by[n].items()}
            d = paired_difference(ratios, dict.fromkeys(ratios, pc_ratio))
            v = t.check(
                (SCAFFOLD, "removing it hurts more than removing as many top PCs"), f"{arch} rank {r}", d, "higher"
            )
            chance = r / 128
            for path, what in (("pc_overlap", "top principal components"), ("outlier_overlap", "outlier dimensions")):
                vals = t.values(n, f"scaffold_alignment.{path}")
                dd = paired_difference(vals, dict.fromkeys(vals, chance)) if vals else None
                t.check((SCAFFOLD, f"aligned with the {what} (above chance r/d)"), f"{arch} rank {r}", dd, "higher")
            body.append(
                [
                    n,
                    t.n(n),
                    bare(t_interval(ratios.values()), "{:.2f}"),
                    f"{pc_ratio:.2f}",
                    f"{bare(d, '{:+.2f}')} {SHORT[v]}",
                ]
                + [
                    t.cell(n, "scaffold_alignment.pc_overlap"),
                    t.cell(n, "scaffold_alignment.outlier_overlap"),
                    f"{chance:.3f}",
                ]
            )
    return out + harness.table(head, body) + [""]


# ---- Matryoshka and the block architectures ---------------------------------------------------------------


def matryoshka_and_blocks(t: Table, names: list[str]) -> list[str]:
    m, b, mk = "matryoshka_n1024_k16", "batchtopk_n1024_k16", "Matryoshka"
    out = ["## Matryoshka, block-sparse SAEs and every architecture", ""]
    out.append(
        t.claim((mk, "less absorption"), "Matryoshka absorbs less than BatchTopK (same k)", m, b, "absorption", "lower")
    )
    for path, what in (("probe.k1", "k-sparse probe, k=1"), ("sae_probes.mean_auc_k1", "sae-probes AUC, k=1")):
        out.append(
            t.claim(
                (mk, "better sparse probing"), f"Matryoshka probes better than BatchTopK ({what})", m, b, path, "higher"
            )
        )
    out.append(t.claim((mk, "a small cost in FVU"), "Matryoshka's FVU above BatchTopK's", m, b, "fvu", "higher"))
    for blk in ("block_topk_n1024_b2x6", "block_topk_n1020_b3x4", "block_topk_n1024_b4x3"):
        out.append(
            t.claim(
                ("Block-sparse", "fewer bits than Top-k at equal active dimensions"),
                f"{blk} needs fewer bits/token than Top-k k=12",
                blk,
                "topk_n1024_k12",
                "bits",
                "lower",
                "{:+.1f}",
            )
        )
    for n in names:
        vals = t.values(n, "fvu")
        if vals:
            t.check(("Every architecture", "FVU < 0.2"), n, paired_difference(vals, dict.fromkeys(vals, 0.2)), "lower")
    return out + [""]


# ---- closing -----------------------------------------------------------------------------------------------


UNIVERSAL = {("Every architecture", "FVU < 0.2")}  # claims about every case: one undecided case leaves them open


def summary(verdicts: list[tuple[str, str]], universal: bool = False) -> str:
    """One verdict for a claim checked several ways: shown when some check shows it and none shows the opposite;
    not shown in the mirror case; mixed when checks disagree; not distinguishable when none decides. A universal
    claim is shown only when every check shows it, and not shown when any check shows the opposite."""
    got = {v for _, v in verdicts}
    if universal:
        return NOT_SHOWN if NOT_SHOWN in got else SHOWN if got == {SHOWN} else UNDECIDED
    if SHOWN in got and NOT_SHOWN in got:
        return "mixed"
    return SHOWN if SHOWN in got else NOT_SHOWN if NOT_SHOWN in got else UNDECIDED


def closing(t: Table) -> list[str]:
    out = [
        "## Each paper's claims here",
        "",
        "A claim checked several ways (architectures, k, coefficients, metrics) is **shown** when at least one check "
        "shows it and none shows the opposite, **not shown** in the mirror case, **mixed** when checks disagree, and "
        "**not distinguishable at this n** when none decides. The checks that decided are named. Each check is its own "
        "95% interval, with no correction for their number: among many checks of a claim a few may decide by chance, "
        "so a claim that rests on one decided check of many is weak. A claim about every case (every architecture) "
        "is shown only when every check shows it.",
        "",
    ]
    for (paper, claim_name), vs in t.verdicts.items():
        counts = defaultdict(list)
        for what, v in vs:
            counts[v].append(what)
        parts = [f"{SHORT[v]} {len(counts[v])}" for v in (SHOWN, NOT_SHOWN, UNDECIDED) if counts[v]]
        named = "; ".join(f"{SHORT[v]}: {', '.join(counts[v])}" for v in (SHOWN, NOT_SHOWN) if counts[v])
        out.append(
            f"- **{paper} — {claim_name}: {summary(vs, (paper, claim_name) in UNIVERSAL)}** ({', '.join(parts)} of {len(vs)} checks){'. ' + named if named else ''}."
        )
    return out + [""]
