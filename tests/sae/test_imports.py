"""`sae import`: SAELens folders made by sae_lens's own classes, from outside the workspace, checked against
and bound to a workbench model, equal to sae_lens's own codes, and usable by `features build` and `sae eval`."""

import json

import pytest
import torch

from tests.small_models import small_model
from workbench import browse
from workbench.cli import main
from workbench.errors import BadValueError
from workbench.models import save
from workbench.provenance import model_id
from workbench.sae.io import load_sae
from workbench.steps.cache import make_cache
from workbench.steps.dictionaries import evaluate_sae
from workbench.steps.exchange import import_sae
from workbench.steps.features import build_features
from workbench.workspace import Workspace

RESID, MLP_IN, MLP_OUT = "blocks.1.hook_resid_post", "blocks.0.ln2.hook_normalized", "blocks.0.hook_mlp_out"


def _saelens_folders(out) -> dict:
    """One folder per architecture, written by sae_lens's own save_model, with random non-zero weights."""
    import sae_lens as sl
    from sae_lens.saes.sae import SAEMetadata

    def meta(**hooks):
        return SAEMetadata(model_name="someone/their-model", **hooks)

    sae_in, tc_in = {"d_in": 32, "d_sae": 64}, {"d_in": 32, "d_sae": 64, "d_out": 32, "apply_b_dec_to_input": False}
    tc = {"hook_name": MLP_IN, "hook_name_out": MLP_OUT}
    made = {
        "standard": sl.StandardSAE(sl.StandardSAEConfig(**sae_in, metadata=meta(hook_name=RESID))),
        "gated": sl.GatedSAE(sl.GatedSAEConfig(**sae_in, metadata=meta(hook_name=RESID))),
        "jumprelu": sl.JumpReLUSAE(sl.JumpReLUSAEConfig(**sae_in, metadata=meta(hook_name=RESID))),
        "topk": sl.TopKSAE(sl.TopKSAEConfig(**sae_in, k=4, metadata=meta(hook_name=RESID))),
        "transcoder": sl.JumpReLUTranscoder(sl.JumpReLUTranscoderConfig(**tc_in, metadata=meta(**tc))),
        "skip_transcoder": sl.JumpReLUSkipTranscoder(sl.JumpReLUSkipTranscoderConfig(**tc_in, metadata=meta(**tc))),
    }
    torch.manual_seed(0)
    for name, sae in made.items():
        with torch.no_grad():
            for p in sae.parameters():
                p.copy_(0.3 * torch.randn_like(p) + (0.1 if p.ndim == 1 else 0.0))
        sae.save_model(str(out / name))
    return {name: out / name for name in made}


@pytest.fixture(scope="module")
def bound(tmp_path_factory, tokenizer):
    """A saved small model (d_model 32) in a workspace, and SAELens folders outside it."""
    root = tmp_path_factory.mktemp("imports")
    model = small_model(tokenizer)
    ws = Workspace(root / "ws")
    folder = save(model, ws.path("models", "small"))
    ws.record(folder, "models", made_by="test", config={})
    return ws, model, str(folder), _saelens_folders(root / "elsewhere")


@pytest.mark.parametrize("arch", ["standard", "gated", "jumprelu", "topk", "transcoder", "skip_transcoder"])
def test_a_saelens_folder_imports_equal_to_sae_lens_and_bound_to_the_model(bound, arch):
    from sae_lens import SAE

    ws, model, spec, src = bound
    summary, folder = import_sae(ws, src[arch], spec, model=model)
    assert summary["max_abs_diff_vs_source"] == 0.0
    x = torch.randn(50, 32, generator=torch.Generator().manual_seed(1)) * 3
    theirs, ours = SAE.load_from_disk(str(src[arch])), load_sae(folder)
    torch.testing.assert_close(ours.encode(x), theirs.encode(x), atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.decode(ours.encode(x)), theirs.decode(theirs.encode(x)), atol=1e-5, rtol=0)
    meta = json.loads((folder / "cfg.json").read_text())["metadata"]
    assert meta["model_name"] == model_id(model) and meta["source_model_name"] == "someone/their-model"
    assert f"saes/imported/{arch}" in browse.catalog(ws.root).saes
    assert browse.open_sae(folder).model_name == model_id(model)


def test_an_imported_sae_builds_features_and_evaluates(bound):
    from workbench.cache.config import HarvestConfig

    ws, model, spec, src = bound
    _, folder = import_sae(ws, src["topk"], spec, model=model, name="for-features")
    cache = make_cache(
        ws, spec, "synthetic", [RESID], HarvestConfig(n_tokens=3000, heldout_fraction=0.3), progress=False, model=model
    )
    metrics = evaluate_sae(ws, folder, cache.path, spec)
    assert 0 <= metrics["reconstruction"]["l0"] <= 4
    build_features(ws, [folder], cache.path, spec, progress=False)
    assert (folder / "features").is_dir()


