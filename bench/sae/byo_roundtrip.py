"""Bring your own: dictionaries made by sparsify's and dictionary_learning's own code, imported by the workbench,
and the workbench's exports read back by sparsify's own loader (issue 32's proof for the libraries that cannot
be installed beside the workbench; sae_lens and circuit-tracer run in the tests themselves).

    OMP_NUM_THREADS=1 .venv/bin/python bench/sae/byo_roundtrip.py --threads 1

1. a random GPT-2 folder saved by transformers (tests/hf_folders.py) imported as a workspace model; rows of its
   activations at the hooks (random tokens; training rows and held-out rows from other sequences);
2. in bench/.venv-sae: sparsify SparseCoders (an SAE on `h.1`, transcoders on `h.0.mlp` and `h.1.mlp`) and
   dictionary_learning AutoEncoder, AutoEncoderTopK, BatchTopKSAE, MatryoshkaBatchTopKSAE, JumpReluAutoEncoder and
   GatedAutoEncoder trained with the libraries' own code on the training rows,
   saved as the libraries save them, loaded back by their own loaders, their codes and outputs of the held-out
   rows written; the Hugging Face model's module inputs/outputs on the held-out tokens too;
3. `sae import` of each (hooks from the run's config; dictionary_learning's free-text submodule_name needs --hook,
   its TransformerLens hook name does not), the workbench's codes and outputs of the same rows compared;
4. `sae export --format sparsify` of the imported transcoder set and of the dictionary_learning Top-k SAE, read by
   sparsify's SparseCoder.load_many in its venv, compared with the workbench's;
5. bench/results/byo_roundtrip.md (max |difference| of codes and outputs; FVU of both sides, held-out rows).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]
import harness  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from workbench.sae.foreign import ln_affine  # noqa: E402

OUT = harness.BENCH / "results" / "byo_roundtrip.md"
RESID, TC = (
    "blocks.1.hook_resid_post",
    {i: (f"blocks.{i}.ln2.hook_normalized", f"blocks.{i}.hook_mlp_out") for i in (0, 1)},
)
# the MLP's input as the Hugging Face module sees it (the norm's output after its gain and bias; TransformerLens's
# ln2.hook_normalized is before them): what sparsify's forward hook on h.<i>.mlp reads
MLP_IN = {i: f"{TC[i][0]}@module_input" for i in TC}
SPARSIFY = {
    "sparsify-sae": {"h.1": [RESID, None]},
    "sparsify-tc": {f"h.{i}.mlp": [MLP_IN[i], TC[i][1]] for i in TC},
}
# dictionary_learning records a free-text submodule_name: one names a TransformerLens hook, one does not (--hook)
DL = {
    "topk": RESID,
    "standard": "resid_post_layer_1",
    **{name: RESID for name in ("batchtopk", "matryoshka", "jumprelu", "gated")},
}


def rows(model, n_train: int, n_eval: int, seq: int = 32, seed: int = 0) -> dict:
    """The model's activations at every hook the dictionaries read or write, on random tokens; held-out rows come
    from other sequences than the training rows."""
    hooks = sorted({RESID, *(h for pair in TC.values() for h in pair)})
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(3, model.cfg.d_vocab, (n_train + n_eval, seq), generator=g)
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=lambda n: n in hooks)
    acts = {h: cache[h] for h in hooks}
    for i in TC:
        w, b = ln_affine(model, TC[i][0])
        acts[MLP_IN[i]] = cache[TC[i][0]] * w + b
    out = {"tokens": tokens[n_train:]}
    for h, a in acts.items():
        out[f"train:{h}"] = a[:n_train].flatten(0, 1).contiguous()
        out[f"eval:{h}"] = a[n_train:].flatten(0, 1).contiguous()
    return out


def fvu(y: torch.Tensor, y_hat: torch.Tensor) -> float:
    return float((y - y_hat).pow(2).sum() / (y - y.mean(0)).pow(2).sum())


@torch.no_grad()
def compare(ours, x, y, theirs: dict, key: str) -> list:
    codes, out = ours.encode(x), ours(x)
    return [
        f"{(codes - theirs[f'{key}:codes']).abs().max():.2e}",
        f"{(out - theirs[f'{key}:out']).abs().max():.2e}",
        f"{fvu(y, theirs[f'{key}:out']):.5f}",
        f"{fvu(y, out):.5f}",
    ]


def imported(ws, work: Path, spec: str, model) -> dict:
    """Each library's files imported into the workspace: {(library, name): (SAELens folder, input hook, target)}."""
    from workbench.sae.transcoders import load_set
    from workbench.steps.exchange import import_sae

    made = {}
    _, folder = import_sae(ws, work / "sparsify-sae", spec, model=model, name="sparsify-sae")
    made[("sparsify", "sparsify-sae/h.1")] = (folder, RESID, RESID)
    _, tc = import_sae(ws, work / "sparsify-tc", spec, model=model, name="sparsify-tc")
    for e in load_set(tc)["layers"]:
        made[("sparsify", f"sparsify-tc/h.{e['layer']}.mlp")] = (tc / e["transcoders"][0], *TC[e["layer"]])
    for name, sub in DL.items():
        hook = None if sub == RESID else RESID
        src = work / "dictionary_learning" / name
        _, folder = import_sae(ws, src, spec, model=model, name=f"dl-{name}", hook=hook)
        made[("dictionary_learning", f"dictionary_learning/{name}")] = (folder, RESID, RESID)
    return made


