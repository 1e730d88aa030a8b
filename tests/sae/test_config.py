"""Bad configs fail early with messages that name the value and the valid choices."""

import dataclasses

import pytest

from workbench.errors import ConfigError
from workbench.sae.config import SAEConfig, TrainConfig


def test_defaults_resolve_against_the_data():
    c = SAEConfig("matryoshka", k=8).resolve(d_in=16, n_tokens=50_000)
    assert c.n_latents == 128 and c.aux_k == 8 and c.dead_tokens == 5_000
    assert c.prefixes == [8, 16, 32, 64, 128] and c.name == "matryoshka_n128_k8_seed0"
    assert SAEConfig.from_dict(c.to_dict()) == c


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"architecture": "topk", "d_in": 64}, "d_in=64 but the data has width 32"),
        ({"architecture": "topk", "k": 300, "n_latents": 256}, "k=300 must be between 1 and n_latents=256"),
        ({"architecture": "batchtopk", "k": 0}, "k=0"),
        ({"architecture": "matryoshka", "prefixes": [64, 32, 256]}, "strictly increasing"),
        ({"architecture": "matryoshka", "prefixes": [32, 64, 128]}, "ending at n_latents=256"),
        ({"architecture": "topk", "prefixes": [32, 256]}, "only apply to architecture='matryoshka'"),
        ({"architecture": "block_topk", "n_latents": 100, "block_size": 3}, "block_size=3 must divide n_latents=100"),
        ({"architecture": "block_topk", "block_size": 4, "n_active_blocks": 65}, "n_active_blocks=65"),
        ({"architecture": "sparse"}, "architecture='sparse' is not valid; choose one of"),
        ({"architecture": "topk", "scaffold_init": "svd"}, "scaffold_init='svd' is not valid"),
        ({"architecture": "topk", "scaffold_rank": 32}, "scaffold_rank=32"),
        ({"architecture": "block_topk", "n_latents": 96, "reg_l1_off": 0.1}, "regularisers apply to"),
        ({"architecture": "topk", "dense_tau": 1.5}, "dense_tau"),
        ({"architecture": "topk", "target_l0": 8.0}, "target_l0 applies to"),
        (
            {"architecture": "group_lasso", "n_latents": 96, "target_l0": 97.0},
            r"target_l0=97.0 must be in \(0, n_latents=96\]",
        ),
        ({"architecture": "block_jumprelu", "target_l0": 8.0, "block_l0_coef": 0.0}, "block_l0_coef=0.0 must be > 0"),
        ({"architecture": "group_lasso", "target_l0": 8.0, "l0_control_rate": 0.0}, "l0_control_rate=0.0"),
        ({"architecture": "block_jumprelu", "l0_control": "pid"}, "l0_control='pid' is not valid; choose one of"),
    ],
)
def test_bad_sae_configs(kw, match):
    with pytest.raises(ConfigError, match=match):
        SAEConfig(**kw).resolve(d_in=32, n_tokens=10_000)


@pytest.mark.parametrize(
    "kw, world, match",
    [
        ({"batch_size": 100}, 3, "multiple of the number of processes"),
        ({"n_tokens": 10, "batch_size": 100}, 1, "less than one batch"),
        ({"on_nonfinite": "ignore"}, 1, "on_nonfinite='ignore' is not valid"),
        ({"lr": -1.0}, 1, "lr=-1.0"),
    ],
)
def test_bad_train_configs(kw, world, match):
    with pytest.raises(ConfigError, match=match):
        TrainConfig(**kw).resolve(world_size=world)


def test_unknown_fields_are_named():
    with pytest.raises(ConfigError, match=r"unknown SAEConfig fields \['kk'\]"):
        SAEConfig.from_dict({"architecture": "topk", "kk": 3})


@pytest.mark.parametrize("name", ["../../x", "/tmp/abs", "a/b", "..", "", "~x"])
def test_sae_name_must_stay_inside_the_output_folder(name):
    with pytest.raises(ConfigError, match="must be a plain folder name"):
        SAEConfig(name=name).resolve(d_in=32, n_tokens=10_000)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"dense_tau": "abc"}, "dense_tau='abc' is not of type float"),
        ({"architecture": "matryoshka", "prefixes": "[1,2"}, r"prefixes='\[1,2' is not of type list\[int\] \| None"),
        ({"k": 2.5}, "k=2.5 is not of type int"),
        ({"scaffold_trainable": 1}, "scaffold_trainable=1 is not of type bool"),
    ],
)
def test_field_types_are_checked(kw, match):
    with pytest.raises(ConfigError, match=match):
        SAEConfig(**kw).resolve(d_in=32, n_tokens=10_000)


