"""The workbench's transcoders and models in circuit-tracer's objects (its TranscoderSet or CrossLayerTranscoder,
and its TransformerLens ReplacementModel), so circuit-tracer's own `attribute` can run on the same model, prompt
and dictionary as `build_graph` (bench/circuits/feature_circuit_bench.py compares the two), and a set as circuit-tracer's
files (`workbench sae export --format circuit-tracer`). circuit-tracer is imported here only.

Exact for Top-k transcoders without a scaffold: the encoder's input bias folds into its bias, the transcoders
read the same hook (ln2.hook_normalized) and write hook_mlp_out. A CLT goes through circuit-tracer's own
`load_clt`, reading the files the workbench writes in its format (workbench.sae.clt_io: BatchTopK CLTs, JumpReLU
at their threshold, without skip path or scaffold)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch

from workbench.circuits.feature.transcoders import CrossLayerTranscoders, Transcoder, Transcoders, resolve
from workbench.dictionaries.kinds import TRANSCODERS, named
from workbench.errors import BadValueError
from workbench.sae.hub import tracer_importable as importable

JUMPRELU = ("jumprelu_transcoder", "jumprelu_skip_transcoder")


class TopKReLU(torch.nn.Module):
    """The workbench's Top-k rule: the k largest pre-activations, negatives zeroed (circuit-tracer's TopK keeps
    them)."""

    def __init__(self, k: int):
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        top = x.topk(self.k, dim=-1)
        return torch.zeros_like(x).scatter(-1, top.indices, top.values.relu())


def _activation(t: Transcoder):
    """circuit-tracer's activation for a member: the Top-k rule for the workbench's Top-k transcoders, JumpReLU at the
    threshold for SAELens's JumpReLU transcoders (BatchTopK, Matryoshka and imported sets save as those)."""
    from circuit_tracer.transcoder.activation_functions import JumpReLU

    cfg = t.sae.cfg
    if getattr(cfg, "scaffold_rank", 0):
        raise BadValueError(f"layer {t.layer}'s transcoder has a rank-{cfg.scaffold_rank} scaffold: it does not export")
    if getattr(cfg, "normalize_activations", "none") != "none":
        raise BadValueError(f"layer {t.layer}'s transcoder normalises its input ({cfg.normalize_activations})")
    if getattr(cfg, "base", None) == "topk":
        return TopKReLU(cfg.k)
    if cfg.architecture() in JUMPRELU and bool((t.sae.threshold >= 0).all()):
        return JumpReLU(t.sae.threshold.detach().float().clone(), 0.1)
    raise BadValueError(
        f"layer {t.layer}'s transcoder is {cfg.architecture()!r}: only Top-k and JumpReLU transcoders (threshold >= 0) "
        "export to circuit-tracer"
    )


def transcoder_set(model, transcoders: Transcoders):
    """circuit-tracer's TranscoderSet of a workbench per-layer transcoder set (float32, on the model's device)."""
    importable()
    from circuit_tracer.transcoder.single_layer_transcoder import SingleLayerTranscoder, TranscoderSet

    tcs = resolve(transcoders, model)
    if tcs.kind is not TRANSCODERS:
        raise BadValueError(f"{type(tcs).__name__} is not a per-layer set: only those export to a TranscoderSet")
    tcs = tcs.members
    hook = _input_hook(t.input_hook for t in tcs)
    out = {}
    for t in tcs:
        s, skip = t.sae, getattr(t.sae, "W_skip", None)
        ct = SingleLayerTranscoder(
            s.cfg.d_in,
            s.cfg.d_sae,
            _activation(t),
            t.layer,
            skip is not None,
            device=model.cfg.device,
            dtype=torch.float32,
        )
        b_in = getattr(s, "b_in", None)
        with torch.no_grad():
            ct.W_enc.copy_(s.W_enc.T)
            ct.b_enc.copy_(s.b_enc - (0 if b_in is None else b_in @ s.W_enc))
            ct.W_dec.copy_(s.W_dec)
            ct.b_dec.copy_(s.b_dec)
            if skip is not None:
                ct.W_skip.copy_(skip)
        out[t.layer] = ct
    return TranscoderSet(out, feature_input_hook=hook, feature_output_hook="hook_mlp_out")


def _input_hook(hooks) -> str:
    """The one hook name (within a block) every layer's dictionary reads: circuit-tracer reads one."""
    names = {h.split(".", 2)[-1] for h in hooks}
    if len(names) != 1:
        raise BadValueError(f"the transcoders read different hooks {sorted(names)}: circuit-tracer reads one")
    return names.pop()


def cross_layer_transcoder(model, clt: CrossLayerTranscoders):
    """circuit-tracer's CrossLayerTranscoder of a workbench CLT, read by circuit-tracer's load_clt from the CLT's
    circuit_tracer/ folder (written there again, to a temporary folder, for a CLT built in memory)."""
    importable()
    from circuit_tracer.transcoder.cross_layer_transcoder import load_clt

    from workbench.sae.clt_io import TRACER, tracer_unsupported, write_circuit_tracer

    why = tracer_unsupported(clt.clt.cfg)
    if why is not None:
        raise BadValueError(f"the CLT {clt.clt.cfg.name!r} does not export to circuit-tracer: {why}")
    hook = _input_hook(clt.hooks)
    options = dict(feature_input_hook=hook, device=model.cfg.device, dtype=torch.float32, lazy_decoder=False)
    folder = None if clt.source is None else clt.source.folder / TRACER
    if folder is not None and folder.is_dir():
        return load_clt(str(folder), **options)
    with tempfile.TemporaryDirectory() as tmp:
        write_circuit_tracer(clt.clt, Path(tmp), {})
        return load_clt(tmp, **options)  # lazy_decoder=False: every tensor is read before the folder goes