def test_what_does_not_fit_is_refused_by_name(bound, tmp_path, capsys):
    ws, model, spec, src = bound
    cfg = json.loads((src["standard"] / "cfg.json").read_text())
    for key, value, match in (
        ("hook_name", "blocks.9.hook_resid_post", "does not have; its hooks: hook_embed"),
        ("hook_name", "blocks.0.mlp.hook_post", "is 64 wide: it was made for another model"),
    ):
        bad = tmp_path / value
        bad.mkdir()
        (bad / "sae_weights.safetensors").write_bytes((src["standard"] / "sae_weights.safetensors").read_bytes())
        (bad / "cfg.json").write_text(json.dumps({**cfg, "metadata": {**cfg["metadata"], key: value}}))
        with pytest.raises(BadValueError, match=match):
            import_sae(ws, bad, spec, model=model)
    sparsify = tmp_path / "sparsify-layer"
    sparsify.mkdir()
    (sparsify / "cfg.json").write_text("{}")
    (sparsify / "sae.safetensors").write_bytes(b"")
    assert main(["sae", "import", str(sparsify), "--workspace", str(ws.root), "--model", spec]) == 2
    err = capsys.readouterr().err
    assert "one sparsify hookpoint without its run's config.json naming it" in err and len(err.splitlines()) == 1
    assert main(["sae", "import", str(src["standard"]), "--workspace", str(ws.root), "--format", "sparsify"]) == 2
    assert "not a sparsify folder: it looks like a saelens folder" in capsys.readouterr().err


def _tracer_set(out, layers: int, skip: bool) -> None:
    """A transcoder set written by circuit-tracer's own classes: JumpReLU on layer 0, ReLU after, random weights."""
    import yaml
    from circuit_tracer.transcoder.activation_functions import JumpReLU
    from circuit_tracer.transcoder.single_layer_transcoder import SingleLayerTranscoder, TranscoderSet

    torch.manual_seed(0)
    tcs = {}
    for i in range(layers):
        act = JumpReLU(torch.rand(64) * 0.2, 0.1) if i == 0 else torch.nn.functional.relu
        tc = SingleLayerTranscoder(
            32, 64, act, i, skip_connection=skip, device=torch.device("cpu"), dtype=torch.float32
        )
        with torch.no_grad():
            for p in tc.parameters():
                p.copy_(0.3 * torch.randn_like(p))
            if i == 0:
                act.threshold.abs_()  # thresholds are non-negative (a negative one is refused: SAELens cannot hold it)
        tcs[i] = tc
    TranscoderSet(
        tcs, feature_input_hook="ln2.hook_normalized", feature_output_hook="hook_mlp_out", scan="s"
    ).to_safetensors(str(out))
    hooks = {"feature_input_hook": "ln2.hook_normalized", "feature_output_hook": "hook_mlp_out"}
    (out / "config.yaml").write_text(yaml.safe_dump({"model_name": "someone/their-model", **hooks}))


@pytest.mark.parametrize("skip", [False, True])
def test_a_circuit_tracer_set_imports_equal_to_circuit_tracer_and_draws_a_graph(bound, tmp_path, capsys, skip):
    from circuit_tracer.transcoder.single_layer_transcoder import load_relu_transcoder

    from workbench.sae.transcoders import load_set

    ws, model, spec, _ = bound
    _tracer_set(tmp_path / "tracer", 2, skip)
    name = f"tracer-skip-{skip}"
    summary, folder = import_sae(ws, tmp_path / "tracer", spec, model=model, name=name)
    assert summary["max_abs_diff_vs_source"] < 1e-5 and summary["transcoders"] == 2
    manifest = load_set(folder)
    assert manifest["model"] == model_id(model) and [e["target_hook"] for e in manifest["layers"]] == [
        "blocks.0.hook_mlp_out",
        "blocks.1.hook_mlp_out",
    ]
    x = torch.randn(40, 32, generator=torch.Generator().manual_seed(2)) * 3
    for e in manifest["layers"]:
        theirs = load_relu_transcoder(
            str(tmp_path / "tracer" / f"layer_{e['layer']}.safetensors"),
            e["layer"],
            device=torch.device("cpu"),
            lazy_encoder=False,
            lazy_decoder=False,
        )
        ours = load_sae(folder / e["transcoders"][0])
        torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=0)
    assert f"transcoders/{name}" in browse.catalog(ws.root).transcoder_sets
    graph = ["circuit", "graph", "--transcoders", str(folder), "--model", spec, "--workspace", str(ws.root)]
    assert main([*graph, "--prompt", "When Mary and John went to the store", "--name", name]) == 0, capsys.readouterr()


