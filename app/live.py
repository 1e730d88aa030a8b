"""What the app computes live from a model: cached model and SAE loading, the model a file names, a circuit
node's evidence (attention pattern, direct logit effect, SAE features at the answer position), a typed
prompt's features, and uploads checked against their model. The only app module that imports torch
(inside the functions); the maths itself is workbench's (workbench.circuits.component.evidence).

Attention patterns are computed here from the model, not stored with circuits: a pattern is
layers x heads x n^2 numbers per prompt (GPT-2 small at 128 tokens: 2.4M, more than the circuit
file), it is needed only for the node a user clicks, and one cached forward pass gives all of them.
Live results are cached with st.cache_resource, shared and never copied (st.cache_data would unpickle a copy of
the patterns on every run): they are read-only, no caller changes them. Cached models are shared by every
session: every use of one (a forward pass here, a circuit search on the Run page, which adds hooks) holds that
model's lock, so two tabs never run one model at once; runs here are under torch.no_grad (not inference_mode,
whose tensors a later search could not update).
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path

import streamlit as st

import workbench
from app import state
from app.figures import circuit as cg
from workbench.circuits import schema
from workbench.errors import DamagedFileError, UserError

MAX_UPLOAD_BYTES = 64 * 2**20
WORKBENCH = Path(workbench.__file__).resolve().parent


class ModelNotFound(UserError):
    """A file names a model that is neither the embedded one nor a saved model in the workspace."""


@st.cache_resource(
    show_spinner="loading the model (the first time on this server it also imports torch)...", max_entries=4
)
def load_model(spec: str):
    """(model, model id, lock): the lock serialises runs of this shared model across sessions."""
    from workbench.models import load, model_id

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # library deprecation notes are not the user's business
        model, _ = load(spec, device="cpu")
    model.eval()
    return model, model_id(model), threading.Lock()


@st.cache_resource(show_spinner="loading the SAE...", max_entries=8)
def load_sae(path: str, stamp: float):
    from workbench.sae.io import load_sae as load

    return load(path, device="cpu").eval(), threading.Lock()


def model_specs() -> list[str]:
    """The models the app can run: the embedded one and each recorded model of the workspace (absolute paths)."""
    return ["tiny"] + [str(state.resolve(m)) for m in state.catalog().models]


def spec_of(model_id: str, what: str = "this SAE") -> str:
    """The spec (tiny or a workspace model's path) of the model whose id is `model_id`, or ModelNotFound. A model's id
    hashes its weights, so a candidate is loaded to be told apart: the specs the manifests record beside the id are
    tried first, and the rest (each one loaded) only when none of them is it."""
    specs = model_specs()
    recorded = [s for s in state.specs_recorded(model_id) if s in specs]
    for spec in recorded + [s for s in specs if s not in recorded]:  # the recorded one first: one model loaded
        try:
            if load_model(spec)[1] == model_id:
                return spec
        except (UserError, ValueError, OSError):
            continue
    raise ModelNotFound(
        f"the model {what} reads ({model_id}) is neither the embedded model nor a saved model in the workspace's "
        "models/ folder, so it cannot run here"
    )


def sae_for(rel: str):
    folder = state.resolve(rel)
    return load_sae(str(folder), (folder / "sae_weights.safetensors").stat().st_mtime)


@st.cache_resource(show_spinner=False, max_entries=32)
def run_prompt(spec: str, tokens: tuple[int, ...]) -> dict:
    """One forward pass: attention patterns [L][H][q][k] and each head's and MLP's direct logit effect at the
    last position (evidence.direct_logit_effects), with the tokens as strings."""
    import torch

    from workbench.circuits.component import evidence

    model, _, lock = load_model(spec)
    toks = torch.tensor(tokens)
    with lock, torch.no_grad():
        patterns, dla = evidence.patterns_and_logit_effects(model, toks)
        str_tokens = model.to_str_tokens(toks)
        vocab = model.to_str_tokens(torch.arange(model.cfg.d_vocab))
    return {
        "patterns": patterns.numpy(),
        "dla": {n: v.numpy() for n, v in dla.items()},
        "str_tokens": str_tokens,
        "vocab": vocab,
    }


@st.cache_resource(show_spinner=False, max_entries=32)
def gates(spec: str, tokens: tuple[int, ...]):
    """A gated model's deterministic gates [L][H][q][k] (1 open, 0 closed) on the tokens; None when ungated."""
    import torch

    from workbench.attention.gates import is_gated

    model, _, lock = load_model(spec)
    if not is_gated(model):
        return None
    with lock, torch.no_grad():
        _, cache = model.run_with_cache(torch.tensor([tokens]), names_filter=lambda n: n.endswith("hook_gate"))
    return torch.stack([cache[f"blocks.{i}.attn.hook_gate"][0] for i in range(model.cfg.n_layers)]).bool().numpy()


def tokenize(spec: str, text: str) -> tuple[int, ...]:
    """A typed prompt as token ids, as the CLI reads it (inputs.tokens_of): a word outside the vocabulary is
    named with suggestions, a prompt longer than the context refused; TransformerLens would cut the first
    silently and turn the second into <unk>. A UserError otherwise."""
    from workbench.circuits.inputs import tokens_of

    return tuple(tokens_of(load_model(spec)[0], text).tolist())


@st.cache_resource(show_spinner="running the SAE...", max_entries=64)
def sae_codes(spec: str, tokens: tuple[int, ...], sae_rel: str, hook: str, stamp: float):
    """[pos, units] activations of the SAE's units (latents, or block norms; scaffold directions left out)."""
    import torch

    model, _, lock = load_model(spec)
    sae, sae_lock = sae_for(sae_rel)
    with lock, sae_lock, torch.no_grad():
        _, cache = model.run_with_cache(torch.tensor([tokens]), names_filter=hook)
        z = sae.encode(cache[hook][0].to(sae.dtype)).float()
    z = z[:, : sae.cfg.d_sae - int(getattr(sae.cfg, "scaffold_rank", 0))]
    b = int(getattr(sae.cfg, "block_size", 1))
    return (z.view(len(z), -1, b).norm(dim=-1) if b > 1 else z).numpy()


def stream_features(spec: str, tokens: tuple[int, ...], sae_rel: str, hook: str, k: int = 8) -> list[tuple[int, float]]:
    """The SAE's k most active units at the answer (last) position, strongest first."""
    a = sae_codes(spec, tokens, sae_rel, hook, state.stamp(sae_rel))[-1]
    idx = a.argsort()[::-1][:k]
    return [(int(i), float(a[i])) for i in idx if a[i] > 0]


def find_circuit(spec: str, prompt: str, answer: str, counterfactual: str | None, transcoders=None, **kwargs):
    """steps.circuits.find_circuit (or, with a transcoder set folder, its find_feature_circuit) into the workspace,
    holding the model's lock (the search adds hooks to the shared model); returns (circuit, folder, the finder's
    own warnings as text)."""
    from workbench.steps.circuits import find_circuit, find_feature_circuit

    def run(ws, model):
        if transcoders is None:
            return find_circuit(ws, model, prompt, answer, counterfactual, model_spec=spec, **kwargs)
        circuit, _, folder = find_feature_circuit(
            ws, model, transcoders, prompt, answer, counterfactual, model_spec=spec, **kwargs
        )
        return circuit, folder

    (circuit, folder), notes = _in_workspace(spec, run)
    return circuit, folder, notes


def graph_steps(spec: str, dictionary: Path, prompt: str, answer: str | None, name: str, on_step) -> tuple:
    """`workbench circuit graph` then `workbench circuit check` on the new graph, as the CLI runs them (the same step
    functions, the config defaults, the dictionary's first member): recorded in the workspace as one circuit artifact.
    `on_step(text)` is called as each stage starts, and `on_step(text, within)` as the check measures each node and
    edge (within: the share of the check done, in [0, 1)). Returns (graph, folder, check record, the steps' own
    warnings)."""
    from workbench.interventions.check import CHECK_STAGES
    from workbench.interventions.config import CheckConfig
    from workbench.steps.graphs import attribution_graph, check_graph

    def tick(stage: str, i: int, n: int) -> None:
        within = (CHECK_STAGES.index(stage) + i / max(n, 1)) / len(CHECK_STAGES)
        on_step(f"checking by interventions: {stage} {i + 1} of {n}" if n > 1 else f"checking the {stage}", within)

    def run(ws, model):
        on_step("building the attribution graph (a backward pass per kept row)")
        g, folder = attribution_graph(ws, model, dictionary, prompt, answer, model_spec=spec, name=name)
        on_step("checking its nodes and top edges by interventions in the model")
        return g, folder, check_graph(ws, model, folder / "graph.json", dictionary, CheckConfig(), progress=tick)

    (g, folder, record), notes = _in_workspace(spec, run)
    return g, folder, record, notes


def _in_workspace(spec: str, run) -> tuple:
    """`run(workspace, model)` holding the model's lock (a step adds hooks to the shared model); returns (its result,
    the workbench's own warnings as text). Library warnings (deprecations, torch internals) stay in the server log:
    they are not the user's to act on."""
    from workbench.workspace import Workspace

    model, _, lock = load_model(spec)
    with lock, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = run(Workspace(state.root()), model)
    notes = [str(w.message) for w in caught if _from_workbench(w)]
    for w in caught:
        if not _from_workbench(w):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return out, notes


def _from_workbench(w: warnings.WarningMessage) -> bool:
    return issubclass(w.category, UserWarning) and Path(w.filename).resolve().is_relative_to(WORKBENCH)


def check_upload(name: str, raw: bytes, mib_spec: str) -> dict:
    """Validate an uploaded circuit file completely, once (schema.read against the model it names: its shape,
    its vocabulary); returns the session entry, keyed by content. Raises UserError with one line."""
    if len(raw) > MAX_UPLOAD_BYTES:
        raise UserError(
            f"{name} is {len(raw) / 2**20:.1f} MiB; circuit uploads are limited to {MAX_UPLOAD_BYTES >> 20} MiB"
        )
    d = schema.loads(raw, name, MAX_UPLOAD_BYTES)
    fmt = schema.detect(d)
    if fmt == "workbench" and d.get("model_id"):
        spec = spec_of(str(d["model_id"]), f"the circuit in {name}")
    elif fmt == "neuronpedia":
        scan = d["metadata"].get("scan") if isinstance(d.get("metadata"), dict) else None
        spec = spec_of(str(scan), f"the graph in {name}")
    else:
        spec = mib_spec
    model, mid, _ = load_model(spec)
    from workbench.circuits.component.graph import Graph

    shape = schema.GraphShape(**Graph.from_model(model).config())
    try:
        rec = schema.read(d, shape=shape, d_vocab=model.cfg.d_vocab)
    except DamagedFileError as e:
        raise DamagedFileError(f"{name}: {e}") from None
    if rec.model_id and rec.model_id != mid and fmt == "workbench":
        raise UserError(f"{name} was found on model {rec.model_id!r}, not on {mid!r}")
    rec.model_id = rec.model_id or mid
    return {"name": name, "format": fmt, "data": cg.from_record(rec), "raw": raw, "stamp": state.upload_key(raw)}


@st.cache_resource(show_spinner="loading the dictionary...", max_entries=8)
def _sites(spec: str, folder: str, stamp: float) -> list:
    from workbench.interventions.dictionary import load_dictionary

    return load_dictionary(folder, load_model(spec)[0])


@st.cache_data(show_spinner=False, max_entries=32)
def intervene(spec: str, dictionary: str, prompt: str, cfg: dict) -> dict:
    """workbench.interventions' result of `cfg` (an InterventionConfig's dict) on `prompt` through the dictionary
    folder (workspace-relative); ablate_to mean takes its means from the cache the dictionary was trained on."""
    from workbench.cache.reader import ActivationCache
    from workbench.interventions.config import InterventionConfig
    from workbench.interventions.engine import Intervention

    cfg = InterventionConfig.from_dict(cfg)
    model, _, lock = load_model(spec)
    source = ActivationCache.open(state.training_cache(dictionary)) if cfg.ablate_to == "mean" else None
    sites = _sites(spec, str(state.resolve(dictionary)), state.stamp(dictionary))
    with lock:
        return Intervention(model, sites, prompt, cfg, source).run()


def token_str(spec: str, token: int) -> str:
    return load_model(spec)[0].to_single_str_token(int(token))


def decode(spec: str, ids: list[int]) -> str | None:
    """Token ids as text the model's tokenizer reads back as them (a leading start token dropped: a prompt gets its
    own); None for a model without a tokenizer."""
    tok = load_model(spec)[0].tokenizer
    if tok is None:
        return None
    ids = [int(i) for i in ids]
    while ids and ids[0] == tok.bos_token_id:
        ids = ids[1:]
    return tok.decode(ids)


def graph_effect(graph, nodes: list[str], result: dict) -> dict:
    """An intervention's change of an attribution graph's metric (the one its check used; target minus the mean
    logit by default) at the last position, with the graph's prediction for ablating `nodes` (summed) and what the
    graph's stored check measured for each in the live model, as this ablation runs (None: not checked)."""
    import torch

    from workbench.interventions.check import GraphNodes

    check = graph.check or {}
    metric = check.get("config", {}).get("metric", "target")
    g = GraphNodes({"nodes": graph.nodes, "links": graph.links}, metric, tokens=result["tokens"])
    last = result["positions"][-1]
    measured = g.metric(torch.tensor(last["logits"])) - g.metric(torch.tensor(last["clean_logits"]))
    predicted = g.predicted(graph.links)
    live_only = check.get("semantics", "live") == "live"  # one reading (both_readings off) may be the frozen one
    checked = {
        r["node_id"]: r.get("measured_live", r["measured"] if live_only else None) for r in check.get("nodes", [])
    }
    return {
        "metric": metric,
        "measured": measured,
        "predicted": sum(predicted.get(n, 0.0) for n in nodes),
        "checked": [checked.get(n) for n in nodes],
    }


@st.cache_resource(show_spinner="proposing groups, each ablated in the model...", max_entries=8)
def propose_groups(spec: str, dictionary: str, key: tuple, _graph: dict, threshold: float) -> dict:
    """`workbench circuit group`'s proposals for a graph (key: its name and version; _graph: its nodes and links)
    through the dictionary folder (workspace-relative) it was built with, each checked by joint ablation; nothing
    is written (the CLI stores them). Co-activation reads the dictionary's training cache where the workspace has it;
    labels come from its members' feature stores."""
    import torch

    from workbench.cache.reader import ActivationCache
    from workbench.circuits.feature.graph_config import GroupConfig
    from workbench.circuits.feature.grouping import propose, store_labels
    from workbench.interventions.check import FEATURE

    cfg = GroupConfig(threshold=threshold)
    model, _, lock = load_model(spec)
    sites = _sites(spec, str(state.resolve(dictionary)), state.stamp(dictionary))
    try:
        cache = ActivationCache.open(state.training_cache(dictionary))
    except UserError:
        cache = None  # the record's signals_used says co-activation is missing
    feats = {
        (int(n["layer"]), int(n["node_id"].split("_")[1])) for n in _graph["nodes"] if n["feature_type"] == FEATURE
    }
    try:
        labels = store_labels(state.resolve(dictionary), feats, cfg)
    except UserError:
        labels = None
    with lock, torch.no_grad():
        return propose(model, sites, _graph, cfg, cache=cache, labels=labels)
