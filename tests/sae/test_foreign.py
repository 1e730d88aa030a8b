"""sparsify checkpoints and dictionary_learning dictionaries: their on-disk layouts (hand-built here, since neither
library installs beside the workbench; bench/sae/byo_roundtrip.py runs the libraries' own code), imported bound to the
model with the hooks their configs name, refused by name when they do not fit, and exported back (sparsify,
circuit-tracer) to files the libraries read."""

import copy
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.sae.test_imports import _tracer_set, bound  # noqa: F401 (a fixture)
from workbench.cli import main
from workbench.errors import BadValueError
from workbench.provenance import model_id
from workbench.sae.io import load_sae
from workbench.sae.transcoders import load_set
from workbench.steps.exchange import export_dictionary, import_sae

D, N, K = 32, 64, 4


def _rand(*shape, seed):
    return 0.3 * torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _sparsify_run(out, points: dict[str, bool]) -> dict:
    """A sparsify run folder as its Trainer saves one: config.json with the hookpoints, one folder per hookpoint with
    cfg.json (SparseCoderConfig + d_in) and sae.safetensors (its nn.Module's keys); {hookpoint: transcode}."""
    tensors = {}
    for i, (point, transcode) in enumerate(points.items()):
        w = {
            "encoder.weight": _rand(N, D, seed=i),
            "encoder.bias": _rand(N, seed=10 + i) + 0.1,
            "W_dec": _rand(N, D, seed=20 + i),
            "b_dec": _rand(D, seed=30 + i),
        }
        (out / point).mkdir(parents=True)
        save_file(w, str(out / point / "sae.safetensors"))
        cfg = {"activation": "topk", "expansion_factor": 2, "normalize_decoder": True, "num_latents": 0, "k": K}
        (out / point / "cfg.json").write_text(json.dumps({**cfg, "transcode": transcode, "d_in": D}))
        tensors[point] = w
    (out / "config.json").write_text(json.dumps({"sae": {"k": K}, "hookpoints": list(points), "batch_size": 8}))
    return tensors


def _sparsify_codes(w, x, transcode):
    """sparsify's SparseCoder.encode/decode (ReLU, then the k largest; an SAE subtracts b_dec first)."""
    pre = torch.relu((x if transcode else x - w["b_dec"]) @ w["encoder.weight"].T + w["encoder.bias"])
    top = pre.topk(K, dim=-1)
    codes = torch.zeros_like(pre).scatter(-1, top.indices, top.values)
    return codes, codes @ w["W_dec"] + w["b_dec"]


def _with_norms(model):
    """A copy of the model with its MLP norms away from the identity, so a missing (un)fold cannot pass."""
    model = copy.deepcopy(model)
    with torch.no_grad():
        for i in (0, 1):
            model.blocks[i].ln2.w.copy_(1 + _rand(D, seed=40 + i))
            model.blocks[i].ln2.b.copy_(_rand(D, seed=50 + i))
    return model