def test_a_negative_jumprelu_threshold_is_refused_not_converted_wrongly(bound, tmp_path):
    from safetensors.torch import load_file, save_file

    ws, model, spec, _ = bound
    _tracer_set(tmp_path / "tracer", 1, False)
    w = load_file(str(tmp_path / "tracer" / "layer_0.safetensors"))
    w["activation_function.threshold"][:3] = -0.1
    save_file(w, str(tmp_path / "tracer" / "layer_0.safetensors"))
    with pytest.raises(BadValueError, match="3 JumpReLU thresholds are negative"):
        import_sae(ws, tmp_path / "tracer", spec, model=model, name="negative")


def _tracer_clt(out, n_layers: int, thresholds: str) -> None:
    """A CLT written by circuit-tracer's own CrossLayerTranscoder.to_safetensors: random weights, JumpReLU with one
    threshold per layer or one per latent (and a config.yaml naming its hooks), or ReLU (no config: load_clt's
    default hooks)."""
    import yaml
    from circuit_tracer.transcoder.cross_layer_transcoder import CrossLayerTranscoder

    torch.manual_seed(0)
    jump = thresholds != "relu"
    act = "jump_relu" if jump else "relu"
    clt = CrossLayerTranscoder(
        n_layers, 64, 32, act, lazy_decoder=False, device=torch.device("cpu"), dtype=torch.float32
    )
    with torch.no_grad():
        for p in clt.parameters():
            p.copy_(0.3 * torch.randn_like(p))
        if jump:
            for i in range(n_layers):
                per_latent = thresholds == "per_latent"
                clt.activation_function.threshold[i] = torch.rand(64) * 0.4 if per_latent else 0.1 * (i + 1)
    clt.to_safetensors(str(out))
    if jump:
        hooks = {"feature_input_hook": "ln2.hook_normalized", "feature_output_hook": "hook_mlp_out"}
        (out / "config.yaml").write_text(yaml.safe_dump({"model_kind": "cross_layer_transcoder", **hooks}))


@pytest.mark.parametrize("thresholds", ["per_layer", "per_latent", "relu"])
def test_a_circuit_tracer_clt_imports_equal_to_circuit_tracer_and_draws_a_graph(bound, tmp_path, capsys, thresholds):
    """circuit-tracer's own files (its to_safetensors) become a workbench CLT: every layer's codes and
    reconstruction equal to circuit-tracer's load_clt, the folder read through the dictionary seam, a graph drawn."""
    from circuit_tracer.transcoder.cross_layer_transcoder import load_clt

    from workbench.circuits.feature.transcoders import CrossLayerTranscoders, open_set

    ws, model, spec, _ = bound
    src, name = tmp_path / "tracer", f"tracer-clt-{thresholds}"
    _tracer_clt(src, model.cfg.n_layers, thresholds)
    argv = ["sae", "import", str(src), "--model", spec, "--workspace", str(ws.root), "--name", name]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "a CLT over layers 0,1" in out and "of the source library's own loader" in out
    folder = ws.path("clts", name)
    tcs = open_set(folder).load(model=model)
    hook = "hook_resid_mid" if thresholds == "relu" else "ln2.hook_normalized"
    assert isinstance(tcs, CrossLayerTranscoders) and tcs.input_hook(1) == f"blocks.1.{hook}"
    assert tcs.clt.cfg.threshold_per_latent == (thresholds == "per_latent")
    theirs = load_clt(str(src), device=torch.device("cpu"), dtype=torch.float32, lazy_decoder=False)
    x = torch.randn(model.cfg.n_layers, 40, 32, generator=torch.Generator().manual_seed(2)) * 3
    codes = [tcs.encode(i, x[i]) for i in range(model.cfg.n_layers)]
    torch.testing.assert_close(torch.stack(codes), theirs.encode(x), atol=1e-5, rtol=0)
    ours = torch.stack([tcs.reconstruct(i, codes, x[i]) for i in range(model.cfg.n_layers)])
    torch.testing.assert_close(ours, theirs(x), atol=1e-5, rtol=1e-5)
    graph = ["circuit", "graph", "--transcoders", str(folder), "--model", spec, "--workspace", str(ws.root)]
    assert main([*graph, "--prompt", "When Mary and John went to the store", "--name", name]) == 0, capsys.readouterr()


def test_a_circuit_tracer_clt_with_a_negative_threshold_is_refused_not_converted_wrongly(bound, tmp_path):
    from safetensors.torch import load_file, save_file

    ws, model, spec, _ = bound
    _tracer_clt(tmp_path / "tracer", model.cfg.n_layers, "per_latent")
    w = load_file(str(tmp_path / "tracer" / "W_enc_1.safetensors"))
    w["threshold_1"][:3] = -0.1
    save_file(w, str(tmp_path / "tracer" / "W_enc_1.safetensors"))
    with pytest.raises(BadValueError, match="3 of layer 1's JumpReLU thresholds are negative"):
        import_sae(ws, tmp_path / "tracer", spec, model=model, name="negative")
