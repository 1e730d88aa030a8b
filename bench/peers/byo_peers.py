"""sparsify and dictionary_learning side of bench/sae/byo_roundtrip.py, in their own venv (bench/.venv-sae).

cfg["mode"] == "make": train each library's dictionaries with its own classes and update rules on the driver's
rows (the workbench model's activations at the hooks), save them as each library saves them (sparsify:
SparseCoder.save_to_disk per hookpoint and its TrainConfig's save_json as the run's config.json, as its Trainer
does; dictionary_learning: the trainer's ae state dict as ae.pt and {"trainer": trainer.config} as config.json,
as its trainSAE does), then load them back with the libraries' own loaders and write their codes and
reconstructions of the held-out rows. It also runs the Hugging Face model with forward hooks on the modules
sparsify hooks, so the driver can check that the hookpoint -> TransformerLens hook table reads the same values.

cfg["mode"] == "load": read the workbench's exported sparsify run with SparseCoder.load_many and write its codes.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))

import common  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402


def sparsify_codes(sae, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense codes and the output of a sparsify SparseCoder (its encode, decode and skip path)."""
    enc = sae.encode(x)
    codes = torch.zeros(x.shape[0], sae.num_latents).scatter(-1, enc.top_indices, enc.top_acts)
    out = sae.decode(enc.top_acts, enc.top_indices)
    if sae.W_skip is not None:
        out = out + x @ sae.W_skip.mT
    return codes, out


def train_sparsify(rows: dict, points: dict, steps: int, out: Path) -> dict:
    """{hookpoint: (input, target or None)} trained with sparsify's own forward (FVU) and Adam, saved as its
    Trainer saves a run; returns {hookpoint: SparseCoder loaded back by load_from_disk}."""
    from sparsify import SparseCoder, SparseCoderConfig
    from sparsify.config import TrainConfig

    for point, (inp, target) in points.items():
        x, y = rows[inp], rows[target] if target else None
        cfg = SparseCoderConfig(expansion_factor=4, k=4, transcode=target is not None)
        sae = SparseCoder(x.shape[1], cfg, device="cpu", dtype=torch.float32)
        opt = torch.optim.Adam(sae.parameters(), lr=3e-3)
        if y is not None:
            sae.encoder.bias.data = -x.mean(0) @ sae.encoder.weight.data.T
        sae.b_dec.data = (x if y is None else y).mean(0)
        for i in range(steps):
            batch = torch.arange(i * 64, (i + 1) * 64) % x.shape[0]
            res = sae(x[batch], None if y is None else y[batch])
            res.fvu.backward()
            opt.step()
            opt.zero_grad()
            if y is None:
                sae.set_decoder_norm_to_unit_norm()
        sae.save_to_disk(out / point)
    TrainConfig(SparseCoderConfig(expansion_factor=4, k=4), hookpoints=list(points)).save_json(str(out / "config.json"))
    return {p: SparseCoder.load_from_disk(out / p) for p in points}


