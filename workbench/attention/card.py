"""The model card of an embedded sparse-attention model (data/models/tiny-sparse): how it was made, its
per-key figures and its verdict, written from the run's attention_report.json.

    embed(run_folder, data/models/tiny-sparse, command)  # copies the model files and writes README.md
    rewrite(data/models/tiny-sparse)  # after `workbench attention judge --write`: the card from the new report
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from workbench.atomic import atomic_path, atomic_write_text
from workbench.attention.report import REPORT, format_report, guard_line, interval, read_report, untouched_line
from workbench.errors import DamagedFileError, MissingInputError

FILES = ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json", REPORT, "sparsify.json")
COMPARE = "compare"  # <task>.json: the circuit claims measured on the model (bench/circuits/circuit_claims.py), read by Compare
# the base fine-tuned without gates (`attention train --control finetune`, or after the run by
# bench/attention/finetune_control.py --write), a model folder: Compare splits base - sparse with it
CONTROL_DIR = "control"


def control_files(folder: str | Path) -> tuple[str, ...]:
    """The files of the control saved beside a sparse model (none when it has none; config.json is written last)."""
    control = Path(folder) / CONTROL_DIR
    if not (control / "config.json").is_file():
        return ()
    return tuple(f"{CONTROL_DIR}/{p.name}" for p in sorted(control.iterdir()) if p.is_file())


def shipped(folder: str | Path) -> tuple[str, ...]:
    """An embedded sparse model's files: the model's, its card, its control and the comparisons shipped beside it."""
    compared = sorted((Path(folder) / COMPARE).glob("*.json"))
    return FILES + ("README.md",) + control_files(folder) + tuple(f"{COMPARE}/{p.name}" for p in compared)


def card_text(r: dict, command: str, name: str) -> str:
    """README.md of a sparse model: command, config, figures (keys per query first), verdict, accuracy."""
    v = r["verdict"]
    cfg = r["config"]
    return "\n".join(
        [
            f"# {name}: sparse attention on {r['base_model']} (run folder {r['model']!r})",
            "",
            "Made by:",
            "",
            "```",
            command,
            "```",
            "",
            f"Selected state: step {r['selected_step']} of {cfg['steps']} (chosen on held-out sequences "
            f"0-{cfg['eval_sequences'] - 1}: {r['selection']['rule']}).",
            f"Verdict on the fresh split (held-out sequences {v['split']['sequences'][0]}-{v['split']['sequences'][1] - 1}, "
            f"n = {v['n']}): CE difference {v['difference']:+.4f}, 95% interval [{v['ci95'][0]:+.4f}, "
            f"{v['ci95'][1]:+.4f}]; constraint {'met' if v['constraint_met'] else 'NOT met'} ({v['why']}).",
            *_control(r),
            *_after_the_fact(r),
            f"Open keys per query per head: {r['mean_open_keys_per_query']:.2f} ({r['open_fraction']:.2%} of "
            f"{r['edge_count']}, T = {r['ctx_len']}); rows with no open key {r['empty_row_fraction']:.2%}, with "
            f"exactly one {r['single_key_row_fraction']:.2%}.",
            *_judged(r),
            "",
            "## The report (`workbench attention report`)",
            "",
            "```",
            format_report(r),
            "```",
            "",
            "## Config",
            "",
            "```json",
            json.dumps(cfg, indent=1),
            "```",
            "",
        ]
    )


def _control(r: dict) -> list[str]:
    """The card's lines naming what the verdict compares with (runs made with `--control`; older ones: the base)."""
    if "control" not in r:
        return []
    saved = f" ({r['control_model']}, saved beside the model as {CONTROL_DIR}/)" if r.get("control_model") else ""
    lines = [f"Control: {r['control']}{saved}; the verdict compares with {r['reference']}."]
    for pair, d in r.get("against_base", {}).items():
        if pair != "split":
            lines.append(
                f"Against the frozen base, {pair}: {d['difference']:+.4f}, 95% interval [{d['ci95'][0]:+.4f}, "
                f"{d['ci95'][1]:+.4f}]."
            )
    return lines