def write_transcoder_set(model, transcoders: Transcoders, folder) -> Path:
    """The set as circuit-tracer's files: layer_<i>.safetensors (its own `to_safetensors`) and a config.yaml whose
    `transcoders` are the file names (circuit-tracer resolves them from the working directory; `sae import` from
    the folder). Its file loaders read ReLU and JumpReLU codes only, so a Top-k set is refused, not approximated."""
    from workbench.atomic import atomic_path, atomic_write_text

    cts = transcoder_set(model, transcoders)
    topk = [i for i, t in enumerate(cts.transcoders) if isinstance(t.activation_function, TopKReLU)]
    if topk:
        raise BadValueError(
            f"layer {topk[0]}'s transcoder is Top-k: circuit-tracer 0.5's file loaders read ReLU and JumpReLU codes "
            "only, so it would load as ReLU; export a BatchTopK set (JumpReLU at its threshold) instead"
        )
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"layer_{i}.safetensors" for i in range(len(cts.transcoders))]
    for ct, name in zip(cts.transcoders, names):
        with atomic_path(folder / name) as tmp:
            ct.to_safetensors(str(tmp))
    lines = [
        "model_kind: transcoder_set",
        f"model_name: {json.dumps(model.cfg.model_name)}",
        f"scan: {json.dumps(model.cfg.model_name)}",
        f"feature_input_hook: {json.dumps(cts.feature_input_hook)}",
        f"feature_output_hook: {json.dumps(cts.feature_output_hook)}",
        "transcoders:",
        *(f"  - {n}" for n in names),
    ]
    atomic_write_text(folder / "config.yaml", "\n".join(lines) + "\n")  # written last: the set is complete with it
    return folder


def _renamed(key: str, rename) -> str:
    """A TransformerLens weight's name once circuit-tracer has wrapped its MLPs and unembedding."""
    for old, new in rename:
        key = key.replace(old, new) if old in key and new not in key else key
    return key


def replacement_model(model, transcoders: Transcoders):
    """circuit-tracer's TransformerLens ReplacementModel with `model`'s config and weights and the dictionary (a
    per-layer set or a CLT)."""
    importable()
    from circuit_tracer.replacement_model.replacement_model_transformerlens import TransformerLensReplacementModel

    tcs = resolve(transcoders, model)
    theirs = named(tcs.kind.export)(model, tcs)
    ct = TransformerLensReplacementModel.from_config(model.cfg, theirs)
    ct.tokenizer = model.tokenizer
    rename = ((".mlp.", ".mlp.old_mlp."), ("unembed.", "unembed.old_unembed."))
    state = {_renamed(k, rename): v for k, v in model.state_dict().items()}
    missing, unexpected = ct.load_state_dict(state, strict=False)
    if unexpected or any(not k.startswith("transcoders.") for k in missing):
        raise BadValueError(f"circuit-tracer's model does not match this model's weights: {missing, unexpected}")
    return ct.eval()


def shared_edges(ours, theirs) -> dict:
    """How a workbench AttributionGraph and circuit-tracer's Graph of the same prompt and targets agree: the
    largest difference between their entries on the nodes both have (features off position 0, which
    circuit-tracer leaves out, errors and tokens off position 0, logits), relative to the largest entry."""
    if ours.logit_tokens != [t.vocab_idx for t in theirs.logit_targets]:
        raise BadValueError(f"the graphs have other target logits: {ours.logit_tokens} vs {theirs.logit_targets}")
    P, L = ours.n_pos, ours.n_layers
    key = {tuple(f): i for i, f in enumerate(theirs.active_features[theirs.selected_features].tolist())}
    mine = [(i, key[tuple(f)]) for i, f in enumerate(ours.features.tolist()) if tuple(f) in key]
    n_t = len(theirs.selected_features)
    rows_o = [i for i, _ in mine] + [ours.n_features + j for j in range(len(ours.logit_tokens))]
    rows_t = [j for _, j in mine] + [n_t + L * P + P + j for j in range(len(ours.logit_tokens))]
    cols_o = [i for i, _ in mine] + list(range(ours.n_features, ours.n_sources))
    cols_t = [j for _, j in mine] + list(range(n_t, n_t + L * P + P))
    a = ours.adjacency[rows_o][:, cols_o]
    b = theirs.adjacency_matrix.float()[rows_t][:, cols_t]
    off_bos = torch.ones(a.shape[1], dtype=torch.bool)
    off_bos[len(mine) :: P] = False  # each layer's error and the token at position 0
    a, b = a[:, off_bos], b[:, off_bos]
    return {
        "shared_features": len(mine),
        "shared_entries": a.numel(),
        "max_rel_diff": float((a - b).abs().max() / b.abs().max().clamp_min(1e-30)),
    }
