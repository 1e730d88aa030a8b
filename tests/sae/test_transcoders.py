"""Transcoders: every architecture reads one hook and reconstructs another; sets of them per layer; sae-lens
loading; evaluation with the MLPs replaced; bad input."""

from __future__ import annotations

import json

import pytest
import torch

from workbench.cli import main
from workbench.errors import BadValueError, ConfigError, DamagedFileError, MissingInputError
from workbench.sae.architectures import build
from workbench.sae.config import SAEConfig, TrainConfig
from workbench.sae.io import load_sae, save_sae
from workbench.sae.trainer import fit, train
from workbench.sae.transcoders import load_set, parse_layers
from workbench.steps.cache import make_cache
from workbench.steps.dictionaries import train_transcoder_set
from workbench.workspace import Workspace

D_IN, D_OUT = 16, 12
IN, OUT = "blocks.1.ln2.hook_normalized", "blocks.1.hook_mlp_out"


def pair_batches(start: int = 0, rank: int = 0, world: int = 1, batch: int = 256):
    """[x | y] rows: y a fixed nonlinear function of x (an MLP's shape), batch i depends only on (i, rank)."""
    w = torch.randn(D_IN, D_OUT, generator=torch.Generator().manual_seed(5))
    i = start
    while True:
        g = torch.Generator().manual_seed(i * 7919 + rank)
        x = torch.randn(batch, D_IN, generator=g) * 2 + 0.5
        yield torch.cat([x, torch.relu(x @ w) - 1.0], 1)
        i += 1


def _train_cfg(**kw) -> TrainConfig:
    base = {"n_tokens": 256 * 30, "batch_size": 256, "lr": 3e-3, "warmup_steps": 3, "log_every": 5}
    return TrainConfig(**{**base, "checkpoint_every": 10, "progress": False, **kw})


ARCHS = [
    ("topk", {}, "workbench_topk_transcoder"),
    ("batchtopk", {}, "jumprelu_transcoder"),
    ("matryoshka", {}, "jumprelu_transcoder"),
    ("block_topk", {"block_size": 4, "n_active_blocks": 2}, "workbench_block_sparse"),
    ("block_jumprelu", {"block_size": 4, "n_active_blocks": 2, "target_l0": 8.0}, "workbench_block_sparse"),
    ("group_lasso", {"block_size": 4, "n_active_blocks": 2}, "workbench_block_sparse"),
    ("topk", {"scaffold_rank": 2, "scaffold_encoder_input": "x"}, "workbench_scaffold"),
    ("jumprelu", {"target_l0": 4.0}, "jumprelu_transcoder"),
    ("jumprelu", {"target_l0": 4.0, "jumprelu_recipe": "anthropic2025"}, "jumprelu_transcoder"),
    ("gated", {"target_l0": 4.0}, "jumprelu_transcoder"),  # a gated encoder is a JumpReLU
    ("standard", {"target_l0": 4.0}, "transcoder"),
]


@pytest.mark.parametrize("skip", [False, True])
@pytest.mark.parametrize("arch,kw,saved_as", ARCHS)
def test_every_architecture_trains_as_a_transcoder_and_loads_in_sae_lens(arch, kw, saved_as, skip, tmp_path):
    cfg = SAEConfig(arch, k=4, n_latents=64, skip=skip, transcoder=True, **kw)
    (folder,) = fit([cfg.resolve(D_IN, None, D_OUT)], _train_cfg(), pair_batches, None, tmp_path, metadata={})
    curves = [json.loads(line) for line in (folder / "curves.jsonl").read_text().splitlines()]
    assert curves[-1]["fvu"] < curves[0]["fvu"] < 1.5  # the loss is on the target and it falls
    loaded = load_sae(folder)
    if skip and saved_as in ("jumprelu_transcoder", "transcoder"):
        saved_as = saved_as.replace("transcoder", "skip_transcoder")
    assert loaded.cfg.architecture() == saved_as
    assert loaded.cfg.d_in == D_IN and loaded.W_dec.shape[1] == D_OUT
    assert hasattr(loaded, "W_skip") == skip