def _after_the_fact(r: dict) -> list[str]:
    """The card's lines for a control fine-tuned after the run (bench/attention/finetune_control.py --write): what
    the gates cost against the base trained as long without them, for a model whose run had no such control."""
    c = r.get(AFTER_THE_FACT)
    if not c:
        return []
    tol = r["config"]["tolerance"]
    lines = [
        f"Against a control fine-tuned after the run ({c['steps']} steps on the run's own batches, its optimiser "
        f"settings, no gates{averaged(c.get('control_average', 0))}; the trainer held the tolerance against the frozen "
        "base only):"
    ]
    for split, d in c["splits"].items():
        first, end = d["sequences"]
        sc, cb = d["sparse - control"], d["control - base"]
        within = "within" if sc["ci95"][1] <= tol else "NOT within"
        lines.append(
            f"- {split} split (held-out sequences {first}-{end - 1}, n = {sc['n']}): CE sparse - control "
            f"{sc['difference']:+.4f}, 95% interval [{sc['ci95'][0]:+.4f}, {sc['ci95'][1]:+.4f}] ({within} the "
            f"tolerance {tol:g}); control - base {interval(cb)}."
        )
    if c.get("folder"):
        lines.append(
            f"- The control ({c['model']}) is saved beside the model as {c['folder']}/: with it `attention compare "
            "--control` splits each circuit's base - sparse into training (base - control) and the gates (control - "
            "sparse)."
        )
    return lines


def averaged(decay: float) -> str:
    """The words for a control compared through the running average of its weights (decay > 0); none otherwise."""
    return f", the running average of its weights (decay {decay:g})" if decay else ""


def _judged(r: dict) -> list[str]:
    """The card's lines for the untouched split and the accuracy guard (a report judged by `attention judge`)."""
    lines = [untouched_line(r["untouched"])] if r.get("untouched") else []
    lines += [guard_line(r["accuracy_guard"])] if r.get("accuracy_guard") else []
    return [f"{line[0].upper()}{line[1:]}." for line in lines]


JUDGE_COMMAND = "workbench attention judge DIR --write"
JUDGE_WHY = "for the untouched split and the accuracy guard"
AFTER_THE_FACT = "fine_tuned_control"  # the report's record of a control fine-tuned after the run


def made_by(text: str) -> str:
    """The made-by command block of a card written by card_text."""
    head, sep, rest = text.partition("Made by:\n\n```\n")
    command, end, _ = rest.partition("\n```\n")
    if not (sep and end):
        raise DamagedFileError("the card has no made-by block (Made by: and a ``` block); remake it with card.embed")
    return command


def rewrite(folder: str | Path, added: str = JUDGE_COMMAND, why: str = JUDGE_WHY, replaces: str = "") -> Path:
    """Rewrite a card from its folder's report, keeping its made-by command and adding the command that recorded
    the new figures (by default the judge's: the untouched split and the accuracy guard) once. replaces: the start
    of an earlier command whose figures the added one overwrote (its line and its "# then" line leave the card)."""
    out = Path(folder)
    card = out / "README.md"
    if not card.is_file():
        raise MissingInputError(f"{card} does not exist; write the card first with card.embed")
    command = made_by(card.read_text())
    if replaces:
        command = _superseded_removed(command, replaces, f"# then, {why}:", keep=added)
    if added not in command:
        command = f"{command}\n# then, {why}:\n{added}"
    atomic_write_text(card, card_text(read_report(out), command, out.name))
    return card


def _superseded_removed(command: str, start: str, then: str, keep: str) -> str:
    """The made-by block without the lines starting with `start` (other than `keep`) and the `then` line before each."""
    lines: list[str] = []
    for line in command.split("\n"):
        if line.startswith(start) and line != keep:
            if lines and lines[-1] == then:
                lines.pop()
            continue
        lines.append(line)
    return "\n".join(lines)


def copy_model(src: str | Path, dest: str | Path, names: tuple[str, ...] = FILES) -> Path:
    """Copy a sparse model's files into dest, each file atomically (a crash leaves no half-written file)."""
    src, out = Path(src), Path(dest)
    for name in names:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(out / name) as tmp:
            shutil.copyfile(src / name, tmp)
    return out


def embed(run_folder: str | Path, dest: str | Path, command: str) -> Path:
    """Copy a finished sparsify run's model into dest (an embedded model folder) with its card, and its control/
    when the run saved one."""
    r = read_report(run_folder)
    out = copy_model(run_folder, dest, FILES + control_files(run_folder))
    atomic_write_text(out / "README.md", card_text(r, command, out.name))
    return out