def test_a_sparsify_run_imports_with_the_hooks_its_config_names(bound, tmp_path, capsys):  # noqa: F811
    """sparsify's transcoders read the MLP's input (the norm's output after its gain and bias), TransformerLens's
    ln2.hook_normalized is before them: the import folds them into the encoder (and the export unfolds them)."""
    ws, model, spec, _ = bound
    model = _with_norms(model)
    w = _sparsify_run(tmp_path / "run", {"layers.0.mlp": True, "layers.1.mlp": True})
    summary, folder = import_sae(ws, tmp_path / "run", spec, model=model, name="sp-tc")
    manifest = load_set(folder)
    mid = model_id(model)
    assert manifest["model"] == mid and summary["transcoders"] == 2
    assert [(e["input_hook"], e["target_hook"]) for e in manifest["layers"]] == [
        ("blocks.0.ln2.hook_normalized", "blocks.0.hook_mlp_out"),
        ("blocks.1.ln2.hook_normalized", "blocks.1.hook_mlp_out"),
    ]
    x = torch.randn(50, D, generator=torch.Generator().manual_seed(5)) * 3
    for e, tensors in zip(manifest["layers"], w.values()):
        ours = load_sae(folder / e["transcoders"][0])
        ln = model.blocks[e["layer"]].ln2
        codes, recon = _sparsify_codes(tensors, x * ln.w.detach() + ln.b.detach(), True)
        torch.testing.assert_close(ours.encode(x), codes, atol=1e-5, rtol=0)
        torch.testing.assert_close(ours(x), recon, atol=1e-5, rtol=0)
    sae_run = _sparsify_run(tmp_path / "sae-run", {"layers.1": False})
    args = ["sae", "import", str(tmp_path / "sae-run"), "--workspace", str(ws.root), "--model", spec, "--name", "sp"]
    assert main(args) == 0, capsys.readouterr()
    assert "blocks.1.hook_resid_post" in capsys.readouterr().out
    ours = load_sae(ws.path("saes", "imported") / "sp")
    codes, recon = _sparsify_codes(sae_run["layers.1"], x, False)
    torch.testing.assert_close(ours.encode(x), codes, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours(x), recon, atol=1e-5, rtol=0)
    assert ours.cfg.metadata.model_name == model_id(bound[1])  # the CLI's --model: the saved, unperturbed one


def test_sparsify_files_that_do_not_fit_are_refused_by_name(bound, tmp_path):  # noqa: F811
    ws, model, spec, _ = bound
    _sparsify_run(tmp_path / "odd", {"encoder.layer.3": False})
    with pytest.raises(BadValueError, match="hookpoint 'encoder.layer.3' is not a decoder layer.*pass --hook"):
        import_sae(ws, tmp_path / "odd", spec, model=model)
    _sparsify_run(tmp_path / "deep", {"layers.7": False})
    with pytest.raises(BadValueError, match="'blocks.7.hook_resid_post', which model .* does not have"):
        import_sae(ws, tmp_path / "deep", spec, model=model)
    _sparsify_run(tmp_path / "one", {"layers.1": False})
    summary, _ = import_sae(ws, tmp_path / "one" / "layers.1", spec, model=model, name="one-point")
    assert summary["hook"] == "blocks.1.hook_resid_post"  # the folder's run config lists it
    cfg = json.loads((tmp_path / "one" / "layers.1" / "cfg.json").read_text())
    (tmp_path / "one" / "layers.1" / "cfg.json").write_text(json.dumps({**cfg, "activation": "groupmax"}))
    with pytest.raises(BadValueError, match="activation 'groupmax'; only 'topk'"):
        import_sae(ws, tmp_path / "one", spec, model=model, name="groupmax")


def _dl_weights(cls: str) -> dict:
    """The state dict dictionary_learning 0.1.0's `cls` saves (its tensors' names and orientations)."""
    lin = {
        "encoder.weight": _rand(N, D, seed=1),
        "encoder.bias": _rand(N, seed=2),
        "decoder.weight": _rand(D, N, seed=3),
    }
    params = {
        "W_enc": _rand(D, N, seed=1),
        "b_enc": _rand(N, seed=2),
        "W_dec": _rand(N, D, seed=3),
        "b_dec": _rand(D, seed=4),
    }
    topk = {"b_dec": _rand(D, seed=4), "k": torch.tensor(K, dtype=torch.int), "threshold": torch.tensor(-1.0)}
    return {
        "AutoEncoder": lambda: lin | {"bias": _rand(D, seed=4)},
        "AutoEncoderTopK": lambda: lin | topk,
        "BatchTopKSAE": lambda: lin | topk | {"threshold": torch.tensor(0.3)},
        "MatryoshkaBatchTopKSAE": lambda: (
            params | {"k": topk["k"], "threshold": torch.tensor(0.3), "group_sizes": torch.tensor([16, 48])}
        ),
        "JumpReluAutoEncoder": lambda: params | {"threshold": _rand(N, seed=5)},  # some below 0
        "GatedAutoEncoder": lambda: {
            "encoder.weight": lin["encoder.weight"],
            "decoder.weight": lin["decoder.weight"],
            "decoder_bias": _rand(D, seed=4),
            "r_mag": _rand(N, seed=5) * 0.3,
            "gate_bias": _rand(N, seed=6),
            "mag_bias": _rand(N, seed=7),
        },
    }[cls]()


