"""The explanations saved in a feature store (by workbench.features.explain_run), read without torch: one latent's
line, the feature page's headline, and search by explanation."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from workbench.errors import BadValueError
from workbench.features.explain import LLM_MARK, TEMPLATE_MARK
from workbench.features.store import MANIFEST, FeatureStore
from workbench.readback import json_file, reading, verify_checksum

FOLDER = "explanations"
FORMAT = "workbench-explanations/1"
LINES = "explanations.jsonl"
SHORT_CHARS = 40  # a short form fits a graph node's label (app.graph_view.layout.LABEL_CHARS), its mark included


def load_explanations(store: FeatureStore) -> tuple[dict, dict[int, dict]] | None:
    """(manifest, {latent: line}) of the store's explanations, checked against the manifest; None when it has none."""
    folder = store.path / FOLDER
    if not (folder / MANIFEST).is_file():
        return None
    way_out = "make them again with `workbench features explain --overwrite`"
    manifest = json_file(folder / MANIFEST, "explanations manifest", way_out)
    if manifest.get("format") != FORMAT:
        raise BadValueError(f"{folder / MANIFEST} has format {manifest.get('format')!r}, not {FORMAT!r}; {way_out}")
    path = folder / LINES
    verify_checksum(path, manifest["files"].get(LINES), "explanations", way_out, folder / MANIFEST)
    with reading(path, "explanations", way_out):
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return manifest, {int(x["latent"]): x for x in lines}


def _said(scores: dict) -> str:
    """The scores as a headline says them (those a latent has)."""
    parts = []
    for scorer, key, name in (
        ("detection", "auc", "detection AUC"),
        ("detection", "balanced_accuracy", "detection balanced accuracy"),
        ("fuzz", "token_accuracy", "fuzzing token accuracy"),
        ("intervention", "percentile", "steering percentile of its promoted tokens"),
    ):
        v = (scores.get(scorer) or {}).get(key)
        if v is not None:
            parts.append(f"{name} {v:.2f}")
    return ", ".join(parts) or "not scored (it never fired in the pass)"


def headline(store: FeatureStore, u: int) -> str | None:
    """One latent's explanation and its scores as the feature page shows them; None when the store has none."""
    got = _loaded(store.path, (store.path / FOLDER / MANIFEST).stat().st_mtime_ns) if has_explanations(store) else None
    line = got[1].get(int(u)) if got else None
    if line is None:
        return None
    who = "template text, not a model's words" if line["explainer"] == "template" else "a language model's words"
    return f"explanation ({who}): {line['explanation']} · {_said(line['scores'])}"


def summary(store: FeatureStore) -> dict:
    """What a record or a log says of a store's explanations: explainer, latents, scorers, mean detection AUC."""
    manifest, lines = load_explanations(store)
    auc = [v for x in lines.values() if (v := (x["scores"].get("detection") or {}).get("auc")) is not None]
    said = {"explainer": manifest["explainer"], "latents": len(lines), "scorers": manifest["scorers"]}
    return {**said, "mean_detection_auc": round(sum(auc) / len(auc), 4) if auc else None, "scored": len(auc)}


def has_explanations(store: FeatureStore) -> bool:
    """Whether a run of `workbench features explain` finished on the store (its manifest is written last)."""
    return (store.path / FOLDER / MANIFEST).is_file()


@lru_cache(maxsize=8)
def _loaded(path: Path, stamp: int):
    """load_explanations, kept while the explanations' manifest is unchanged (the feature page reads it per rerun)."""
    return load_explanations(FeatureStore(path))


def short_form(text: str, width: int = SHORT_CHARS) -> str:
    """An explanation cut to what a graph node's label can hold, still marked: a template sentence's what it fires on
    (no shares, no promoted tokens), e.g. `[template] task 'ioi' and role 'name'`; a model's phrase as written."""
    if text.startswith(LLM_MARK):  # a model's phrase: kept as written, marked as a model's
        mark, body = LLM_MARK, text.removeprefix(LLM_MARK).strip()
    else:
        body = text.removeprefix(TEMPLATE_MARK).split("; promotes")[0].split("; suppresses")[0].strip()
        mark, body = (
            TEMPLATE_MARK,
            re.sub(r" \(\d+%\)", "", body.removeprefix("fires on ").removesuffix(" of its top examples")),
        )
    out = f"{mark} {body}"
    return out if len(out) <= width else out[: width - 1].rstrip() + "…"


def short_labels(store: FeatureStore) -> dict[int, str]:
    """latent -> the short form of its explanation; empty when the store has none."""
    got = _loaded(store.path, (store.path / FOLDER / MANIFEST).stat().st_mtime_ns) if has_explanations(store) else None
    return {u: short_form(x["explanation"]) for u, x in got[1].items()} if got else {}


def search(store: FeatureStore, text: str, top: int = 20) -> list[dict]:
    """Latents whose explanation contains every word of `text` (case-folded), best detection AUC first."""
    words = text.casefold().split()
    if not words:
        raise BadValueError("type some words to search the explanations for")
    got = load_explanations(store)
    if got is None:
        raise BadValueError(
            f"the feature store at {store.path} has no explanations; make them with `workbench features explain`"
        )
    hits = []
    for u, x in got[1].items():
        body = x["explanation"].removeprefix(TEMPLATE_MARK).removeprefix(LLM_MARK).casefold()
        if all(w in body for w in words):
            det = (x["scores"].get("detection") or {}).get("auc")
            hits.append({"latent": u, "explanation": x["explanation"], "auc": det})
    return sorted(hits, key=lambda h: -(h["auc"] if h["auc"] is not None else -1))[:top]
