"""sparsify checkpoints and dictionary_learning dictionaries as SAELens folders the workbench loads.

sparsify (EleutherAI) saves a run as `config.json` (its TrainConfig: `hookpoints`, the Hugging Face module
names it hooked, and `sae`, the coder's config) beside one folder per hookpoint (`cfg.json` with d_in,
`sae.safetensors` with encoder.weight [n, d_in], encoder.bias, W_dec [n, d_out], b_dec). W_dec is stored
[latents, d_out] and decoded as `W_dec.mT` by sparsify: the same orientation as SAELens's W_dec, so it is
copied as it is (SAELens's own sparsify loader transposes it); only the encoder is transposed. A module's
output is an SAE's input; a transcoder (`transcode`) reads the module's input and predicts its output, and
the Hugging Face module names map onto TransformerLens hooks by the table in `tl_hooks` (read, not guessed
from the folder's name). Codes are ReLU then Top-k (as the workbench's Top-k); an SAE subtracts b_dec first,
a transcoder does not.

dictionary_learning saves `ae.pt` (a state dict) beside `config.json` ({"trainer": {dict_class, ...}});
`AutoEncoder` (ReLU of encoder(x - bias)) becomes SAELens `standard`, `AutoEncoderTopK` (Top-k of
ReLU(encoder(x - b_dec))) the workbench's Top-k SAE; nn.Linear stores the decoder [d_in, n], so it is
transposed. `BatchTopKSAE` and `MatryoshkaBatchTopKSAE` encode, once trained, by their learned scalar threshold
(ReLU, then zero below it: their `encode`'s default; the batch top-k is a training-time rule), so they become
SAELens `jumprelu` with that threshold on every latent; `JumpReluAutoEncoder` (ReLU of the jump) becomes
`jumprelu` too, `GatedAutoEncoder` SAELens `gated`. A threshold below 0 reads as 0 (ReLU first makes them
equal). Its `submodule_name` is free text; when it is not one of the model's hooks, --hook names it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from workbench.errors import BadValueError, MissingInputError
from workbench.readback import confined, damaged, json_file, safetensors_file, tensors, torch_file

# `sae import --format` choices (here, not in imports.py: the CLI reads them without importing torch)
FORMATS = ("auto", "saelens", "sparsify", "circuit-tracer", "dictionary-learning")
SPARSIFY_WEIGHTS, RUN_CONFIG, DL_WEIGHTS = "sae.safetensors", "config.json", "ae.pt"
DL_CLASSES = (
    "AutoEncoder",
    "AutoEncoderTopK",
    "BatchTopKSAE",
    "MatryoshkaBatchTopKSAE",
    "JumpReluAutoEncoder",
    "GatedAutoEncoder",
)
# a Hugging Face decoder layer, its MLP or its attention, under the base model's layer list (h: GPT-2)
HOOKPOINT = re.compile(r"^(?:[\w.]*\.)?(?:h|layers)\.(\d+)(?:\.(mlp|attn|self_attn|attention))?$")


@dataclass(frozen=True)
class Member:
    """One dictionary of a foreign checkpoint: where it is, what it reads (and writes), its layer."""

    source: Path  # its weights file
    hook: str
    target: str | None
    layer: int | None
    name: str  # the folder it becomes
    affine: tuple | None = None  # (gain, bias) the model applies after `hook` before the module it read (ln_affine)

    @property
    def hooks(self) -> tuple[str, ...]:
        return (self.hook, self.target) if self.target else (self.hook,)


def is_sparsify(src: Path) -> bool:
    if (src / SPARSIFY_WEIGHTS).is_file():
        return True
    return (src / RUN_CONFIG).is_file() and "hookpoints" in _json(src / RUN_CONFIG, "run config")


def is_dictionary_learning(src: Path) -> bool:
    return (src / DL_WEIGHTS).is_file()


def _json(path: Path, what: str, fields: dict | None = None) -> dict:
    return json_file(path, what, "restore it from the library that saved it", fields=fields)


def _run_config(path: Path) -> dict:
    """A sparsify run's config.json; its `hookpoints` a list of module names (a string would be read by letter)."""
    cfg = _json(path, "sparsify run config")
    points = cfg.get("hookpoints", [])
    if not isinstance(points, list) or not all(isinstance(p, str) for p in points):
        raise damaged(path, "sparsify run config", f"'hookpoints' is {points!r}, not a list of module names")
    return cfg


