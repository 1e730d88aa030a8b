"""The induction mechanism of the base and the sparse model as single-key patterns (issue #21's last bullet).

Finds the previous-token and induction heads of both models by detect_head scores on repeated random
words and writes, per head, the share of its repeated-half rows with exactly one open key and where
that key points (workbench.attention.mechanism), as a marked section of bench/results/attention_sparsify.md
(the rest of the file is kept) and the full result as JSON beside it.

    .venv/bin/python bench/attention/attention_mechanism.py [--base tiny --sparse tiny-sparse --sequences 20] --threads 1
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

OUT = harness.BENCH / "results" / "attention_sparsify.md"
BEGIN, END = (
    "<!-- induction-mechanism: written by bench/attention/attention_mechanism.py -->",
    "<!-- end induction-mechanism -->",
)


def section(res: dict, info: dict, threads: str, base: str, sparse: str) -> list[str]:
    from workbench.attention.mechanism import format_mechanism

    c, heads = res["config"], res["heads"]
    return [
        BEGIN,
        "## Induction mechanism as single-key patterns (repeated random words)",
        "",
        *harness.machine_lines(info, {}, threads, "no timing here: figures are shares of attention rows"),
        "",
        f"Base `{base}` ({res['base_model']}) vs sparse `{sparse}` ({res['sparse_model']}), "
        f"`bench/attention/attention_mechanism.py --sequences {c['sequences']}`. {c['sequences']} sequences of BOS + "
        f"{(res['ctx_len'] - 1) // 2} uniformly random vocabulary words + the same words again (the model card's "
        f"detect_head sequences, T = {res['ctx_len']}, seed {c['seed']}). Heads: detect_head score at least "
        f"{c['relative_threshold']} x the top score of its kind in either model: previous-token "
        f"{', '.join(heads['previous_token_head'])}; induction {', '.join(heads['induction_head'])}.",
        "",
        "Rows: the queries of the repeated half (q = half + 1 .. 2 half). Previous = key q - 1; induction "
        "target = q - half + 1 (the token after the same word in the first copy). 'That key on' is over the "
        "rows with exactly one open key; 'largest weight on' over the rows that write anything. The base "
        "model has no gates: every causal key of a row is open, so it has no single-key rows.",
        "",
        *format_mechanism(res),
        "",
        END,
    ]


def splice(text: str, lines: list[str]) -> str:
    """text with its marked section replaced by lines (appended when it has none)."""
    new = "\n".join(lines)
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        return head + new + rest.split(END, 1)[1]
    return text.rstrip("\n") + "\n\n" + new + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="tiny", help="base model spec (default: %(default)s)")
    ap.add_argument("--sparse", default="tiny-sparse", help="sparse model spec (default: %(default)s)")
    ap.add_argument("--sequences", type=int, default=20, help="repeated random sequences (default: %(default)s)")
    ap.add_argument("--json", type=Path, help="full result (default: results/attention/mechanism.json beside --out)")
    harness.add_common_args(ap, OUT, threads=1)
    a = ap.parse_args()
    threads = harness.set_threads(a.threads)
    info = harness.machine_info()
    from workbench.attention.mechanism import MechanismConfig, induction_mechanism
    from workbench.models import load

    base, sparse = (load(spec, device="cpu")[0] for spec in (a.base, a.sparse))
    res = induction_mechanism(base, sparse, MechanismConfig(sequences=a.sequences))
    out_json = a.json or a.out.parent / "attention" / "mechanism.json"
    harness.write_text(out_json, json.dumps({**res, "commit": info["commit"]}, indent=1))
    old = a.out.read_text() if a.out.is_file() else ""
    harness.write_text(a.out, splice(old, section(res, info, threads, a.base, a.sparse)))
    print(f"wrote {a.out} and {out_json}")


if __name__ == "__main__":
    main()
