"""What measuring both readings costs (issue 45: "a 100-node check in both semantics <= 2x the live-only check"):
one attribution graph of the embedded model with about 100 kept feature nodes, checked by `check_graph` in both
semantics (frozen and live, the default) and in the live semantics only (CheckConfig both_readings off),
alternately in one process, each run's CPU time (time.process_time) taken; the ratio is the paired one.

    OMP_NUM_THREADS=1 .venv/bin/python bench/circuits/check_cost.py [--pairs 3] [--nodes 100]

The transcoders are random Top-k ones (k 8, 2x latents, decoder rows scaled x4, as the tests' fixture): what is
measured is the interventions' cost, which does not depend on what the features mean. Writes
bench/results/check_cost.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

PROMPT = "When Mary and John went to the store , John gave a drink to"


def random_set(model, root: Path) -> Path:
    """A transcoder set folder of random Top-k transcoders, one per layer (the tests' fixture's recipe)."""
    import torch

    from workbench.provenance import model_id
    from workbench.sae.architectures import build
    from workbench.sae.config import SAEConfig
    from workbench.sae.io import save_sae
    from workbench.sae.transcoders import SCHEMA, SET_MANIFEST

    d, layers = model.cfg.d_model, []
    for layer in range(model.cfg.n_layers):
        hooks = f"blocks.{layer}.ln2.hook_normalized", f"blocks.{layer}.hook_mlp_out"
        torch.manual_seed(10 + layer)
        sae = build(SAEConfig("topk", k=8, expansion=2, transcoder=True).resolve(d_in=d, d_out=d))
        with torch.no_grad():
            sae.W_dec.mul_(4.0)
        meta = {"hook_name": hooks[0], "hook_name_out": hooks[1], "model_name": model_id(model)}
        save_sae(sae, root / f"L{layer}", meta)
        kind = "ln2.hook_normalized"
        layers.append({"layer": layer, "input_hook": hooks[0], "target_hook": hooks[1], "input_kind": kind})
        layers[-1]["transcoders"] = [f"L{layer}"]
    manifest = {"schema": SCHEMA, "version": 1, "model": model_id(model), "cache": "", "n_layers": len(layers)}
    (root / SET_MANIFEST).write_text(json.dumps({**manifest, "layers": layers}))
    return root


def graph_of(model, folder: Path, nodes: int) -> dict:
    """The prompt's graph JSON with about `nodes` kept feature nodes (max_feature_nodes raised until it has)."""
    from workbench.circuits.feature.attribution_graph import build_graph
    from workbench.circuits.feature.graph_config import GraphConfig
    from workbench.circuits.feature.graph_json import to_neuronpedia
    from workbench.circuits.feature.transcoders import open_set

    tcs = open_set(folder).load(0, "cpu", model)
    for cap in (nodes, 2 * nodes, 4 * nodes, 8 * nodes):
        cfg = GraphConfig(max_feature_nodes=cap, heads=False, node_threshold=0.95)
        g = to_neuronpedia(build_graph(model, tcs, PROMPT, None, None, cfg))
        kept = sum(n["feature_type"] == "cross layer transcoder" for n in g["nodes"])
        if kept >= nodes * 0.9:
            return g
    return g


def measure(model, sites, graph: dict, pairs: int) -> dict:
    """side -> [CPU seconds per run], the sides alternated (both first in even pairs, live first in odd ones)."""
    from workbench.interventions.check import check_graph
    from workbench.interventions.config import CheckConfig

    sides = {"both": CheckConfig(semantics="live"), "live": CheckConfig(semantics="live", both_readings=False)}
    out = {k: [] for k in sides}
    check_graph(model, sites, graph, sides["live"])  # warm-up, not counted
    for i in range(pairs):
        for side in list(sides)[:: 1 if i % 2 == 0 else -1]:
            c0 = time.process_time()
            check_graph(model, sites, graph, sides[side])
            out[side].append(time.process_time() - c0)
            print(side, f"{out[side][-1]:.2f} s", flush=True)
    return out


def report(info: dict, graph: dict, times: dict, threads) -> str:
    n_nodes = sum(n["feature_type"] == "cross layer transcoder" for n in graph["nodes"])
    ratios = [b / lv for b, lv in zip(times["both"], times["live"])]
    lines = ["# The graph check's cost: both semantics against live only", ""]
    lines += [*harness.machine_lines(info, {}, str(threads), "the ratio is paired: the sides alternate in one process")]
    lines += [
        "",
        f"Model tiny (embedded); random Top-k transcoders (k 8, 2x latents, one per layer); prompt {PROMPT!r} "
        f"({len(graph['metadata']['prompt_tokens'])} tokens); its graph (node threshold 0.95, no head split) keeps "
        f"{n_nodes} feature nodes and {len(graph['links'])} links. Each check: every kept feature node ablated and "
        "steered x-1 (rank validation) and the 20 largest edges (CheckConfig's defaults); both = frozen and live "
        "readings (the default), live = `both_readings` off with `--semantics live`. CPU seconds per check "
        "(time.process_time of the whole check_graph call), one warm-up run not counted.",
        "",
    ]
    rows = [
        [
            i + 1,
            f"{times['both'][i]:.2f}",
            f"{times['live'][i]:.2f}",
            f"{ratios[i]:.2f}",
        ]
        for i in range(len(ratios))
    ]
    rows.append(
        [
            "median",
            f"{statistics.median(times['both']):.2f}",
            f"{statistics.median(times['live']):.2f}",
            f"{statistics.median(ratios):.2f}",
        ]
    )
    lines += harness.table(["pair", "both CPU s", "live only CPU s", "both / live"], rows)
    verdict = "met" if statistics.median(ratios) <= 2 else "not met"
    lines += ["", f"Done-when (both <= 2x live only, median paired ratio): {verdict}."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3, help="paired runs (default: %(default)s)")
    ap.add_argument("--nodes", type=int, default=100, help="kept feature nodes aimed at (default: %(default)s)")
    harness.add_common_args(ap, harness.BENCH / "results" / "check_cost.md", threads=1)
    args = ap.parse_args()
    harness.set_threads(args.threads)
    import torch

    from workbench.interventions import load_dictionary
    from workbench.models import load

    model, _ = load("tiny", device="cpu")
    info = harness.machine_info()
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        folder = random_set(model, Path(tmp))
        graph = graph_of(model, folder, args.nodes)
        times = measure(model, load_dictionary(folder, model), graph, args.pairs)
    harness.write_text(args.out, report(info, graph, times, args.threads))
    print(args.out.read_text())


if __name__ == "__main__":
    main()