def parse_hooks(spec: str | None) -> tuple[str, str | None] | None:
    """--hook HOOK[,TARGET] (TARGET: a transcoder's output hook)."""
    if not spec:
        return None
    hook, _, target = spec.partition(",")
    return hook.strip(), (target.strip() or None)


def tl_hooks(hookpoint: str, transcode: bool, model) -> tuple[str, str | None]:
    """The TransformerLens hooks (input, output or None) of a sparsify hookpoint on `model` (weights unprocessed,
    so ln*.hook_normalized is the Hugging Face norm's output, the MLP's or attention's input)."""
    m = HOOKPOINT.match(hookpoint)
    if not m:
        raise BadValueError(
            f"sparsify hookpoint {hookpoint!r} is not a decoder layer (layers.<i> or h.<i>), its MLP (.mlp) or its "
            "attention (.attn, .self_attn, .attention); pass --hook HOOK[,TARGET] to name the model's hooks"
        )
    i, part = int(m[1]), m[2]
    if part is None:  # the layer's output is the residual stream after it
        return (
            (f"blocks.{i}.hook_resid_pre", f"blocks.{i}.hook_resid_post")
            if transcode
            else (
                f"blocks.{i}.hook_resid_post",
                None,
            )
        )
    if getattr(model.cfg, "use_normalization_before_and_after", False):
        raise BadValueError(
            f"sparsify hookpoint {hookpoint!r}: model {model.cfg.model_name} normalises the {part} output (Gemma-2's "
            "post-norm) before any TransformerLens hook sees it; pass --hook HOOK[,TARGET] if another hook fits"
        )
    site, ln = ("mlp", "ln2") if part == "mlp" else ("attn", "ln1")
    out = f"blocks.{i}.hook_{site}_out"
    return (f"blocks.{i}.{ln}.hook_normalized", out) if transcode else (out, None)


def ln_affine(model, hook: str):
    """(gain, bias) a norm applies after its hook_normalized (TransformerLens hooks x / scale, before the gain and
    bias; the model's weights are unprocessed, so the module after it reads x / scale * gain + bias), or None."""
    import torch

    m = re.fullmatch(r"blocks\.(\d+)\.(ln1|ln2)\.hook_normalized", hook)
    ln = getattr(model.blocks[int(m[1])], m[2]) if m else None
    if getattr(ln, "w", None) is None:
        return None
    b = getattr(ln, "b", None)
    w = ln.w.detach().float().cpu()
    return w, torch.zeros_like(w) if b is None else b.detach().float().cpu()


def fold_affine(state: dict, affine, inverse: bool = False) -> dict:
    """A dictionary reading u = n * gain + bias rewritten to read n (inverse: one reading n rewritten to read u), so
    its codes and outputs stay the same; state in SAELens's orientation (W_enc [d_in, n], W_skip [d_out, d_in])."""
    if affine is None:
        return state
    w, b = affine
    if inverse:  # n = (u - bias) / gain
        if bool((w == 0).any()):
            raise BadValueError("the norm's gain has zeros: a dictionary reading its input cannot be rewritten")
        w, b = 1 / w, -b / w
    out = {**state, "W_enc": w[:, None] * state["W_enc"], "b_enc": state["b_enc"] + b @ state["W_enc"]}
    if "W_skip" in state:
        out |= {"W_skip": state["W_skip"] * w[None, :], "b_dec": state["b_dec"] + b @ state["W_skip"].T}
    return out


