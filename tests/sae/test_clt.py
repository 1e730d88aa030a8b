"""Cross-layer transcoders: trained by the SAE trainer from a set's cache rows, resumed exactly, saved with a
manifest and in circuit-tracer's CLT format (read back by circuit-tracer's own loader), evaluated."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from workbench.cli import main
from workbench.errors import ConfigError
from workbench.sae import trainer
from workbench.sae.clt_io import TRACER, load_clt, read_manifest
from workbench.sae.config import COEF_FIELDS as PENALISED
from workbench.sae.config import CLTConfig, TrainConfig
from workbench.sae.transcoders import train_clt
from workbench.workspace import Workspace


def _train(**kw) -> TrainConfig:
    base = {"n_tokens": 256 * 8, "batch_size": 256, "lr": 3e-3, "warmup_steps": 2, "log_every": 2}
    return TrainConfig(**{**base, "checkpoint_every": 2, "progress": False, **kw})


def _inputs(cache, layers, n=64):
    from workbench.cache import ActivationCache, transcoder_hooks

    c = ActivationCache.open(cache)
    pairs = [transcoder_hooks(layer, c.hooks) for layer in layers]
    rows = next(c.batches([h for p in pairs for h in p], n, split="heldout", dtype=torch.float32))
    d_in, d_out = c.d(pairs[0][0]), c.d(pairs[0][1])
    parts = rows.view(n, len(layers), d_in + d_out)
    return [parts[:, i, :d_in] for i in range(len(layers))], [parts[:, i, d_in:] for i in range(len(layers))]


@pytest.mark.parametrize(
    "arch,sparsity",
    [
        ("topk", "per_layer"),
        ("batchtopk", "per_layer"),
        ("topk", "shared"),
        ("batchtopk", "shared"),
        ("matryoshka", "per_layer"),
        ("matryoshka", "shared"),
        ("jumprelu", "per_layer"),
        ("standard", "per_layer"),
    ],
)
def test_a_clt_trains_from_the_cache_and_its_loss_falls(tc_cache, tmp_path, arch, sparsity):
    cfg = CLTConfig(arch, k=4, expansion=2, clt_sparsity=sparsity, target_l0=4.0 if arch in PENALISED else None)
    folder = train_clt(tc_cache[0], "all", cfg, _train(n_tokens=256 * 16), tmp_path)
    curves = [json.loads(line) for line in (folder / "curves.jsonl").read_text().splitlines()]
    print([round(c["fvu"], 3) for c in curves])
    assert curves[-1]["fvu"] < min(1, max(c["fvu"] for c in curves[:3]))
    assert {f"mse_{t}" for t in range(4)} <= curves[-1].keys()
    m = read_manifest(folder)
    assert m["layers"] == [0, 1, 2, 3] and m["target_hooks"][2] == "blocks.2.hook_mlp_out"
    assert m["clt_config"]["clt_sparsity"] == sparsity and m["clt_config"]["n_layers"] == 4
    clt = load_clt(folder)
    xs, ys = _inputs(tc_cache[0], [0, 1, 2, 3])
    codes = clt.encode_all(xs)
    l0 = sum(float((z != 0).sum(1).float().mean()) for z in codes)
    if arch == "topk":
        assert l0 <= 4 * 4  # per layer k, or the shared budget k x layers
    recon = clt.reconstruct(xs)
    fvu = sum(float((y - r).pow(2).sum()) for y, r in zip(ys, recon)) / sum(
        float((y - y.mean(0)).pow(2).sum()) for y in ys
    )
    # BatchTopK (Matryoshka too) with a shared budget: its inference threshold (one EMA for every layer) still lags
    # after 16 steps
    assert fvu < (1.5 if sparsity == "shared" and arch != "topk" else 1.0)
    if arch == "matryoshka":  # the prefix loss is what it trains; its prefixes are saved with it
        assert "matryoshka_mse" in curves[-1] and m["clt_config"]["prefixes"] == clt.cfg.prefixes == [
            16,
            32,
            64,
            128,
            256,
        ]


def test_each_jumprelu_member_is_steered_by_its_own_layers_l0():
    """target_l0 is per layer: a member at its target keeps its thresholds, one above it raises them."""
    from workbench.sae.architectures import build

    clt = build(CLTConfig("jumprelu", n_latents=8, target_l0=4.0, input_norm="none").resolve(5, None, 4, 2))
    before = [m.theta.detach().clone() for m in clt.members]
    stats = {"l0": torch.tensor(12.0), "l0_0": torch.tensor(4.0), "l0_1": torch.tensor(8.0)}
    clt.after_step(stats)
    torch.testing.assert_close(clt.members[0].theta.detach(), before[0])
    assert (clt.members[1].theta.detach() > before[1]).all()


def _random_matryoshka_clt(prefix_weighting: str, clt_loss: str):
    """A tiny random Matryoshka CLT (3 layers, 8 latents, prefixes 2 < 5 < 8) with a skip path and random biases and
    output scales, so every term of the loss is exercised."""
    from workbench.sae.architectures import build

    cfg = CLTConfig(
        "matryoshka", k=2, n_latents=8, prefixes=[2, 5, 8], skip=True, input_norm="none",
        prefix_weighting=prefix_weighting, clt_loss=clt_loss,
    )  # fmt: skip
    torch.manual_seed(0)
    clt = build(cfg.resolve(5, None, 4, 3))
    with torch.no_grad():
        for m in clt.members:
            m.b_dec.normal_(0, 0.3)
            m.b_in.normal_(0, 0.3)
        clt.W_skip.normal_(0, 0.2)
        clt.output_scale.uniform_(0.5, 2)
    return clt


@pytest.mark.parametrize("weighting,clt_loss", [("sum", "sum"), ("mean", "mean"), ("mean_with_bias", "sum")])
def test_the_matryoshka_clt_loss_is_the_prefix_losses_of_every_target_layer(weighting, clt_loss):
    """By hand: BatchTopK codes per layer; for each prefix m, layer t's target from the latents below m of every
    layer i <= t (their decoders into t), the biases and the skip path; layers summed or averaged, then prefixes."""
    clt, B = _random_matryoshka_clt(weighting, clt_loss), 6
    batch = torch.randn(B, 3 * (5 + 4))
    loss = float(clt(batch)["losses"]["matryoshka_mse"])
    xs, ys = clt.split(batch)
    with torch.no_grad():
        codes = []
        for m, x in zip(clt.members, xs):
            h = ((x - m.b_in) @ m.W_enc.T + m.b_enc).relu().flatten()  # the training rule: top k*B over the batch
            top = h.topk(2 * B)
            codes.append(torch.zeros_like(h).scatter(0, top.indices, top.values).view(B, 8))

        def layer_loss(t, width):
            y_hat = clt.W_skip[t] @ xs[t].T
            y_hat = y_hat.T + sum(m.b_dec[(t - i) * 4 : (t - i + 1) * 4] for i, m in enumerate(clt.members[: t + 1]))
            for i, (m, z) in enumerate(zip(clt.members[: t + 1], codes)):
                y_hat = y_hat + z[:, :width] @ m.W_dec[:width, (t - i) * 4 : (t - i + 1) * 4]
            return ((ys[t] * clt.output_scale[t] - y_hat) ** 2).sum(-1).mean()

        def over_layers(width):
            per = torch.stack([layer_loss(t, width) for t in range(3)])
            return per.sum() if clt_loss == "sum" else per.mean()

        per_prefix = [float(over_layers(w)) for w in (2, 5, 8)]
        bias_only = float(over_layers(0))
    expected = {
        "sum": sum(per_prefix),
        "mean": sum(per_prefix) / 3,
        "mean_with_bias": (sum(per_prefix) + bias_only) / 4,
    }[weighting]
    assert loss == pytest.approx(expected, rel=1e-5)


def test_the_memory_estimate_refuses_a_clt_over_the_budget(tc_cache, tmp_path):
    with pytest.raises(
        ConfigError, match=r"the CLT clt_topk_n\d+_k4_seed0 needs an estimated .* MiB but memory_budget"
    ):
        train_clt(tc_cache[0], "all", CLTConfig("topk", k=4), _train(memory_budget_mib=0.01), tmp_path)


def test_per_latent_thresholds_are_refused_in_training(tc_cache, tmp_path):
    cfg = CLTConfig("batchtopk", k=4, threshold_per_latent=True)
    with pytest.raises(ConfigError, match="threshold_per_latent comes from an imported circuit-tracer CLT"):
        train_clt(tc_cache[0], "all", cfg, _train(), tmp_path)


@pytest.mark.parametrize("arch", ["batchtopk", "matryoshka"])
def test_resume_of_a_clt_is_exact(tc_cache, tmp_path, monkeypatch, arch):
    cfg, cache = CLTConfig(arch, k=4, expansion=2, skip=True), tc_cache[0]
    full = train_clt(cache, "0,2", cfg, _train(), tmp_path / "full")
    real = trainer._cache_batches

    def crashing(*a, start, **kw):
        for i, b in enumerate(real(*a, start=start, **kw)):
            if start + i >= 5:
                raise KeyboardInterrupt
            yield b

    monkeypatch.setattr(trainer, "_cache_batches", crashing)
    with pytest.raises(KeyboardInterrupt):
        train_clt(cache, "0,2", cfg, _train(), tmp_path / "resumed")
    monkeypatch.setattr(trainer, "_cache_batches", real)
    resumed = train_clt(cache, "0,2", cfg, _train(), tmp_path / "resumed", resume=True)
    a, b = load_clt(full).state_dict(), load_clt(resumed).state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (full / "curves.jsonl").read_text() == (resumed / "curves.jsonl").read_text()


@pytest.mark.parametrize("arch", ["batchtopk", "jumprelu", "standard"])
def test_circuit_tracers_loader_reads_the_clt_and_reconstructs_as_the_workbench(tc_cache, tmp_path, arch):
    ct = pytest.importorskip("circuit_tracer.transcoder.cross_layer_transcoder")
    cfg = CLTConfig(arch, k=4, expansion=2, target_l0=4.0 if arch in PENALISED else None)
    folder = train_clt(tc_cache[0], "all", cfg, _train(), tmp_path)
    assert read_manifest(folder)["circuit_tracer"] == {"folder": TRACER}
    loaded = ct.load_clt(str(folder / TRACER), device=torch.device("cpu"), dtype=torch.float32, lazy_decoder=False)
    assert (loaded.n_layers, loaded.d_model) == (4, 128) and loaded.feature_output_hook == "hook_mlp_out"
    xs, _ = _inputs(tc_cache[0], [0, 1, 2, 3])
    theirs = loaded(torch.stack(xs))  # [layers, tokens, d]
    ours = torch.stack(load_clt(folder).reconstruct(xs))
    torch.testing.assert_close(theirs, ours, rtol=1e-4, atol=1e-4)


def test_circuit_graph_through_a_clt_from_the_cli(tc_cache, tmp_path, capsys):
    """`circuit graph --transcoders CLT` reads the CLT folder through the dictionary interface, heads on every edge."""
    folder = train_clt(tc_cache[0], "all", CLTConfig("topk", k=4, expansion=2), _train(n_tokens=512), tmp_path / "c")
    ws, prompt = tmp_path / "ws", "When Mary and John went to the store , John gave a drink to"
    args = ["circuit", "graph", "--workspace", str(ws), "--model", str(tc_cache[1]), "--prompt", prompt]
    assert main([*args, "--transcoders", str(folder), "--name", "g"]) == 0
    assert "graph: " in capsys.readouterr().out
    graph = json.loads((ws / "circuits" / "g" / "graph.json").read_text())
    assert sum(n["feature_type"] == "cross layer transcoder" for n in graph["nodes"]) > 0
    assert any(set(link.get("heads", {})) - {"direct"} for link in graph["links"]), "links name their heads"
    half = train_clt(tc_cache[0], "1,3", CLTConfig("topk", k=4, expansion=2), _train(n_tokens=512), tmp_path / "h")
    assert main([*args, "--transcoders", str(half), "--name", "h"]) == 2
    assert "spans layers [1, 3]; graphs need one over every layer" in capsys.readouterr().err


def test_cli_trains_a_clt_into_the_workspace_and_a_topk_clt_says_why_it_has_no_circuit_tracer_files(
    tc_cache, tmp_path, capsys
):
    ws = tmp_path / "ws"
    args = ["sae", "train", "--cache", str(tc_cache[0]), "--clt", "--layers", "1,3", "--workspace", str(ws)]
    small = ["--k", "4", "--expansion", "2", "--tokens", "1024", "--batch-size", "256", "--quiet"]
    assert main([*args, *small, "--clt-loss", "mean", "--name", "c"]) == 0
    (art,) = Workspace(ws).artifacts("clts")
    m = read_manifest(art.path)
    assert m["layers"] == [1, 3] and m["clt_config"]["clt_loss"] == "mean"
    assert m["circuit_tracer"]["folder"] is None and "topk" in m["circuit_tracer"]["why_not"]
    assert main([*args, "--hook", "blocks.1.hook_mlp_out", *small]) == 2
    assert "--clt trains one CLT over --layers" in capsys.readouterr().err
    ev = [
        "sae",
        "eval",
        str(art.path),
        "--cache",
        str(tc_cache[0]),
        "--model",
        str(tc_cache[1]),
        "--workspace",
        str(ws),
    ]
    assert main([*ev, "--tokens", "400", "--n-sequences", "4"]) == 0
    assert "CLT FVU per layer" in capsys.readouterr().out
    res = json.loads((art.path / "metrics.json").read_text())
    assert len(res["fvu_per_layer"]) == 2 and res["l0"] == pytest.approx(sum(res["l0_per_layer"]))
    assert res["l0_per_layer"][0] <= 4 and len(res["dead_per_layer"]) == 2
    r = res["all_replaced"]
    assert r["ce_sae"] != r["ce_clean"] and r["ce_zero_ablation"] != r["ce_clean"] and "kl_score" in r
    norms = load_file(str(art.path / res["decoder_norms"]["file"]))["norms"]
    assert norms.shape == (2, 256, 2) and torch.all(norms[1, :, 0] == 0)  # layer 3's features write no earlier layer
    summary = Workspace(ws).artifacts("clts")[0].manifest["summary"]
    assert summary["layers"] == "1,3" and summary["fvu"] == res["fvu"]


def test_a_clt_whose_cross_layer_decoders_are_zero_replaces_each_layer_as_a_per_layer_set(tc_cache, tmp_path):
    """With the decoders into later layers zeroed, every layer's prediction is its own member's alone."""
    folder = train_clt(tc_cache[0], "all", CLTConfig("topk", k=4, expansion=2), _train(n_tokens=512), tmp_path)
    clt = load_clt(folder)
    d = clt.cfg.d_out
    with torch.no_grad():
        for m in clt.members:
            m.W_dec[:, d:] = 0
            m.b_dec[d:] = 0
    xs, _ = _inputs(tc_cache[0], [0, 1, 2, 3])
    for t, y_hat in enumerate(clt.reconstruct(xs)):
        m = clt.members[t]
        own = (m.encode(xs[t]) @ m.W_dec[:, :d] + m.b_dec[:d]) / clt.output_scale[t]
        torch.testing.assert_close(y_hat, own)


@pytest.mark.parametrize(
    "cfg",
    [
        CLTConfig("topk", k=4, expansion=2, scaffold_rank=4, scaffold_encoder_input="x"),
        CLTConfig("block_topk", expansion=2, block_size=4, n_active_blocks=2),
    ],
    ids=["topk_scaffold", "block_topk"],
)
def test_scaffold_and_block_clts_train_and_their_loss_falls(tc_cache, tmp_path, cfg):
    folder = train_clt(tc_cache[0], "all", cfg, _train(n_tokens=256 * 16), tmp_path)
    fvu = [json.loads(line)["fvu"] for line in (folder / "curves.jsonl").read_text().splitlines()]
    assert fvu[-1] < min(1, max(fvu[:3])), fvu
    clt = load_clt(folder)
    assert (clt.members[0].scaffold is not None) == bool(cfg.scaffold_rank)
    xs, ys = _inputs(tc_cache[0], [0, 1, 2, 3])
    assert all(r.shape == y.shape and torch.isfinite(r).all() for r, y in zip(clt.reconstruct(xs), ys))


def test_an_architecture_not_trained_as_a_clt_is_refused_naming_those_that_are(tc_cache, tmp_path, capsys):
    args = ["sae", "train", "--cache", str(tc_cache[0]), "--clt", "--workspace", str(tmp_path / "ws")]
    assert main([*args, "--arch", "grassmannian", "--tokens", "1024", "--batch-size", "256", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert (
        "architecture='grassmannian' is not trained as a CLT yet; "
        "choose one of ['topk', 'batchtopk', 'matryoshka', 'block_topk', 'jumprelu', 'standard']" in err
    )


def test_a_matryoshka_clt_saves_and_loads_back(tmp_path):
    from workbench.sae.clt_io import save_clt

    clt = _random_matryoshka_clt("mean_with_bias", "mean")
    with torch.no_grad():
        for m in clt.members:
            m.threshold.fill_(0.25)
    folder = save_clt(clt, tmp_path / "clt", metadata={"layers": [0, 1, 2]})
    back = load_clt(folder)
    assert back.cfg == clt.cfg and back.cfg.prefixes == [2, 5, 8] and back.cfg.prefix_weighting == "mean_with_bias"
    a, b = clt.state_dict(), back.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k].float(), b[k].float()) for k in a)
    xs = [torch.randn(7, 5) for _ in range(3)]
    for mine, theirs in zip(clt.eval().reconstruct(xs), back.reconstruct(xs)):
        torch.testing.assert_close(mine, theirs)
    assert read_manifest(folder)["circuit_tracer"]["folder"] is None  # a skip path: circuit-tracer cannot hold it


def test_a_matryoshka_clt_from_the_cli_evaluates_graphs_and_writes_circuit_tracers_files(tc_cache, tmp_path, capsys):
    """Inference is BatchTopK's: JumpReLU at the learned threshold, so `sae eval`, `circuit graph --transcoders` and
    circuit-tracer's own loader take it as they take a BatchTopK CLT."""
    ws, cache = tmp_path / "ws", tc_cache[0]
    args = ["sae", "train", "--cache", str(cache), "--clt", "--arch", "matryoshka", "--workspace", str(ws)]
    small = ["--k", "4", "--expansion", "2", "--tokens", "1024", "--batch-size", "256", "--quiet", "--name", "m"]
    assert main([*args, *small, "--prefix-weighting", "mean"]) == 0
    (art,) = Workspace(ws).artifacts("clts")
    m = read_manifest(art.path)
    assert m["clt_config"]["architecture"] == "matryoshka" and m["clt_config"]["prefix_weighting"] == "mean"
    assert m["circuit_tracer"] == {"folder": TRACER}
    clt = load_clt(art.path)
    assert all(float(mem.threshold) > 0 for mem in clt.members)
    ct = pytest.importorskip("circuit_tracer.transcoder.cross_layer_transcoder")
    loaded = ct.load_clt(str(art.path / TRACER), device=torch.device("cpu"), dtype=torch.float32, lazy_decoder=False)
    xs, _ = _inputs(cache, [0, 1, 2, 3])
    torch.testing.assert_close(loaded(torch.stack(xs)), torch.stack(clt.reconstruct(xs)), rtol=1e-4, atol=1e-4)
    ev = ["sae", "eval", str(art.path), "--cache", str(cache), "--model", str(tc_cache[1]), "--workspace", str(ws)]
    assert main([*ev, "--tokens", "400", "--n-sequences", "4"]) == 0
    assert "CLT FVU per layer" in capsys.readouterr().out
    res = json.loads((art.path / "metrics.json").read_text())
    assert len(res["fvu_per_layer"]) == 4 and res["l0"] == pytest.approx(sum(res["l0_per_layer"]))
    prompt = "When Mary and John went to the store , John gave a drink to"
    graph = ["circuit", "graph", "--workspace", str(ws), "--model", str(tc_cache[1]), "--prompt", prompt]
    assert main([*graph, "--transcoders", str(art.path), "--name", "g"]) == 0
    nodes = json.loads((ws / "circuits" / "g" / "graph.json").read_text())["nodes"]
    assert sum(n["feature_type"] == "cross layer transcoder" for n in nodes) > 0