def hookpoint_gaps(work: Path, held: dict) -> dict:
    """sparsify's forward hooks on the Hugging Face model vs the hooks its hookpoints map to, on the same tokens."""
    hf = load_file(str(work / "hf_activations.safetensors"))
    out = {"h.1 output vs blocks.1.hook_resid_post": hf["h.1:out"] - held[RESID]}
    for i in TC:
        out[f"h.{i}.mlp input vs {TC[i][0]} x gain + bias"] = hf[f"h.{i}.mlp:in"] - held[MLP_IN[i]]
        out[f"h.{i}.mlp output vs {TC[i][1]}"] = hf[f"h.{i}.mlp:out"] - held[TC[i][1]]
    return {k: float(v.abs().max()) for k, v in out.items()}


def exported(ws, work: Path, model) -> dict:
    """`sae export --format sparsify` of the imported transcoder set and dictionary_learning Top-k SAE:
    {name: {"folder": the run folder, "inputs": {hookpoint: the row key sparsify's coder reads}}}."""
    from workbench.steps.exchange import export_dictionary

    def export(src, name):
        return str(export_dictionary(src, "sparsify", work / f"export-{name}", model=model))

    return {
        "sparsify-tc": {
            "folder": export(ws.path("transcoders", "sparsify-tc"), "tc"),
            "inputs": {f"h.{i}.mlp": MLP_IN[i] for i in TC},
        },
        "dl-topk": {"folder": export(ws.path("saes", "imported", "dl-topk"), "dl"), "inputs": {"h.1": RESID}},
    }


def report(a, threads: str, versions: dict, held: dict, rows_import, rows_export, back: dict, gaps: dict) -> str:
    head_import = ["library", "dictionary", "hooks", "max |diff| codes", "max |diff| outputs", "FVU (library)"]
    head_export = ["exported", "max |diff| codes", "max |diff| outputs", "FVU (sparsify, loaded back)"]
    lines = [
        "# Bring your own: sparsify and dictionary_learning files through the workbench and back",
        "",
        *harness.machine_lines(harness.machine_info(), {"sae": versions}, threads, ratios="no timings are reported"),
        f"- Model: a random GPT-2 folder saved by transformers (tests/hf_folders.py: 2 layers, d_model 32), imported "
        f"with `workbench model import`; rows: 200 training and 40 held-out sequences of 32 random tokens "
        f"({held[RESID].shape[0]} held-out rows); each library trained {a.steps} steps with its own code",
        "- Every figure is on the held-out rows. FVU = sum((y - y_hat)^2) / sum((y - mean y)^2), y the dictionary's "
        "target (an SAE's input, a transcoder's MLP output); max |diff| compares the library's own loader with the "
        "workbench's import of the same files on the same rows",
        "",
        "## Imports: the library's own loader vs the workbench",
        "",
        *harness.table([*head_import, "FVU (workbench)"], rows_import),
        "",
        "## Exports: `sae export --format sparsify`, read by sparsify's SparseCoder.load_many",
        "",
        *harness.table([*head_export, "FVU (workbench)"], rows_export),
        "",
        f"sparsify's hookpoints as loaded back: {back['hookpoints']}",
        "",
        "## sparsify's hookpoint -> TransformerLens hook table (the Hugging Face model's forward hooks vs the "
        "imported model's hooks, same tokens)",
        "",
        *harness.table(["module", "max |diff|"], [[k, f"{v:.2e}"] for k, v in gaps.items()]),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    harness.add_common_args(ap, OUT, threads=1)
    ap.add_argument("--steps", type=int, default=200, help="training steps of each library's dictionaries")
    a = ap.parse_args()
    threads = harness.set_threads(a.threads)
    from tests.hf_folders import hf_folder
    from workbench.models import load
    from workbench.sae.io import load_sae
    from workbench.steps.models import import_model
    from workbench.workspace import Workspace

    work = harness.WORK / "byo"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    src = hf_folder("gpt2", work / "hf-gpt2")
    ws = Workspace(work / "ws")
    _, model_dir = import_model(ws, str(src), name="gpt2")
    model = load(str(model_dir), device="cpu")[0]
    data = rows(model, n_train=200, n_eval=40)
    save_file(data, str(work / "rows.safetensors"))
    held = {k[5:]: v for k, v in data.items() if k.startswith("eval:")}
    cfg = {"rows": str(work / "rows.safetensors"), "out": str(work), "hf_model": str(src), "steps": a.steps}
    libs = {"sparsify": SPARSIFY, "dl_hook": RESID, "dl_submodules": DL, "hf_modules": ["h.1", "h.0.mlp", "h.1.mlp"]}
    made = harness.run_side("sae", "byo_peers.py", {**cfg, "mode": "make", **libs}, "byo-make")
    theirs = load_file(str(work / "theirs.safetensors"))
    rows_import, loaded = [], {}
    for (lib, key), (folder, hook, target) in imported(ws, work, str(model_dir), model).items():
        loaded[key] = ours = load_sae(folder)
        hooks = f"{hook} -> {target}" if target != hook else hook
        rows_import.append([lib, key, hooks, *compare(ours, held[hook], held[target], theirs, key)])
    runs = exported(ws, work, model)
    back = harness.run_side("sae", "byo_peers.py", {**cfg, "mode": "load", "exported": runs}, "byo-load")
    got = load_file(str(work / "loaded_back.safetensors"))
    rows_export = []
    for name, key, hook, target in (
        *(("sparsify-tc", f"h.{i}.mlp", *TC[i]) for i in TC),
        ("dl-topk", "h.1", RESID, RESID),
    ):
        ours = loaded[f"sparsify-tc/{key}" if name == "sparsify-tc" else "dictionary_learning/topk"]
        rows_export.append([f"{name}/{key}", *compare(ours, held[hook], held[target], got, f"{name}/{key}")])
    text = report(a, threads, made["versions"], held, rows_import, rows_export, back, hookpoint_gaps(work, held))
    harness.write_text(a.out, text)
    print(text)


if __name__ == "__main__":
    main()