def test_saved_transcoder_matches_the_workbench_forward(tmp_path):
    """sae_lens's forward (and decode(encode) + skip) equals the workbench's own prediction, scaling folded in."""
    from workbench.sae.eval import transcode

    batch = next(pair_batches())
    for arch in ("topk", "batchtopk", "block_topk", "jumprelu", "gated", "standard"):
        for skip in (False, True):
            cfg = SAEConfig(arch, k=4, n_latents=64, skip=skip, transcoder=True).resolve(D_IN, None, D_OUT)
            sae = build(cfg)
            sae.init_from_batch(batch)
            with torch.no_grad():
                if skip:
                    sae.W_skip.normal_()
                if hasattr(sae, "threshold"):
                    sae.threshold.fill_(0.05)
                if arch == "gated":  # a magnitude path unlike the gate's
                    sae.r_mag.normal_(0, 0.3)
                    sae.b_mag.normal_(0, 0.3)
            sae.eval()
            folder = save_sae(sae, tmp_path / f"{arch}{skip}", {"hook_name": IN, "hook_name_out": OUT})
            loaded = load_sae(folder)
            x = batch[:, :D_IN]
            want = sae.reconstruct(x)
            torch.testing.assert_close(loaded(x), want, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(transcode(loaded, x, loaded.encode(x)), want, atol=1e-4, rtol=1e-4)
            assert loaded.cfg.metadata.hook_name_out == OUT


@pytest.mark.parametrize("arch", ["topk", "batchtopk", "block_topk"])
def test_auxk_on_a_transcoder_fits_the_target_residual_and_the_kernels_agree(arch):
    """AuxK carries over: with dead latents a transcoder (skip path on) gets the AuxK term, and the sparse kernels
    give the dense reference's loss and gradients."""
    batch = next(pair_batches()).double()
    skip = 0.1 * torch.randn(D_OUT, D_IN, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    saes = []
    for kernel in ("sparse", "dense"):
        cfg = SAEConfig(arch, k=4, n_latents=64, skip=True, transcoder=True, kernel=kernel, block_size=4)
        sae = build(cfg.resolve(D_IN, None, D_OUT)).double()
        sae.init_from_batch(batch)
        with torch.no_grad():
            sae.W_skip.copy_(skip)
        saes.append(sae)
    dead = torch.zeros(saes[0].cfg.n_units, dtype=torch.bool)
    dead[::3] = True
    outs = [sae(batch, dead) for sae in saes]
    assert outs[0]["losses"]["aux"] > 0
    torch.testing.assert_close(outs[0]["loss"], outs[1]["loss"])
    for o in outs:
        o["loss"].backward()
    for (name, p), q in zip(saes[0].named_parameters(), saes[1].parameters()):
        if p.requires_grad:
            torch.testing.assert_close(p.grad, q.grad, msg=f"{arch}: gradient of {name} differs")


@pytest.mark.parametrize(
    "arch,coef", [("group_lasso", {"group_lasso_coef": 0.01}), ("block_jumprelu", {"block_l0_coef": 1.0})]
)
def test_target_l0_controller_holds_a_transcoders_l0(arch, coef):
    """The controllers carry over: from 4 blocks of 4 a token, a fixed coefficient leaves L0 far from 8; with
    target_l0=8 the batch L0 ends at it (measured: 43 and 12 fixed; 8.0 and 8.0 controlled)."""
    from workbench.sae.trainer import Trainer, run_steps

    tc = TrainConfig(
        n_tokens=256 * 400, batch_size=256, lr=3e-3, warmup_steps=5, decay_frac=0, log_every=50, progress=False
    )
    last = {}
    for name, extra in (("fixed", {}), ("controlled", {"target_l0": 8.0, "l0_control_rate": 0.05})):
        cfg = SAEConfig(arch, n_latents=64, block_size=4, n_active_blocks=4, transcoder=True, **coef, **extra)
        tr = Trainer([cfg.resolve(D_IN, tc.n_tokens, D_OUT)], tc)
        for _ in range(8):
            run_steps(tr, pair_batches(tr.step), 50)
            tr.log_point()
        last[name] = [r["l0"] for r in tr.curves[0][-2:]]
    assert all(abs(v - 8.0) < 0.15 * 8.0 for v in last["controlled"]), last
    assert abs(last["fixed"][-1] - 8.0) > 0.25 * 8.0, last


def test_skip_path_starts_at_zero_and_learns():
    cfg = SAEConfig("topk", k=4, n_latents=64, skip=True, transcoder=True).resolve(D_IN, None, D_OUT)
    sae = build(cfg)
    assert torch.count_nonzero(sae.W_skip) == 0
    batch = next(pair_batches())
    sae.init_from_batch(batch)
    out = sae(batch)
    out["loss"].backward()
    assert sae.W_skip.grad.abs().sum() > 0


def test_resume_of_a_transcoder_run_is_exact(tmp_path):
    cfgs = [SAEConfig("batchtopk", k=4, n_latents=64, skip=True, transcoder=True).resolve(D_IN, None, D_OUT)]

    def crashing(start, rank, world):
        for i, b in enumerate(pair_batches(start, rank, world)):
            if start + i >= 15:
                raise KeyboardInterrupt
            yield b

    (full,) = fit(cfgs, _train_cfg(), pair_batches, None, tmp_path / "full", metadata={})
    with pytest.raises(KeyboardInterrupt):
        fit(cfgs, _train_cfg(), crashing, None, tmp_path / "resumed", metadata={})
    (resumed,) = fit(cfgs, _train_cfg(), pair_batches, None, tmp_path / "resumed", resume=True, metadata={})
    a, b = load_sae(full).state_dict(), load_sae(resumed).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_config_errors_name_the_value():
    with pytest.raises(ConfigError, match="grassmannian"):
        SAEConfig("grassmannian", transcoder=True).resolve(D_IN, None, D_OUT)
    with pytest.raises(ConfigError, match="scaffold_encoder_input='residual'"):
        SAEConfig("topk", scaffold_rank=2, transcoder=True).resolve(D_IN, None, D_OUT)
    with pytest.raises(ConfigError, match="skip=True"):
        SAEConfig("topk", skip=True).resolve(D_IN)
    with pytest.raises(ConfigError, match="d_out=64 but the target has width 12"):
        SAEConfig("topk", transcoder=True, d_out=64).resolve(D_IN, None, D_OUT)


def test_parse_layers():
    assert parse_layers("all", 4) == [0, 1, 2, 3]
    assert parse_layers("2,0,2", 4) == [0, 2]
    with pytest.raises(BadValueError, match="no layer 7; use 'all' or comma-separated layers in 0..3"):
        parse_layers("0,7", 4)
    with pytest.raises(BadValueError, match="'one' is not"):
        parse_layers("one", 4)


# ---- on a real cache of a real (random-init) model ---------------------------------------------------


def _small_train(**kw):
    return _train_cfg(n_tokens=512 * 12, batch_size=512, **kw)


def test_transcoder_from_the_cache_records_its_hooks_and_evaluates(tc_cache, tmp_path):
    from workbench.sae.eval import evaluate

    cache, model = tc_cache
    folders = train(
        cache,
        IN,
        [SAEConfig("topk", k=8, expansion=4), SAEConfig("batchtopk", k=8, expansion=4, skip=True)],
        _small_train(),
        tmp_path,
        target=OUT,
    )
    info = json.loads((folders[1] / "workbench.json").read_text())
    assert info["sae_config"]["transcoder"] and info["sae_config"]["skip"]
    assert info["data"]["target_hook"] == OUT and info["data"]["pairs"][0]["input_kind"] == "ln2.hook_normalized"
    m = evaluate(folders[1], cache, str(model), max_tokens=500, n_sequences=4)
    assert m["target_hook"] == OUT and 0 < m["reconstruction"]["fvu"] < 1.5
    s = m["splice"]
    assert s["ce_zero_ablation"] != s["ce_clean"] and "ce_loss_recovered" in s and "kl_score" in s
    assert json.loads((folders[1] / "metrics.json").read_text())["splice"] == s


def test_transcoder_set_trains_evaluates_and_is_listed(tc_cache, tmp_path, capsys):
    cache, model = tc_cache
    ws = Workspace(tmp_path / "ws")
    folder, members = train_transcoder_set(
        ws, cache, "0,2", [SAEConfig("topk", k=8, expansion=4)], _small_train(), name="set"
    )
    manifest = load_set(folder)
    assert [e["layer"] for e in manifest["layers"]] == [0, 2]
    assert manifest["layers"][1]["target_hook"] == "blocks.2.hook_mlp_out"
    assert [m.name for m in members] == [e["transcoders"][0] for e in manifest["layers"]]
    assert [a.name for a in ws.artifacts("transcoders")] == ["set"]
    assert {a.name for a in ws.artifacts("saes")} == {m.name for m in members}
    args = ["sae", "eval", str(folder), "--workspace", str(ws.root), "--cache", str(cache), "--model", str(model)]
    assert main([*args, "--tokens", "500", "--n-sequences", "4"]) == 0  # `workbench sae eval` on the set
    assert f"{folder}: every MLP replaced by topk_" in capsys.readouterr().out
    res = json.loads((folder / "metrics.json").read_text())
    (all_replaced,) = res["all_replaced"].values()
    assert all_replaced["members"] == [m.name for m in members]
    single = [res["members"][m.name]["ce_sae"] for m in members]
    assert all_replaced["ce_sae"] not in single  # two MLPs replaced at once is a different model than one
    assert main(["ls", "--workspace", str(ws.root), "--kind", "transcoders"]) == 0
    assert "set" in capsys.readouterr().out


def test_bad_input_is_one_line_naming_the_value(tc_cache, tmp_path, capsys):
    cache, _ = tc_cache
    with pytest.raises(ConfigError, match="target hook 'blocks.1.attn.hook_z' is not in the cache"):
        train(cache, IN, [SAEConfig("topk")], _small_train(), tmp_path / "a", target="blocks.1.attn.hook_z")
    with pytest.raises(ConfigError, match="d_out=64 but the target has width 128"):
        train(cache, IN, [SAEConfig("topk", d_out=64)], _small_train(), tmp_path / "b", target=OUT)
    ws = Workspace(tmp_path / "ws")
    with pytest.raises(BadValueError, match="no layer 4"):
        train_transcoder_set(ws, cache, "1,4", [SAEConfig("topk")], _small_train())
    args = ["sae", "train", "--workspace", str(ws.root), "--cache", str(cache), "--transcoders", "all", "--hook", IN]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--transcoders 'all' chooses each layer's hooks" in err


def test_a_set_with_a_member_from_another_model_is_refused(tc_cache, tmp_path):
    cache, _ = tc_cache
    folder, members = train_set_small(cache, tmp_path)
    cfg = json.loads((members[1] / "cfg.json").read_text())
    cfg["metadata"]["model_name"] = "other-model@0123"
    (members[1] / "cfg.json").write_text(json.dumps(cfg))
    with pytest.raises(BadValueError, match=f"member {members[1].name} comes from model 'other-model@0123'"):
        load_set(folder)
    (members[0] / "cfg.json").unlink()
    with pytest.raises(MissingInputError, match=f"member {members[0].name} has no cfg.json"):
        load_set(folder)


@pytest.mark.parametrize(
    "file, text, message",
    [
        ("transcoders.json", lambda t: t[: len(t) // 2], r"JSONDecodeError"),
        ("transcoders.json", lambda t: "[]", r"a JSON list, not a JSON dict"),
        (
            "transcoders.json",
            lambda t: json.dumps({k: v for k, v in json.loads(t).items() if k != "layers"}),
            r"no 'layers'",
        ),
        ("transcoders.json", lambda t: t.replace('"layer": 1', '"layer": 7'), r"checksum does not match"),
        ("L0-topk/cfg.json", lambda t: "not json", r"JSONDecodeError"),
    ],
    ids=["truncated", "list", "no-layers", "changed", "member-cfg"],
)
def test_a_damaged_set_file_is_one_line_naming_it(tc_cache, tmp_path, capsys, file, text, message):
    """Issue 30 item 3: each ends in DamagedFileError naming the file, from the loader and from the commands."""
    folder, members = train_set_small(tc_cache[0], tmp_path)
    path = next(folder.glob(file.replace("L0-topk", "L0-*")))
    path.write_text(text(path.read_text()))
    with pytest.raises(DamagedFileError, match=rf"^{path}: damaged .*{message}") as e:
        load_set(folder)
    assert "\n" not in str(e.value)
    assert (
        main(["circuit", "graph", "--transcoders", str(folder), "--prompt", "a b", "--out", str(tmp_path / "g")]) == 2
    )
    assert f"error: {path}: damaged" in capsys.readouterr().err


def train_set_small(cache, tmp_path):
    from workbench.sae.transcoders import train_set

    return train_set(cache, "0,1", [SAEConfig("topk", k=8, expansion=4)], _small_train(), tmp_path / "set")


def test_cli_trains_a_transcoder_with_target(tc_cache, tmp_path, capsys):
    cache, _ = tc_cache
    out = tmp_path / "run"
    args = ["sae", "train", "--workspace", str(tmp_path / "ws"), "--cache", str(cache), "--hook", IN, "--target", OUT]
    args += [
        "--out",
        str(out),
        "--arch",
        "matryoshka",
        "--k",
        "8",
        "--skip",
        "--tokens",
        "4096",
        "--batch-size",
        "512",
        "--quiet",
    ]
    assert main(args) == 0
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    cfg = json.loads((folder / "cfg.json").read_text())
    assert cfg["architecture"] == "jumprelu_skip_transcoder" and cfg["metadata"]["hook_name_out"] == OUT


def test_features_build_on_a_transcoder_reads_its_input_and_writes_through_its_decoder(tc_cache, tmp_path):
    from workbench.features import FeatureStore
    from workbench.features.build import build_stores
    from workbench.features.config import FeatureConfig

    cache, model = tc_cache
    (folder,) = train(cache, IN, [SAEConfig("matryoshka", k=8, expansion=4)], _small_train(), tmp_path, target=OUT)
    (path,) = build_stores(
        [folder], cache, str(model), FeatureConfig(chunk_rows=1000, corr_tokens=1000), progress=False
    )
    m = FeatureStore(path).manifest
    assert (m["reads"], m["writes"], m["kind"]) == (IN, OUT, "transcoder")
    assert m["logit_effects"] and (path / "logit_ids.npy").is_file()
    assert int((FeatureStore(path).units["count"] > 0).sum()) > 0


def _target_only_cache(tc_cache, out, **kw):
    """A second cache of the tc_cache model holding only the target hook; kw change the harvest."""
    from workbench.cache.config import HarvestConfig
    from workbench.models import load

    _, model_dir = tc_cache
    model, _ = load(str(model_dir))
    corpus_seed = kw.pop("corpus_seed", 0)
    cfg = HarvestConfig(**{"n_tokens": 5000, "heldout_fraction": 0.2, **kw})
    ws = Workspace(out.parent / "ws2")
    return make_cache(
        ws, str(model_dir), "synthetic", [OUT], cfg, out=out, corpus_seed=corpus_seed, progress=False, model=model
    ).path


def test_target_from_another_cache_of_the_same_tokens_trains_the_same_transcoder(tc_cache, tmp_path):
    from workbench.sae.eval import evaluate

    cache, _ = tc_cache
    tcache = _target_only_cache(tc_cache, tmp_path / "targets")
    cfgs = [SAEConfig("topk", k=8, expansion=4)]
    (one,) = train(cache, IN, cfgs, _small_train(), tmp_path / "one", target=OUT)
    (two,) = train(cache, IN, cfgs, _small_train(), tmp_path / "two", target=OUT, target_cache=tcache)
    a, b = load_sae(one).state_dict(), load_sae(two).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    fvu = [evaluate(f, cache, None, max_tokens=500)["reconstruction"]["fvu"] for f in (one, two)]
    assert fvu[0] == fvu[1]  # the second finds its targets through the cache its workbench.json records


@pytest.mark.parametrize(
    "change,message",
    [({"corpus_seed": 1}, "differ at train row"), ({"heldout_fraction": 0.3}, "hold 4000 vs 3500 train rows")],
)
def test_target_cache_of_other_tokens_is_refused(tc_cache, tmp_path, change, message):

    cache, _ = tc_cache
    tcache = _target_only_cache(tc_cache, tmp_path / "other", **change)
    with pytest.raises(DamagedFileError, match=message):
        train(cache, IN, [SAEConfig("topk")], _small_train(), tmp_path / "run", target=OUT, target_cache=tcache)


def test_a_model_without_layernorm_gets_transcoders_on_hook_mlp_in(tokenizer, tmp_path):
    """No ln2: the input is hook_mlp_in (TransformerLens fires it only when asked: the harvest and the splice
    switch it on), which equals the residual the MLP reads."""
    import numpy as np
    from small_models import small_model

    from workbench.cache import ActivationCache, default_hooks, harvest
    from workbench.corpus import load_corpus
    from workbench.sae.eval import splice_metrics
    from workbench.sae.transcoders import train_set

    model = small_model(tokenizer, normalization_type=None)
    hooks = default_hooks(model) + ["blocks.1.hook_resid_mid"]
    assert "blocks.1.hook_mlp_in" in hooks and not any("ln2" in h for h in hooks)
    harvest(model, load_corpus("synthetic", tokenizer), hooks, tmp_path / "cache", 3000, progress=False)
    cache = ActivationCache.open(tmp_path / "cache")
    rows = np.arange(100)
    assert torch.equal(cache.rows("blocks.1.hook_mlp_in", rows), cache.rows("blocks.1.hook_resid_mid", rows))
    folder, members = train_set(
        cache.path, "all", [SAEConfig("topk", k=4, expansion=2)], _small_train(), tmp_path / "set"
    )
    manifest = load_set(folder)
    assert [e["input_kind"] for e in manifest["layers"]] == ["hook_mlp_in", "hook_mlp_in"]
    reps = [(load_sae(m), e["input_hook"], e["target_hook"]) for m, e in zip(members, manifest["layers"])]
    tokens = torch.from_numpy(cache.sequences("heldout")[:2])
    s = splice_metrics(model, reps, tokens, ())
    assert s["ce_sae"] != s["ce_clean"] and not model.cfg.use_hook_mlp_in  # switched back off after


@pytest.mark.slow
def test_torchrun_with_two_processes_trains_a_set_and_the_same_transcoder_as_one_process(tc_cache, tmp_path):
    """gloo on the CPU: a set from the cache on two ranks (saved once, world size recorded), and a skip
    transcoder on world-size-independent batches equal to the one a single process trains on them."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from . import ddp_transcoders as ddp

    cache, _ = tc_cache
    root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", ddp.__file__]
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([*cmd, str(cache), str(tmp_path / "ddp")], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    manifest = load_set(tmp_path / "ddp" / "set")
    members = [tmp_path / "ddp" / "set" / n for e in manifest["layers"] for n in e["transcoders"]]
    assert len(members) == 4
    for folder in members:
        info = json.loads((folder / "workbench.json").read_text())
        assert info["world_size"] == 2 and info["tokens_seen"] == 512 * 8
        assert all(torch.isfinite(v).all() for v in load_sae(folder).state_dict().values())
    (one,) = fit([ddp.pair_config()], ddp.train_config(), ddp.global_batches, None, tmp_path / "one", metadata={})
    a, b = load_sae(tmp_path / "ddp" / "pair" / "pair").state_dict(), load_sae(one).state_dict()
    assert a.keys() == b.keys() and "W_skip" in a
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5, msg=k)


def _torchrun_sae_train(logs, *args: str, stop_at=None) -> tuple[int, str, str]:
    """`workbench sae train ARGS` on two gloo ranks (a real torchrun) -> (exit status, stdout, stderr).
    stop_at: a file whose appearance stops the run mid-way (SIGTERM to torchrun, which stops its ranks)."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd += ["-m", "workbench.cli", "sae", "train", "--quiet", *args]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "OMP_NUM_THREADS": "1"}
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / "out", "w") as out, open(logs / "err", "w") as err:
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, text=True)
        while stop_at is not None and p.poll() is None and not stop_at.exists():
            time.sleep(0.02)
        if stop_at is not None:
            assert p.poll() is None, "the run ended before it could be stopped: " + (logs / "err").read_text()[-2000:]
            p.terminate()
        p.wait()
    return p.returncode, (logs / "out").read_text(), (logs / "err").read_text()


@pytest.mark.slow
def test_sae_train_under_torchrun_writes_once_and_a_stopped_set_resumes(tc_cache, tmp_path):
    """The CLI on two ranks: one run folder (rank 0's start time names it), rank 0 alone holds the output lock,
    saves, records and reports; a set stopped after its first checkpoint leaves nothing that looks done, and
    `--resume` under torchrun finishes it from that checkpoint."""
    from workbench import checkpoint

    cache, _ = tc_cache
    ws, out = tmp_path / "ws", tmp_path / "set"
    small = ["--cache", str(cache), "--workspace", str(ws), "--k", "4", "--n-latents", "64", "--batch-size", "256"]
    small += ["--log-every", "8", "--checkpoint-every", "4"]
    rc, stdout, err = _torchrun_sae_train(
        tmp_path / "l1", *small, "--tokens", "3072", "--hook", "blocks.1.hook_resid_post"
    )
    assert rc == 0, err[-3000:]
    (run,) = (ws / "saes").iterdir()
    assert stdout.splitlines() == [f"saved {run / 'topk_n64_k4_seed0'}"]
    assert json.loads((run / "topk_n64_k4_seed0" / "workbench.json").read_text())["world_size"] == 2

    n = 200  # steps of the set: enough that it is stopped well before its end
    tset = [*small, "--tokens", str(256 * n), "--transcoders", "all", "--out", str(out)]
    rc, _, err = _torchrun_sae_train(tmp_path / "l2", *tset, stop_at=out / "checkpoint.pt")
    step = checkpoint.read(out / "checkpoint.pt")["trainer"]["step"]
    assert rc != 0 and 4 <= step < n and step % 4 == 0
    assert not list(out.rglob("artifact.json")) and not (out / "transcoders.json").exists()
    rc, stdout, err = _torchrun_sae_train(tmp_path / "l3", *tset, "--resume")
    assert rc == 0, err[-3000:]
    assert stdout.splitlines()[0] == f"saved transcoder set {out}" and len(stdout.splitlines()) == 5
    members = [out / name for e in load_set(out)["layers"] for name in e["transcoders"]]
    for folder in members:
        info = json.loads((folder / "workbench.json").read_text())
        assert info["world_size"] == 2 and info["tokens_seen"] == 256 * n
        steps_logged = [json.loads(r)["step"] for r in (folder / "curves.jsonl").read_text().splitlines()]
        assert steps_logged == list(range(8, n + 1, 8))
    listed = [(a.kind, a.path.resolve()) for a in Workspace(ws).artifacts()]
    assert ("transcoders", out.resolve()) in listed and {("saes", m.resolve()) for m in members} <= set(listed)
    assert len(listed) == len(set(listed)) == 2 + len(members)  # the plain SAE, the set and its members, once each


# ---- more layers than memory allows in one pass ---------------------------------------------------------


def _pass_train(**kw) -> TrainConfig:
    """8 steps of 256 rows, a checkpoint every 2."""
    return _train_cfg(n_tokens=256 * 8, batch_size=256, checkpoint_every=2, log_every=2, **kw)


PASS_CFGS = [SAEConfig("topk", k=8, expansion=4)]


@pytest.fixture(scope="module")
def one_pass(tc_cache, tmp_path_factory):
    """The 4-layer set in one pass (the default budget, half the free RAM, holds it): (manifest, members)."""
    from workbench.sae.transcoders import train_set

    folder, members = train_set(tc_cache[0], "all", PASS_CFGS, _pass_train(), tmp_path_factory.mktemp("one") / "set")
    return load_set(folder), members


def _same_members(a, b) -> None:
    """Bitwise: each transcoder's steps read only its own columns of the same batches (every pass reads the cache
    in windows of the one-pass run's rows, so the same rows in the same order), from its own seed with its own
    optimiser, so nothing it computes depends on which other layers share its pass."""
    assert [m.name for m in a] == [m.name for m in b]
    for x, y in zip(a, b):
        sa, sb = load_sae(x).state_dict(), load_sae(y).state_dict()
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa), x.name
        assert (x / "curves.jsonl").read_text() == (y / "curves.jsonl").read_text()


def _budget(one_pass) -> float:
    """Below the one-pass estimate, above any one layer's: at least two passes."""
    return 0.7 * one_pass[0]["memory"]["estimate_mib"][0]


def test_a_set_over_its_memory_budget_trains_in_passes_to_the_one_pass_result(tc_cache, one_pass, tmp_path, capsys):
    manifest, members = one_pass
    assert manifest["memory"]["passes"] == [[0, 1, 2, 3]] and manifest["memory"]["budget_mib"] > 0
    ws = Workspace(tmp_path / "ws")
    budget = _budget(one_pass)
    folder, split = train_transcoder_set(
        ws, tc_cache[0], "all", PASS_CFGS, _pass_train(memory_budget_mib=budget), name="split"
    )
    memory = load_set(folder)["memory"]
    passes = memory["passes"]
    assert len(passes) >= 2 and [layer for p in passes for layer in p] == [0, 1, 2, 3]
    assert all(e <= budget for e in memory["estimate_mib"]) and memory["budget_mib"] == budget
    assert all((folder / "passes" / str(i) / "checkpoint.pt").is_file() for i in range(len(passes)))
    _same_members(members, split)
    assert main(["ls", "--workspace", str(ws.root), "--kind", "transcoders"]) == 0
    assert "split" in capsys.readouterr().out


def test_a_set_stopped_in_its_second_pass_resumes_to_the_same_result(tc_cache, one_pass, tmp_path, monkeypatch):
    from workbench import checkpoint
    from workbench.sae import trainer as trainer_mod
    from workbench.sae.transcoders import train_set

    out, train_cfg = tmp_path / "set", _pass_train(memory_budget_mib=_budget(one_pass))
    step = trainer_mod.Trainer.train_step
    second: list[str] = []

    def stopping(self, x):  # a crash at step 5 of the second pass (its last checkpoint: step 4)
        if not second:
            second.append(self.cfgs[0].name)
        if self.cfgs[0].name != second[0] and self.step == 5:
            raise KeyboardInterrupt
        return step(self, x)

    monkeypatch.setattr(trainer_mod.Trainer, "train_step", stopping)
    with pytest.raises(KeyboardInterrupt):
        train_set(tc_cache[0], "all", PASS_CFGS, train_cfg, out)
    monkeypatch.undo()
    assert not (out / "transcoders.json").exists()
    with pytest.raises(MissingInputError, match="transcoders.json is missing"):
        load_set(out)
    assert checkpoint.read(out / "passes" / "1" / "checkpoint.pt")["trainer"]["step"] == 4
    with pytest.raises(DamagedFileError, match="already holds a run"):
        train_set(tc_cache[0], "all", PASS_CFGS, train_cfg, out)
    with pytest.raises(ConfigError, match=r"trains layers \[0, 1, 2, 3\], not \[0, 2\]"):
        train_set(tc_cache[0], "0,2", PASS_CFGS, train_cfg, out, resume=True)
    # issue 30 item 2: a pass checkpoint copied from another pass, or a damaged pass plan, is refused, never used
    ckpt, plan = out / "passes" / "1" / "checkpoint.pt", out / "passes.json"
    kept, kept_plan = ckpt.read_bytes(), plan.read_bytes()
    ckpt.write_bytes((out / "passes" / "0" / "checkpoint.pt").read_bytes())
    with pytest.raises(DamagedFileError, match=rf"{ckpt} was written by a different configuration"):
        train_set(tc_cache[0], "all", PASS_CFGS, train_cfg, out, resume=True)
    ckpt.write_bytes(kept)
    for text in ("{", "[]", kept_plan.decode().replace('"layers": [\n    0,', '"layers": [\n    3,')):
        plan.write_text(text)
        with pytest.raises(DamagedFileError, match=rf"^{plan}: damaged transcoder set's pass plan \("):
            train_set(tc_cache[0], "all", PASS_CFGS, train_cfg, out, resume=True)
    plan.write_bytes(kept_plan)
    # resumed with another budget: the passes recorded when the run started are kept
    _, resumed = train_set(tc_cache[0], "all", PASS_CFGS, _pass_train(memory_budget_mib=1e6), out, resume=True)
    assert load_set(out)["memory"]["passes"] == json.loads((out / "passes.json").read_text())["passes"]
    assert len(load_set(out)["memory"]["passes"]) >= 2
    _same_members(one_pass[1], resumed)


def test_a_layer_too_large_for_the_budget_is_one_line_naming_estimate_budget_and_fix(tc_cache, tmp_path, capsys):
    args = ["sae", "train", "--workspace", str(tmp_path / "ws"), "--cache", str(tc_cache[0]), "--transcoders", "1,2"]
    assert (
        main(
            [
                *args,
                "--expansion",
                "4",
                "--tokens",
                "2048",
                "--batch-size",
                "256",
                "--memory-budget-mib",
                "0.5",
                "--quiet",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert "layer 1's transcoders alone need an estimated" in err and "memory_budget_mib=0.5" in err
    assert "--batch-size" in err and "--expansion" in err
    assert not list((tmp_path / "ws").rglob("passes.json"))  # refused before anything is written


def test_layers_group_in_order_into_the_fewest_passes_that_fit():
    from workbench.sae.transcoders import group_layers

    sizes = {0: 3, 1: 1, 2: 2, 3: 2, 4: 4}

    def fits(members):
        return sum(sizes[m] for m in members) <= 4

    assert group_layers(list(sizes), fits) == [[0, 1], [2, 3], [4]]
    assert group_layers([0, 1, 2], lambda m: True) == [[0, 1, 2]]