def sparsify_members(src: Path, model, hooks: tuple[str, str | None] | None = None) -> list[Member]:
    """The hookpoints of a sparsify run folder (its config.json's `hookpoints`), or one hookpoint's folder (named in
    its run's config.json, or its hooks given)."""
    if (src / SPARSIFY_WEIGHTS).is_file():
        run = src.parent / RUN_CONFIG
        listed = _run_config(run).get("hookpoints", []) if run.is_file() else []
        if hooks is None and src.name not in listed:
            raise BadValueError(
                f"{src} is one sparsify hookpoint without its run's {RUN_CONFIG} naming it"
                f"{f' (it lists {listed})' if listed else ''}; import the run folder, or pass --hook HOOK[,TARGET]"
            )
        points = {src.name: src}
    else:
        cfg = _run_config(src / RUN_CONFIG)
        points = {hp: confined(src, hp, "sparsify run config", src / RUN_CONFIG) for hp in cfg.get("hookpoints", [])}
        if not points:
            raise BadValueError(f"{src / RUN_CONFIG} lists no hookpoints: not a finished sparsify run")
        if hooks is not None and len(points) > 1:
            raise BadValueError(f"--hook names one dictionary's hooks; {src} holds {len(points)}: {list(points)}")
    out = []
    for hp, folder in points.items():
        if not (folder / SPARSIFY_WEIGHTS).is_file():
            raise MissingInputError(f"sparsify hookpoint {hp!r}: {folder / SPARSIFY_WEIGHTS} is missing")
        transcode = bool(_coder_config(folder).get("transcode"))
        hook, target = hooks or tl_hooks(hp, transcode, model)
        m = re.match(r"blocks\.(\d+)\.", hook)
        affine = None if hooks else ln_affine(model, hook)  # a hook named by --hook is read as it is
        out.append(
            Member(folder / SPARSIFY_WEIGHTS, hook, target, int(m[1]) if m else None, re.sub(r"\W", "-", hp), affine)
        )
    for member in out:  # every file read and checked before the first is converted
        _state(member)
    return out


def _coder_config(folder: Path) -> dict:
    """A sparsify hookpoint's cfg.json (SparseCoderConfig); {} when it has none."""
    path = folder / "cfg.json"
    cfg = _json(path, "sparsify coder config") if path.is_file() else {}
    for field, kind in (("activation", str), ("k", int)):
        if field in cfg and not isinstance(cfg[field], kind):
            raise damaged(path, "sparsify coder config", f"{field!r} is {cfg[field]!r}, not a {kind.__name__}")
    return cfg


def dictionary_learning_member(src: Path, model, hooks: tuple[str, str | None] | None = None) -> Member:
    """The dictionary in `src`/ae.pt, reading --hook or its config's submodule_name (when that is a model hook)."""
    trainer = _trainer(src)
    if hooks is None:
        name = trainer.get("submodule_name")
        if name not in model.hook_dict:
            raise BadValueError(
                f"{src}: dictionary_learning records the hooked module as submodule_name={name!r} (layer "
                f"{trainer.get('layer')!r}), which is not a hook of model {model.cfg.model_name}; pass --hook, e.g. "
                f"--hook blocks.{trainer.get('layer') or 0}.hook_resid_post"
            )
        hooks = (name, None)
    if hooks[1]:
        raise BadValueError("dictionary_learning dictionaries are SAEs (one hook), not transcoders: --hook takes one")
    m = re.match(r"blocks\.(\d+)\.", hooks[0])
    member = Member(src / DL_WEIGHTS, hooks[0], None, int(m[1]) if m else None, src.name)
    _state(member)  # read and checked before anything is converted
    return member


def _trainer(src: Path) -> dict:
    """The `trainer` section of a dictionary_learning config.json ({} without the file)."""
    path = src / RUN_CONFIG
    trainer = _json(path, "dictionary_learning config").get("trainer", {}) if path.is_file() else {}
    if not isinstance(trainer, dict):
        raise damaged(path, "dictionary_learning config", f"'trainer' is {type(trainer).__name__}, not an object")
    return trainer


def _dl_class(source: Path, state) -> str:
    """The dictionary_learning class of `source` (its config's dict_class, else told by a `k`), one that imports."""
    cls = _trainer(source.parent).get("dict_class") or _dl_class_of(state)
    if cls not in DL_CLASSES:
        raise BadValueError(f"{source}: dict_class {cls!r} does not import; valid: {', '.join(DL_CLASSES)}")
    return cls


