"""A batch of interventions streamed to disk (`workbench intervene --prompts`): one JSON line per prompt in
results.jsonl, written and synced as each prompt finishes, so memory holds one prompt's work whatever the batch's
size, and a stopped run resumes after its last complete line (`--resume`). batch.json, written first, names what
the lines are results of (config, dictionary, model, the prompts' hash); a resume with anything else is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path

from workbench.atomic import jsonable, write_json
from workbench.circuits.inputs import QueryError, tokens_of
from workbench.errors import BadValueError, DamagedFileError
from workbench.interventions.engine import Intervention

RESULTS = "results.jsonl"
KEY = "batch.json"
IDS = ("model", "dictionary_id")  # the key's content ids, named in full when a resume differs
SCHEMA = ("workbench.intervention_stream", 1)  # result.json of a streamed batch: its lines are in RESULTS


def prompts_sha256(prompts) -> str:
    """The hash of a batch's prompts (with their counterfactuals): what a resumed run must be given again."""
    h = hashlib.sha256()
    for p in prompts:
        h.update(json.dumps(p if isinstance(p, (tuple, list)) else [p, None]).encode() + b"\n")
    return h.hexdigest()


def _done(path: Path) -> tuple[int, float, dict | None]:
    """(complete lines, their KL sum at the last position, the first line's result) of a stopped run's results;
    a trailing line cut off mid-write is dropped (the file truncated after the last complete one)."""
    n, kl, first, good = 0, 0.0, None, 0
    with open(path, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                break
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                raise DamagedFileError(f"{path}:{n + 1} is not a JSON line; delete the folder to start over") from None
            n, kl, good = n + 1, kl + r["positions"][-1]["kl"], good + len(line)
            first = first or r
    os.truncate(path, good)
    return n, kl, first


def _start(folder: Path, key: dict, resume: bool) -> tuple[int, float, dict | None]:
    """Where the batch starts: after a stopped run's complete lines when resuming one with the same key."""
    results, saved = folder / RESULTS, folder / KEY
    if resume and saved.is_file():
        old = json.loads(saved.read_text())
        if old != key:
            diff = [k for k in sorted(key) if old.get(k) != key.get(k)]
            named = [f"{k} {old.get(k)} (this run's: {key[k]})" if k in IDS else k for k in diff]
            raise BadValueError(
                f"{folder} holds a stopped batch with another {', '.join(named)}; resume it with the same flags and "
                "prompts, or pass another --name"
            )
        if results.is_file():
            return _done(results)
    write_json(saved, key)
    results.write_bytes(b"")
    return 0, 0.0, None


def run_batch(folder, model, sites, prompts, cfg, key: dict, *, mean_source=None, resume=False, on_result=None):
    """Run the intervention on each of `prompts` (texts or (prompt, counterfactual) pairs) into folder/results.jsonl,
    one line each, synced as written; on_result(result) is called for each new one. Returns the batch record
    written to result.json by the caller: schema, config, the number of prompts, their mean KL, the first result's."""
    folder = Path(folder)
    for i, p in enumerate(prompts, 1):  # every prompt read before the first runs: a bad line 9,000 stops nothing
        prompt, cf = p if isinstance(p, (tuple, list)) else (p, None)
        try:
            tokens_of(model, prompt)
            if cf is not None:
                tokens_of(model, cf, "counterfactual")
        except QueryError as e:
            raise QueryError(f"prompt {i}: {e}") from None
    n, kl, first = _start(folder, key, resume)
    with open(folder / RESULTS, "ab") as out:
        for i, p in enumerate(prompts):
            if i < n:
                continue
            prompt, cf = p if isinstance(p, (tuple, list)) else (p, None)
            one = replace(cfg, counterfactual=cf) if cf is not None else cfg
            r = jsonable(Intervention(model, sites, prompt, one, mean_source).run())
            out.write(json.dumps(r).encode() + b"\n")
            out.flush()
            os.fsync(out.fileno())
            n, kl, first = n + 1, kl + r["positions"][-1]["kl"], first or r
            if on_result is not None:
                on_result(r)
    return {
        "schema": SCHEMA[0],
        "schema_version": SCHEMA[1],
        "config": cfg.to_dict(),
        "results": RESULTS,
        "prompts": n,
        "mean_kl": kl / n,
        "first": {"kl": first["positions"][-1]["kl"], "top": first["positions"][-1]["top"][0]["str"]},
    }


def read_results(folder):
    """The results of a recorded batch, one dict at a time (the file is never held whole)."""
    with open(Path(folder) / RESULTS, "rb") as f:
        for line in f:
            yield json.loads(line)