def _dictionary_learning(out, cls: str, submodule: str) -> dict:
    """A dictionary_learning save folder: ae.pt (the module's state dict) and config.json {"trainer": ...}."""
    out.mkdir(parents=True)
    w = _dl_weights(cls)
    torch.save(w, out / "ae.pt")
    trainer = {"dict_class": cls, "activation_dim": D, "dict_size": N, "layer": 1, "submodule_name": submodule}
    (out / "config.json").write_text(json.dumps({"trainer": trainer}))
    return w


def _dl_formula(cls: str, w: dict, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Codes and reconstruction by each class's encode/decode in dictionary_learning 0.1.0, written out."""
    if cls == "GatedAutoEncoder":
        pre = (x - w["decoder_bias"]) @ w["encoder.weight"].T
        codes = (pre + w["gate_bias"] > 0) * torch.relu(w["r_mag"].exp() * pre + w["mag_bias"])
        return codes, codes @ w["decoder.weight"].T + w["decoder_bias"]
    if cls == "JumpReluAutoEncoder":  # its loader leaves apply_b_dec_to_input False
        pre = x @ w["W_enc"] + w["b_enc"]
        codes = torch.relu(pre * (pre > w["threshold"]))
        return codes, codes @ w["W_dec"] + w["b_dec"]
    b = w["bias"] if cls == "AutoEncoder" else w["b_dec"]
    if "W_enc" in w:
        pre = torch.relu((x - b) @ w["W_enc"] + w["b_enc"])
    else:
        pre = torch.relu((x - b) @ w["encoder.weight"].T + w["encoder.bias"])
    if cls == "AutoEncoderTopK":  # ReLU, then the k largest
        top = pre.topk(K, dim=-1)
        pre = torch.zeros_like(pre).scatter(-1, top.indices, top.values)
    elif "threshold" in w:  # BatchTopK and Matryoshka once trained: ReLU, then zero at or below the threshold
        pre = pre * (pre > w["threshold"])
    dec = w["W_dec"] if "W_dec" in w else w["decoder.weight"].T
    return pre, pre @ dec + b


ARCHITECTURE = {"AutoEncoder": "standard", "AutoEncoderTopK": "workbench_scaffold", "GatedAutoEncoder": "gated"}


@pytest.mark.parametrize(
    "cls",
    [
        "AutoEncoder",
        "AutoEncoderTopK",
        "BatchTopKSAE",
        "MatryoshkaBatchTopKSAE",
        "JumpReluAutoEncoder",
        "GatedAutoEncoder",
    ],
)
def test_a_dictionary_learning_ae_imports_equal_to_its_formula(bound, tmp_path, cls):  # noqa: F811
    ws, model, spec, _ = bound
    w = _dictionary_learning(tmp_path / cls, cls, "resid_post_layer_1")
    with pytest.raises(BadValueError, match="submodule_name='resid_post_layer_1' .* pass --hook"):
        import_sae(ws, tmp_path / cls, spec, model=model)
    hook = "blocks.1.hook_resid_post"
    summary, folder = import_sae(ws, tmp_path / cls, spec, model=model, hook=hook, name=f"dl-{cls}")
    assert summary["hook"] == hook and summary["architecture"] == ARCHITECTURE.get(cls, "jumprelu")
    x = torch.randn(50, D, generator=torch.Generator().manual_seed(5)) * 3
    codes, out = _dl_formula(cls, w, x)
    assert 0 < (codes > 0).float().mean() < 1  # the thresholds and gates both open and close here
    ours = load_sae(folder)
    torch.testing.assert_close(ours.encode(x), codes, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours(x), out, atol=1e-5, rtol=0)


def test_a_sparsify_export_writes_back_the_files_it_came_from(bound, tmp_path, capsys):  # noqa: F811
    ws, model, spec, _ = bound
    model = _with_norms(model)
    w = _sparsify_run(tmp_path / "run", {"layers.0.mlp": True, "layers.1.mlp": True})
    _, folder = import_sae(ws, tmp_path / "run", spec, model=model, name="sp-back")
    out = export_dictionary(folder, "sparsify", tmp_path / "exported", model=model)
    assert json.loads((out / "config.json").read_text())["hookpoints"] == ["layers.0.mlp", "layers.1.mlp"]
    for point, tensors in w.items():
        back = load_file(str(out / point / "sae.safetensors"))
        assert set(back) == set(tensors)
        for k, v in tensors.items():
            torch.testing.assert_close(back[k], v, atol=1e-6, rtol=0)
        assert json.loads((out / point / "cfg.json").read_text())["transcode"] is True
    args = ["sae", "export", str(folder), "--format", "sparsify", "--out", str(out), "--model", spec]
    assert main([*args, "--workspace", str(ws.root)]) == 2
    assert "is not empty; export into a new folder" in capsys.readouterr().err


def test_a_circuit_tracer_export_loads_in_circuit_tracer_equal_to_the_set(bound, tmp_path, capsys):  # noqa: F811
    from workbench.circuits.feature.tracer_export import importable

    importable()  # circuit-tracer 0.5 with huggingface_hub 1.x (the one shim it needs)
    from circuit_tracer.utils.hf_utils import load_transcoders

    ws, model, spec, _ = bound
    _tracer_set(tmp_path / "tracer", 2, True)
    _, folder = import_sae(ws, tmp_path / "tracer", spec, model=model, name="ct-back")
    out = tmp_path / "exported"
    args = ["sae", "export", str(folder), "--format", "circuit-tracer", "--out", str(out), "--model", spec]
    assert main([*args, "--workspace", str(ws.root)]) == 0, capsys.readouterr()
    import yaml

    cfg = yaml.safe_load((out / "config.yaml").read_text())
    cfg["transcoders"] = [str(out / p) for p in cfg["transcoders"]]  # circuit-tracer reads them from the cwd
    theirs = load_transcoders(cfg, device=torch.device("cpu"), lazy_decoder=False)
    x = torch.randn(40, D, generator=torch.Generator().manual_seed(2)) * 3
    for e in load_set(folder)["layers"]:
        ours = load_sae(folder / e["transcoders"][0])
        tc = theirs[e["layer"]]
        torch.testing.assert_close(tc.encode(x), ours.encode(x), atol=1e-5, rtol=0)
        torch.testing.assert_close(tc(x), ours(x), atol=1e-5, rtol=0)
    # sparsify imports are Top-k: circuit-tracer's file loaders would read them as ReLU, so they are refused
    _sparsify_run(tmp_path / "run", {"layers.0.mlp": True, "layers.1.mlp": True})
    _, topk = import_sae(ws, tmp_path / "run", spec, model=model, name="topk-set")
    with pytest.raises(BadValueError, match="layer 0's transcoder is Top-k: circuit-tracer 0.5's file loaders"):
        export_dictionary(topk, "circuit-tracer", tmp_path / "no", model=model)


@pytest.mark.parametrize("skip", [False, True])
def test_the_workbench_s_own_top_k_transcoders_export_to_sparsify_equal(tmp_path, skip):
    """A Top-k transcoder the workbench trained (b_in, a skip path) as sparsify's files: sparsify's encode and decode
    (its formula, on the MLP's input after the norm's gain and bias) give the workbench's codes and outputs."""
    from tests.circuits.feature.test_attribution_graph import random_transcoders
    from tests.small_models import small_model

    model = _with_norms(small_model(seed=3, n_layers=2))
    t = random_transcoders(model, tmp_path / "tcs", "topk", skip)[1]
    with torch.no_grad():
        t.sae.b_in.normal_(0, 0.3)  # the input centre, which sparsify has not got: folded into its encoder bias
    t.sae.save_model(str(tmp_path / "L1"))
    out = export_dictionary(tmp_path / "L1", "sparsify", tmp_path / "sp", model=model)
    w = load_file(str(out / "layers.1.mlp" / "sae.safetensors"))
    assert ("W_skip" in w) == skip and json.loads((out / "layers.1.mlp" / "cfg.json").read_text())["k"] == 4
    x = torch.randn(40, model.cfg.d_model, generator=torch.Generator().manual_seed(3)) * 3
    ln = model.blocks[1].ln2
    u = x * ln.w.detach() + ln.b.detach()
    pre = torch.relu(u @ w["encoder.weight"].T + w["encoder.bias"])
    top = pre.topk(4, dim=-1)
    codes = torch.zeros_like(pre).scatter(-1, top.indices, top.values)
    out_theirs = codes @ w["W_dec"] + w["b_dec"] + (u @ w["W_skip"].T if skip else 0)
    sae = load_sae(tmp_path / "L1")
    torch.testing.assert_close(codes, sae.encode(x), atol=1e-5, rtol=0)
    torch.testing.assert_close(out_theirs, sae(x), atol=1e-5, rtol=0)


def test_what_the_hook_table_cannot_map_is_refused_by_name(bound, tmp_path):  # noqa: F811
    """Gemma-2 normalises its MLP's output before any hook sees it; a dictionary_learning class that is not imported
    names the ones that are; --hook on a folder that names its own hooks is refused."""
    from tests.hf_folders import hf_folder
    from workbench.models import load
    from workbench.sae import foreign

    gemma2 = load(str(hf_folder("gemma2", tmp_path / "gemma2")), device="cpu")[0]
    assert foreign.tl_hooks("layers.1", False, gemma2) == ("blocks.1.hook_resid_post", None)
    with pytest.raises(BadValueError, match="normalises the mlp output \\(Gemma-2's post-norm\\)"):
        foreign.tl_hooks("layers.1.mlp", True, gemma2)
    with pytest.raises(BadValueError, match="no module sparsify hooks"):
        foreign.hf_hookpoint("blocks.1.ln2.hook_normalized", "blocks.1.hook_mlp_out", gemma2)
    ws, model, spec, src = bound
    _dictionary_learning(tmp_path / "jump", "AutoEncoderTopK", "blocks.1.hook_resid_post")
    trainer = {"dict_class": "AutoEncoderNew", "submodule_name": "blocks.1.hook_resid_post"}
    (tmp_path / "jump" / "config.json").write_text(json.dumps({"trainer": trainer}))
    with pytest.raises(BadValueError, match="dict_class 'AutoEncoderNew' does not import; valid: AutoEncoder, .*Gated"):
        import_sae(ws, tmp_path / "jump", spec, model=model)
    with pytest.raises(BadValueError, match="--hook is for sparsify and dictionary_learning files"):
        import_sae(ws, src["topk"], spec, model=model, hook="blocks.1.hook_resid_post")


def test_an_imported_sparsify_set_draws_a_graph(bound, tmp_path, capsys):  # noqa: F811
    ws, _, spec, _ = bound
    _sparsify_run(tmp_path / "run", {"layers.0.mlp": True, "layers.1.mlp": True})
    common = ["--model", spec, "--workspace", str(ws.root)]
    assert main(["sae", "import", str(tmp_path / "run"), "--name", "sp-graph", *common]) == 0, capsys.readouterr()
    graph = ["circuit", "graph", "--transcoders", str(ws.path("transcoders", "sp-graph")), *common]
    assert main([*graph, "--prompt", "When Mary and John went to the store", "--name", "sp-graph"]) == 0
    assert (ws.path("circuits", "sp-graph") / "graph.json").is_file()