def _dl_class_of(state) -> str:
    """A dictionary_learning class told by its tensors, for an ae.pt saved without its config.json. BatchTopKSAE
    holds the same tensors as AutoEncoderTopK (a `k` and a `threshold`), so without its config's dict_class it is read
    as AutoEncoderTopK (per-token Top-k), as before BatchTopKSAE imported."""
    keys = set(state) if isinstance(state, dict) else set()
    for cls, marker in (
        ("GatedAutoEncoder", "r_mag"),
        ("MatryoshkaBatchTopKSAE", "group_sizes"),
        ("JumpReluAutoEncoder", "W_enc"),
        ("AutoEncoderTopK", "k"),
    ):
        if marker in keys:
            return cls
    return "AutoEncoder"


# the tensors of each format, by name: their shapes in named dimensions (workbench.readback.tensors)
SPARSIFY_SHAPES = {
    "encoder.weight": ("n", "d_in"),
    "encoder.bias": ("n",),
    "W_dec": ("n", "d_out"),
    "b_dec": ("d_out",),
    "W_skip": ("d_out", "d_in"),
}
_LINEAR = {"encoder.weight": ("n", "d_in"), "encoder.bias": ("n",), "decoder.weight": ("d_in", "n")}
_PARAMS = {"W_enc": ("d_in", "n"), "b_enc": ("n",), "W_dec": ("n", "d_in"), "b_dec": ("d_in",)}
_TOPK = {**_LINEAR, "b_dec": ("d_in",), "k": ()}
DL_SHAPES = {  # per class: its tensors, and those it may lack
    "AutoEncoder": ({**_LINEAR, "bias": ("d_in",)}, ()),
    "AutoEncoderTopK": ({**_TOPK, "threshold": ()}, ("threshold",)),
    "BatchTopKSAE": ({**_TOPK, "threshold": ()}, ()),
    "MatryoshkaBatchTopKSAE": ({**_PARAMS, "k": (), "threshold": (), "group_sizes": ("groups",)}, ()),
    "JumpReluAutoEncoder": ({**_PARAMS, "threshold": ("n",)}, ()),
    "GatedAutoEncoder": (
        {
            "encoder.weight": ("n", "d_in"),
            "decoder.weight": ("d_in", "n"),
            "decoder_bias": ("d_in",),
            "r_mag": ("n",),
            "gate_bias": ("n",),
            "mag_bias": ("n",),
        },
        (),
    ),
}


def _state(member: Member) -> dict:
    """The member's tensors, read through workbench.readback and checked (names, dtypes, shapes, finite)."""
    if member.source.name == DL_WEIGHTS:
        what = "dictionary_learning state dict (ae.pt)"
        state = torch_file(member.source, what)
        shapes, optional = DL_SHAPES[_dl_class(member.source, state)]
        tensors(member.source, what, state, shapes, optional=optional, ints=("k", "group_sizes"))
    else:
        state = safetensors_file(member.source, "sparsify weights")
        tensors(member.source, "sparsify weights", state, SPARSIFY_SHAPES, optional=("W_skip",))
    return {k: v.float() if v.is_floating_point() else v for k, v in state.items()}


def to_saelens(member: Member, dest: Path, model_id: str) -> Path:
    """Write `member` as a SAELens folder in `dest`, bound to `model_id`."""
    from sae_lens.saes.sae import SAEMetadata

    w = _state(member)
    meta = SAEMetadata(model_name=model_id, hook_name=member.hook, hook_name_out=member.target)
    dictionary = _dictionary_learning(member, w) if member.source.name == DL_WEIGHTS else _sparsify(member, w)
    sae = _saelens_sae(dictionary, member, meta)
    sae.load_state_dict({k: v.contiguous() for k, v in dictionary.state.items()})
    sae.save_model(str(dest))
    return dest


class Converted(NamedTuple):
    """A foreign dictionary as SAELens names it: its kind, its tensors under SAELens's names, k (Top-k kinds), and
    whether its encoder subtracts b_dec from the input first (every kind but dictionary_learning's JumpReLU AE)."""

    kind: str
    state: dict
    k: int = 0
    b_dec_in: bool = True


