"""Does the feature page's steering show? The KL at the last position of steering x8 on the page's old default prompt
(the top example's window tokens joined by spaces) and its new one (the window's token ids decoded by the
tokenizer), and the page's new sweep (multiples of the unit's largest activation), for a few units of an SAE.

    OMP_NUM_THREADS=1 .venv/bin/python bench/circuits/steer_prompt.py --sae SAE_DIR [--units 0,3,6,...] [--model tiny]

Writes bench/results/steer_prompt.md (and the raw rows beside it as JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

MULTIPLES = (1, 2, 4, 8, 16, 32)  # app/steer.py's SWEEP without its 0


def prompts(store, tok, u: int) -> tuple[str, str] | None:
    """(old, new) default prompts of unit u's feature page: window strings joined, window ids decoded."""
    top = next((e for e in store.unit(u)["examples"] if e["group"] == "top"), None)
    if top is None:
        return None
    ids = top["ids"][: top["center"] + 1]
    while ids and ids[0] == tok.bos_token_id:
        ids = ids[1:]
    return " ".join(top["tokens"][: top["center"] + 1]), tok.decode(ids)


def measure(model, sites, store, u: int) -> dict | None:
    from workbench.interventions import InterventionConfig, intervene

    both = prompts(store, model.tokenizer, u)
    if both is None:
        return None
    peak = float(store.units["max"].iat[u])
    row = {"unit": u, "max": peak, "same_text": both[0] == both[1]}
    for name, p in zip(("old", "new"), both):
        cfg = InterventionConfig(
            features=[str(u)], op="steer", value=[8.0], strengths=[m * peak for m in MULTIPLES], continue_tokens=0
        )
        r = intervene(model, sites, p, cfg)
        last = r["positions"][-1]
        row[name] = {
            "tokens": len(r["tokens"]),
            "kl8": last["kl"],
            "clean_top_p": max(x["clean_prob"] for x in last["top"]),
            "sweep_kl": [s["kl"] for s in r["sweep"]["rows"]],
        }
    return row


def report(rows: list[dict], info: dict, sae: str) -> str:
    lines = ["# Feature-page steering: the default prompt and the sweep", ""]
    lines += harness.machine_lines(info, {}, "1", "no timings here")
    lines += [
        "",
        f"SAE {sae}, the embedded model. Per unit: KL(clean || steered) of the next token at the prompt's last "
        "position, steering x8 (value 8: the app's default strength) on the feature page's old default prompt (the "
        "top example's window strings joined by spaces) and its new one (the window's token ids decoded by the "
        "model's tokenizer, ending at the firing token); the clean run's top next-token probability; and the new "
        "sweep's KL at multiples of the unit's largest activation in the store (new prompt).",
        "",
        "| unit | max act | same text | KL x8 old | KL x8 new | clean top p old | clean top p new | "
        + " | ".join(f"KL {m}x max" for m in MULTIPLES)
        + " |",
        "|" + "---|" * (7 + len(MULTIPLES)),
    ]
    for r in rows:
        o, n = r["old"], r["new"]
        lines.append(
            f"| {r['unit']} | {r['max']:.3g} | {'yes' if r['same_text'] else 'no'} | {o['kl8']:.4f} | {n['kl8']:.4f} "
            f"| {o['clean_top_p']:.3f} | {n['clean_top_p']:.3f} | "
            + " | ".join(f"{k:.3f}" for k in n["sweep_kl"])
            + " |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sae", required=True, help="an SAE folder of the embedded model with a feature store")
    ap.add_argument("--units", default="0,3,6,9,12,15,18,21,24,27,30,33", help="units measured (comma separated)")
    harness.add_common_args(ap, harness.BENCH / "results" / "steer_prompt.md", threads=1)
    args = ap.parse_args()
    harness.set_threads(args.threads)
    from workbench.features.store import FeatureStore
    from workbench.interventions import load_dictionary
    from workbench.models import load

    model, _ = load("tiny", device="cpu")
    sites, store = load_dictionary(args.sae, model), FeatureStore(Path(args.sae) / "features")
    rows = [r for u in args.units.split(",") if (r := measure(model, sites, store, int(u))) is not None]
    info = harness.machine_info()
    args.out.with_suffix(".json").write_text(json.dumps({"info": info, "rows": rows}, indent=1))
    harness.write_text(args.out, report(rows, info, Path(args.sae).name))
    print(args.out.read_text())


if __name__ == "__main__":
    main()