def dl_trainers(steps: int, d: int, submodules: dict) -> dict:
    """One trainer per dictionary_learning class the workbench imports, each with the library's own update()."""
    from dictionary_learning.trainers.batch_top_k import BatchTopKTrainer
    from dictionary_learning.trainers.gdm import GatedSAETrainer
    from dictionary_learning.trainers.jumprelu import JumpReluTrainer
    from dictionary_learning.trainers.matryoshka_batch_top_k import MatryoshkaBatchTopKTrainer
    from dictionary_learning.trainers.standard import StandardTrainer
    from dictionary_learning.trainers.top_k import TopKTrainer

    common = dict(steps=steps, activation_dim=d, dict_size=4 * d, layer=1, lm_name="byo", device="cpu")
    # thresholds start learning at step steps // 4 (the library's default, 1000, is past a short run's end)
    topk = dict(k=4, lr=1e-3, warmup_steps=0, threshold_start_step=steps // 4)
    made = {
        "standard": (StandardTrainer, dict(lr=1e-3, l1_penalty=0.1, warmup_steps=0, sparsity_warmup_steps=None)),
        "topk": (TopKTrainer, dict(k=4, lr=1e-3, warmup_steps=0)),
        "batchtopk": (BatchTopKTrainer, topk),
        "matryoshka": (MatryoshkaBatchTopKTrainer, topk | dict(group_fractions=[0.25, 0.75])),
        "jumprelu": (JumpReluTrainer, dict(lr=1e-3, warmup_steps=0, sparsity_warmup_steps=None, target_l0=4.0)),
        "gated": (GatedSAETrainer, dict(lr=1e-3, warmup_steps=0, sparsity_warmup_steps=None)),
    }
    return {name: cls(**common, **kw, submodule_name=submodules[name]) for name, (cls, kw) in made.items()}


def train_dictionary_learning(x: torch.Tensor, steps: int, out: Path, submodules: dict) -> dict:
    """Each dictionary_learning class trained with its trainer's own update(), saved as trainSAE saves it; returns
    {name: the dictionary loaded back by its class's own from_pretrained}."""
    for name, trainer in dl_trainers(steps, x.shape[1], submodules).items():
        for step in range(steps):
            trainer.update(step, x[torch.arange(step * 64, (step + 1) * 64) % x.shape[0]])
        (out / name).mkdir(parents=True, exist_ok=True)
        torch.save({k: v.cpu() for k, v in trainer.ae.state_dict().items()}, out / name / "ae.pt")
        config = {k: (v.item() if torch.is_tensor(v) else v) for k, v in trainer.config.items()}
        (out / name / "config.json").write_text(json.dumps({"trainer": config}, indent=4))
    return {name: dl_load(out / name) for name in submodules}


def dl_load(folder: Path):
    """A saved dictionary read back by its class's own from_pretrained (the class its config names)."""
    from dictionary_learning import dictionary
    from dictionary_learning.trainers import batch_top_k, matryoshka_batch_top_k, top_k

    cls = json.loads((folder / "config.json").read_text())["trainer"]["dict_class"]
    modules = (dictionary, top_k, batch_top_k, matryoshka_batch_top_k)
    loader = next(getattr(m, cls) for m in modules if hasattr(m, cls)).from_pretrained
    return loader(folder / "ae.pt", normalize_decoder=False) if cls == "AutoEncoder" else loader(folder / "ae.pt")


def hf_activations(model_dir: str, tokens: torch.Tensor, modules: list[str]) -> dict:
    """Each Hugging Face module's input and output on `tokens` (forward hooks, as sparsify's Trainer reads them)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).eval()
    seen, handles = {}, []
    for name in modules:

        def hook(mod, inputs, outputs, name=name):
            o = outputs[0] if isinstance(outputs, tuple) else outputs
            seen[f"{name}:in"], seen[f"{name}:out"] = inputs[0].flatten(0, 1), o.flatten(0, 1)

        handles.append(model.base_model.get_submodule(name).register_forward_hook(hook))
    with torch.no_grad():
        model(tokens)
    for h in handles:
        h.remove()
    return seen


@torch.no_grad()
def make(cfg: dict) -> dict:
    out = Path(cfg["out"])
    rows = load_file(cfg["rows"])
    train = {k[len("train:") :]: v for k, v in rows.items() if k.startswith("train:")}
    held = {k[len("eval:") :]: v for k, v in rows.items() if k.startswith("eval:")}
    result = {}
    with torch.enable_grad():
        sp = {}
        for run, points in cfg["sparsify"].items():
            sp |= train_sparsify(train, {p: tuple(v) for p, v in points.items()}, cfg["steps"], out / run)
        dl = train_dictionary_learning(
            train[cfg["dl_hook"]], cfg["steps"], out / "dictionary_learning", cfg["dl_submodules"]
        )
    theirs = {}
    for run, points in cfg["sparsify"].items():
        for point, (inp, _) in points.items():
            theirs[f"{run}/{point}:codes"], theirs[f"{run}/{point}:out"] = sparsify_codes(sp[point], held[inp])
    x = held[cfg["dl_hook"]]
    for name, ae in dl.items():
        theirs[f"dictionary_learning/{name}:codes"], theirs[f"dictionary_learning/{name}:out"] = ae.encode(x), ae(x)
    save_file({k: v.contiguous() for k, v in theirs.items()}, str(out / "theirs.safetensors"))
    acts = hf_activations(cfg["hf_model"], load_file(cfg["rows"])["tokens"], cfg["hf_modules"])
    save_file({k: v.contiguous() for k, v in acts.items()}, str(out / "hf_activations.safetensors"))
    result["versions"] = common.versions("eai-sparsify", "dictionary-learning", "transformers")
    return result


@torch.no_grad()
def load(cfg: dict) -> dict:
    from sparsify import SparseCoder

    held = {k[len("eval:") :]: v for k, v in load_file(cfg["rows"]).items() if k.startswith("eval:")}
    got, points = {}, {}
    for name, run in cfg["exported"].items():  # {name: {"folder": run folder, "inputs": {hookpoint: hook}}}
        coders = SparseCoder.load_many(run["folder"], local=True)
        points[name] = sorted(coders)
        for point, sae in coders.items():
            got[f"{name}/{point}:codes"], got[f"{name}/{point}:out"] = sparsify_codes(sae, held[run["inputs"][point]])
    save_file({k: v.contiguous() for k, v in got.items()}, str(Path(cfg["out"]) / "loaded_back.safetensors"))
    return {"hookpoints": points}


if __name__ == "__main__":
    cfg = common.load_config()
    torch.manual_seed(cfg.get("seed", 0))
    common.emit(make(cfg) if cfg["mode"] == "make" else load(cfg))
