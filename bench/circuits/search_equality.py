"""Whether a change to the query-circuit search keeps its results: `find_circuit` on the embedded model for held-out
IOI, induction and facts queries at budgets 2% and 10% and at target NDF 0.8, each circuit's mask hash, NDF and
exact-evaluation count written as JSON. Run it on two checkouts and compare the files:

    PYTHONPATH=OLD_CHECKOUT python bench/circuits/search_equality.py old.json
    PYTHONPATH=. python bench/circuits/search_equality.py new.json && cmp old.json new.json
"""

from __future__ import annotations

import hashlib
import json
import sys

import torch

from workbench.circuits.component.api import find_circuit
from workbench.corpus import tasks
from workbench.models import load

TASKS, QUERIES, BUDGETS, TARGET = ("ioi", "induction", "facts"), 2, (0.02, 0.1), 0.8


def fingerprint(circuit) -> list:
    """Mask hash, NDF (6 places) and exact evaluations: what must not move if the search is unchanged."""
    digest = hashlib.sha1(circuit.in_circuit.numpy().tobytes()).hexdigest()[:12]
    f = circuit.faithfulness
    return [digest, round(f["ndf"], 6), f["exact_evaluations"]]


def main(out: str) -> dict:
    torch.set_num_threads(1)
    model, _ = load("tiny", device="cpu")
    rows = {}
    for task in TASKS:
        for i, q in enumerate(tasks.queries(task, QUERIES, seed=0)):
            for budget in BUDGETS:
                rows[f"{task}{i}@{budget}"] = fingerprint(find_circuit(model, q, budget=budget, curve=False))
            rows[f"{task}{i}@ndf{TARGET}"] = fingerprint(find_circuit(model, q, target_ndf=TARGET, curve=False))
    with open(out, "w") as f:
        json.dump(rows, f, indent=1)
    return rows


if __name__ == "__main__":
    main(sys.argv[1])