@pytest.mark.slow
def test_torchrun_with_two_processes_trains_a_clt(tc_cache, tmp_path):
    """`sae train --clt` on two gloo ranks (a real torchrun): one CLT saved, its world size and tokens recorded,
    read back by the workbench and by circuit-tracer's loader."""
    from tests.sae.test_transcoders import _torchrun_sae_train

    args = ["--cache", str(tc_cache[0]), "--clt", "--arch", "batchtopk", "--k", "4", "--expansion", "2"]
    args += ["--tokens", "2048", "--batch-size", "256", "--workspace", str(tmp_path / "ws"), "--name", "ddp"]
    rc, out, err = _torchrun_sae_train(tmp_path / "logs", *args)
    assert rc == 0, err[-3000:]
    (folder,) = [p.parent for p in (tmp_path / "ws" / "clts" / "ddp").glob("*/clt.json")]
    m = read_manifest(folder)
    assert m["world_size"] == 2 and m["tokens_seen"] == 2048 and m["circuit_tracer"] == {"folder": TRACER}
    assert all(torch.isfinite(v).all() for v in load_clt(folder).state_dict().values())


@pytest.mark.parametrize("flag", [["--layers", "0,2"], ["--clt-loss", "mean"], ["--clt-sparsity", "shared"]])
def test_a_clt_flag_without_clt_is_refused_naming_it(flag, tc_cache, tmp_path, capsys):
    """--layers, --clt-loss and --clt-sparsity set up a CLT: without --clt they would be ignored."""
    args = ["sae", "train", "--cache", str(tc_cache[0]), "--workspace", str(tmp_path / "ws")]
    assert main([*args, "--hook", "blocks.1.hook_resid_post", *flag]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{flag[0]} {flag[1]!r} has no effect without --clt" in err[0], err
    assert not (tmp_path / "ws").exists()


def test_sae_eval_of_a_clt_whose_ce_recovered_is_undefined_says_why(tmp_path, capsys):
    """A model whose unembedding is zero gives every token the same logit: zero ablation costs no loss, so the CLT's
    CE recovered and KL score are undefined; the eval line says so (it raised TypeError formatting None)."""
    from workbench.cache.config import HarvestConfig
    from workbench.corpus.vocab import vocabulary
    from workbench.models import save
    from workbench.models.tokenizer import build_tokenizer
    from workbench.models.toy import TinyConfig, build
    from workbench.steps.cache import make_cache

    model = build(TinyConfig(), build_tokenizer(vocabulary()))
    with torch.no_grad():
        model.W_U.zero_()
    save(model, tmp_path / "model")
    ws = tmp_path / "ws"
    cfg = HarvestConfig(n_tokens=2000, heldout_fraction=0.2)
    make_cache(Workspace(ws), str(tmp_path / "model"), "synthetic", None, cfg, out=tmp_path / "c", progress=False)
    args = ["sae", "train", "--cache", str(tmp_path / "c"), "--clt", "--layers", "0,1", "--workspace", str(ws)]
    assert main([*args, "--k", "4", "--expansion", "2", "--tokens", "512", "--batch-size", "256", "--quiet"]) == 0
    (art,) = Workspace(ws).artifacts("clts")
    ev = ["sae", "eval", str(art.path), "--cache", str(tmp_path / "c"), "--model", str(tmp_path / "model")]
    assert main([*ev, "--workspace", str(ws), "--tokens", "400", "--n-sequences", "4"]) == 0
    out = capsys.readouterr().out
    assert "every MLP replaced: CE recovered undefined (zero ablation does not raise the CE loss" in out, out
    assert "KL score undefined" in out, out