def _saelens_sae(dictionary: Converted, member: Member, meta):
    """The empty SAELens module for a converted dictionary (a Top-k one gains the scaffold's empty tensors in its
    state, in place)."""
    import torch
    from sae_lens import GatedSAE, GatedSAEConfig, JumpReLUSAE, JumpReLUSAEConfig, StandardSAE, StandardSAEConfig

    from workbench.sae.saelens import ScaffoldSAE, ScaffoldSAEConfig, TopKTranscoderConfig

    kind, state, k, b_dec_in = dictionary
    d_in, d_sae = state["W_enc"].shape
    plain = {"standard": (StandardSAE, StandardSAEConfig), "jumprelu": (JumpReLUSAE, JumpReLUSAEConfig)}
    plain["gated"] = (GatedSAE, GatedSAEConfig)
    if kind in plain:
        module, config = plain[kind]
        return module(config(d_in=d_in, d_sae=d_sae, apply_b_dec_to_input=b_dec_in, metadata=meta))
    d_out, skip = state["W_dec"].shape[1], "W_skip" in state
    common = dict(d_in=d_in, d_sae=d_sae, k=k, base="topk", metadata=meta)
    if member.target:
        cfg = TopKTranscoderConfig(**common, d_out=d_out, skip=skip, apply_b_dec_to_input=False)
        state["b_in"] = torch.zeros(d_in)
    else:
        cfg = ScaffoldSAEConfig(**common, apply_b_dec_to_input=True)
    state |= {"scaffold_V": torch.zeros(d_in, 0), "threshold": torch.zeros(d_sae)}
    return ScaffoldSAE(cfg)


def _sparsify(member: Member, w: dict) -> Converted:
    cfg = _coder_config(member.source.parent)
    if cfg.get("activation", "topk") != "topk":
        raise BadValueError(f"{member.source.parent}: activation {cfg['activation']!r}; only 'topk' coders import")
    if bool(cfg.get("transcode")) != bool(member.target):
        raise BadValueError(
            f"{member.source.parent}: transcode={cfg.get('transcode')} but --hook names "
            f"{'an output hook' if member.target else 'no output hook'}"
        )
    state = {"W_enc": w["encoder.weight"].T, "b_enc": w["encoder.bias"], "W_dec": w["W_dec"], "b_dec": w["b_dec"]}
    if "W_skip" in w:
        if not member.target:
            raise BadValueError(f"{member.source.parent}: a skip path on an SAE (not a transcoder) does not import")
        state["W_skip"] = w["W_skip"]
    return Converted("topk", fold_affine(state, member.affine), int(cfg.get("k", 32)))


def _dictionary_learning(member: Member, w: dict) -> Converted:
    """A dictionary_learning class as SAELens names it (see the module docstring)."""
    cls = _dl_class(member.source, w)  # its tensors checked by _state
    if cls == "GatedAutoEncoder":
        state = {"W_enc": w["encoder.weight"].T, "b_gate": w["gate_bias"], "r_mag": w["r_mag"], "b_mag": w["mag_bias"]}
        return Converted("gated", state | {"W_dec": w["decoder.weight"].T, "b_dec": w["decoder_bias"]})
    if "W_enc" in w:  # Matryoshka and JumpReLU keep their weights as parameters, already [d_in, n] and [n, d_in]
        state = {name: w[name] for name in ("W_enc", "b_enc", "W_dec", "b_dec")}
    else:
        state = {"W_enc": w["encoder.weight"].T, "b_enc": w["encoder.bias"], "W_dec": w["decoder.weight"].T}
    if cls == "AutoEncoder":
        return Converted("standard", state | {"b_dec": w["bias"]})
    if cls == "AutoEncoderTopK":
        return Converted("topk", state | {"b_dec": w["b_dec"]}, int(w["k"]))
    threshold = w["threshold"].clamp(min=0).expand(state["W_enc"].shape[1]).clone()
    # dictionary_learning's JumpReluAutoEncoder loader leaves apply_b_dec_to_input False
    return Converted("jumprelu", state | {"b_dec": w["b_dec"], "threshold": threshold}, 0, cls != "JumpReluAutoEncoder")