@pytest.mark.parametrize("arch", ["block_topk", "group_lasso", "block_jumprelu", "grassmannian"])
@pytest.mark.parametrize("d_in", [64, 128, 768])
def test_block_architectures_work_with_the_default_block_size_and_expansion(arch, d_in):
    c = SAEConfig(arch).resolve(d_in=d_in, n_tokens=10_000)
    assert c.n_latents == 8 * d_in and c.n_latents % c.block_size == 0


def test_l0_controller_resolves_per_architecture_and_is_saved():
    resolved = {a: SAEConfig(a, target_l0=8.0).resolve(d_in=32).l0_control for a in ("group_lasso", "block_jumprelu")}
    assert resolved == {"group_lasso": "log", "block_jumprelu": "threshold"}
    assert SAEConfig("block_jumprelu", l0_control="log").resolve(d_in=32).l0_control == "log"


def test_at_k_gives_the_thresholded_architectures_target_l0_k_and_names_the_rest():
    from workbench.sae.config import at_k

    cfgs = [SAEConfig(a, k=16, block_size=4) for a in ("topk", "group_lasso", "block_jumprelu", "block_topk")]
    cfgs.append(SAEConfig("group_lasso", k=16, target_l0=8.0))  # an explicit target stays
    out, notes = at_k(cfgs)
    assert [c.target_l0 for c in out] == [None, 16.0, 16.0, None, 8.0]
    assert any("target_l0 = k = 16" in n and "group_lasso" in n and "block_jumprelu" in n for n in notes), notes
    assert any("--k does not apply to block_topk" in n and "n_active_blocks" in n for n in notes), notes


def test_sae_train_at_k_records_target_l0_for_group_lasso(tiny_cache, tmp_path, capsys):
    import json

    from workbench.cli import main

    cache, _ = tiny_cache
    argv = ["sae", "train", "--cache", str(cache), "--hook", "blocks.2.hook_resid_post", "--workspace", str(tmp_path)]
    argv += ["--arch", "topk", "group_lasso", "--k", "16", "--expansion", "2", "--tokens", "1024"]
    argv += ["--batch-size", "256", "--out", str(tmp_path / "run"), "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert "target_l0 = k = 16" in out.err + out.out
    [gl] = [p for p in (tmp_path / "run").iterdir() if p.name.startswith("group_lasso")]
    assert json.loads((gl / "workbench.json").read_text())["sae_config"]["target_l0"] == 16
    argv = [a if a != "16" else "--quiet" for a in argv if a not in ("--k", "topk")]  # group lasso alone, no --k
    assert main([*argv[:-3], "--out", str(tmp_path / "run2"), "--quiet"]) == 0
    [gl] = [p for p in (tmp_path / "run2").iterdir() if p.name.startswith("group_lasso")]
    assert json.loads((gl / "workbench.json").read_text())["sae_config"]["target_l0"] is None  # no --k: as before


def test_a_config_checks_what_it_knows_when_made_and_the_rest_when_resolved():
    with pytest.raises(ConfigError, match="k=0 must be an integer >= 1"):
        SAEConfig("topk", k=0)  # no data needed to see this
    with pytest.raises(ConfigError, match=r"block_size=0 must be an integer >= 1"):
        SAEConfig("block_topk", block_size=0)
    with pytest.raises(ConfigError, match="lr=0.0 must be a finite number > 0"):
        TrainConfig(lr=0.0)
    wide = SAEConfig("topk", k=300)  # k against the width: only once the width is known
    assert wide.resolve(d_in=64).n_latents == 512
    with pytest.raises(ConfigError, match="k=300 must be between 1 and n_latents=256"):
        wide.resolve(d_in=32)
    skip = SAEConfig("topk", skip=True)  # the trainer makes it a transcoder when it is given a target
    assert dataclasses.replace(skip, transcoder=True).resolve(d_in=32, d_out=16).d_out == 16
    with pytest.raises(ConfigError, match="apply to transcoders only"):
        skip.resolve(d_in=32)
