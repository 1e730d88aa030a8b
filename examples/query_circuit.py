"""Find the query circuit of one IOI prompt, look at it, and export it in the three formats.

    python examples/query_circuit.py [--model tiny] [--out-dir /tmp/query_circuit]

Runs on the embedded model (or any model spec `workbench.models.load` accepts); the tests run it
on a small saved random model.
"""

import argparse
from pathlib import Path

from workbench.circuits import Circuit, find_circuit
from workbench.circuits.component.export import from_mib, to_mib, to_neuronpedia
from workbench.corpus import tasks
from workbench.models import load


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--out-dir", default="/tmp/query_circuit")
    ap.add_argument("--budget", type=float, default=None, help="edge fraction (default: 2%%, at least one edge)")
    ap.add_argument("--min-gap", type=float, default=None, help="refuse queries whose metric gap is below this")
    args = ap.parse_args(argv)
    out = Path(args.out_dir)

    model, tokenizer = load(args.model, device="cpu")
    query = tasks.queries("ioi", 1, seed=0, tokenizer=tokenizer)[0]
    print(f"prompt: {query.prompt!r} -> {query.answer!r} (wrong {query.wrong!r})")
    print(f"counterfactual: {query.counterfactual!r}")

    # one call: attribution on the query, its paraphrases and resampled counterfactuals, best-of-N by
    # exact NDF, greedy refinement, and the NDF curve over the MIB grid
    circuit = find_circuit(model, query, budget=args.budget, min_gap=args.min_gap)
    print(circuit.summary())

    circuit.save(out / "circuit.json")
    to_mib(circuit, out / "circuit_mib.json")
    to_neuronpedia(circuit, out / "circuit_neuronpedia.json")
    again = Circuit.load(out / "circuit.json", model=model)
    assert again.edges == circuit.edges and from_mib(out / "circuit_mib.json").edges == circuit.edges
    print(f"wrote {sorted(p.name for p in out.iterdir())} to {out}")
    return circuit


if __name__ == "__main__":
    main()