def hf_hookpoint(hook: str, target: str | None, model) -> str:
    """The Hugging Face module name sparsify hooks for these TransformerLens hooks (the inverse of `tl_hooks`)."""
    layers = "h" if "GPT2" in str(model.cfg.original_architecture) else "layers"
    attn = {"GPT2": "attn", "GPTNeoX": "attention"}
    attn_name = next((v for k, v in attn.items() if k in str(model.cfg.original_architecture)), "self_attn")
    m = re.match(r"blocks\.(\d+)\.", hook)
    i = m[1] if m else None
    table = {
        (f"blocks.{i}.hook_resid_post", None): f"{layers}.{i}",
        (f"blocks.{i}.hook_resid_pre", f"blocks.{i}.hook_resid_post"): f"{layers}.{i}",
        (f"blocks.{i}.hook_mlp_out", None): f"{layers}.{i}.mlp",
        (f"blocks.{i}.ln2.hook_normalized", f"blocks.{i}.hook_mlp_out"): f"{layers}.{i}.mlp",
        (f"blocks.{i}.hook_attn_out", None): f"{layers}.{i}.{attn_name}",
        (f"blocks.{i}.ln1.hook_normalized", f"blocks.{i}.hook_attn_out"): f"{layers}.{i}.{attn_name}",
    }
    point = table.get((hook, target))
    if point is None or (point != f"{layers}.{i}" and getattr(model.cfg, "use_normalization_before_and_after", False)):
        raise BadValueError(
            f"{hook}{' -> ' + target if target else ''} is no module sparsify hooks (a layer's output, an SAE on its "
            "MLP or attention output, or a transcoder of a layer, its MLP or its attention)"
        )
    return point


def sparsify_tensors(sae, affine=None) -> tuple[dict, dict]:
    """(cfg.json, sae.safetensors tensors) of a Top-k SAELens SAE or transcoder in sparsify's layout: encoder.weight
    [n, d_in] (W_enc transposed), W_dec [n, d_in] as it is; the encoder's input offsets folded into its bias (sparsify
    subtracts b_dec from an SAE's input and nothing from a transcoder's); `affine`: the norm after its hook, which
    the Hugging Face module sparsify hooks reads (ln_affine), unfolded."""
    c = sae.cfg
    transcode = getattr(c, "d_out", None) is not None
    topk = c.architecture() == "topk" or getattr(c, "base", None) == "topk"
    refusals = (
        (not topk, "its codes are not Top-k"),
        (getattr(c, "scaffold_rank", 0), "it has a scaffold"),
        (getattr(c, "rescale_acts_by_decoder_norm", False), "it rescales codes by decoder norm"),
        (getattr(c, "normalize_activations", "none") != "none", "it normalises its input"),
        (transcode and c.d_out != c.d_in, "its output is not as wide as its input (sparsify maps d_in to d_in)"),
    )
    why = next((reason for refused, reason in refusals if refused), None)
    if why:
        raise BadValueError(f"the {c.architecture()} dictionary does not export to sparsify: {why}")
    W_enc, b_enc, b_dec = sae.W_enc.detach().float(), sae.b_enc.detach().float(), sae.b_dec.detach().float()
    if transcode:
        b_in = getattr(sae, "b_in", None)
        bias = b_enc - (0 if b_in is None else b_in.detach().float() @ W_enc)
    else:
        bias = b_enc + (0.0 if c.apply_b_dec_to_input else 1.0) * (b_dec @ W_enc)
    state = {"W_enc": W_enc, "b_enc": bias, "b_dec": b_dec}
    if getattr(sae, "W_skip", None) is not None:
        state["W_skip"] = sae.W_skip.detach().float()
    state = fold_affine(state, affine, inverse=True)
    tensors = {"encoder.weight": state["W_enc"].T, "encoder.bias": state["b_enc"], "W_dec": sae.W_dec.detach().float()}
    tensors |= {"b_dec": state["b_dec"], **({"W_skip": state["W_skip"]} if "W_skip" in state else {})}
    cfg = {
        "activation": "topk",
        "expansion_factor": max(1, c.d_sae // c.d_in),
        "normalize_decoder": False,
        "num_latents": c.d_sae,
        "k": int(c.k),
        "multi_topk": False,
        "skip_connection": "W_skip" in tensors,
        "transcode": transcode,
        "d_in": c.d_in,
    }
    return cfg, {k: v.contiguous().cpu() for k, v in tensors.items()}
