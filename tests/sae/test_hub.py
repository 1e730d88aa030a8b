"""`sae import` of a Hub id, offline: an id that is no folder goes to its library's own loader (sae_lens's
`SAE.from_pretrained`, circuit-tracer's `load_transcoder_from_hub`); not cached, it fails with one line naming the
cache and the command that fetches it; cached (a Hugging Face cache laid out as huggingface_hub writes it), it
imports through that loader equal to importing the folder itself."""

import shutil

import pytest
import torch
import yaml

from tests.sae.test_imports import RESID, _tracer_clt, _tracer_set, bound  # noqa: F401 (a fixture)
from workbench.cli import main
from workbench.readback import artifact_manifest
from workbench.sae.io import load_sae
from workbench.steps.exchange import import_sae

REVISION = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """huggingface_hub offline, its cache an empty folder."""
    import huggingface_hub.constants as hub

    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    return tmp_path / "hf-cache"


def _cache(cache, repo: str, files) -> None:
    """`files` (a folder) as the main revision of Hub repo `repo` in a Hugging Face cache."""
    root = cache / f"models--{repo.replace('/', '--')}"
    shutil.copytree(files, root / "snapshots" / REVISION)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(REVISION)


@pytest.mark.parametrize(
    "argv, library, fetch",
    [
        (["gpt2-small-res-jb", "--sae-id", "blocks.8.hook_resid_pre"], "sae_lens release", "--sae-id blocks.8"),
        (["someone/their-saes", "--sae-id", "layer_1"], "sae_lens release", "someone/their-saes --sae-id layer_1"),
        (["gemma"], "circuit-tracer", "workbench sae import gemma --format circuit-tracer"),
        (["hf://someone/their-transcoders/relu@v1"], "circuit-tracer", "hf://someone/their-transcoders/relu@v1"),
    ],
)
def test_an_uncached_hub_id_offline_fails_in_one_line_naming_the_cache_and_the_fetch(
    offline, tmp_path, capsys, argv, library, fetch
):
    assert main(["sae", "import", *argv, "--workspace", str(tmp_path / "ws")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "not in the local cache" in err and str(offline) in err
    assert library in err and "HF_HUB_OFFLINE is set" in err and f"`workbench sae import {argv[0]}" in err
    assert fetch in err


def test_what_is_not_a_hub_id_is_refused_by_name(offline, tmp_path, capsys):
    ws = ["--workspace", str(tmp_path / "ws")]
    assert main(["sae", "import", "gpt2-small-res-jb", *ws]) == 2
    assert "--sae-id" in (err := capsys.readouterr().err) and "blocks.0.hook_resid_pre" in err
    assert main(["sae", "import", "./no/such/folder", "--sae-id", "x", *ws]) == 2
    assert "--sae-id names an SAE" in capsys.readouterr().err
    assert main(["sae", "import", "./no/such/folder", *ws]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_a_cached_sae_lens_repo_imports_offline_equal_to_its_folder(bound, offline, tmp_path):  # noqa: F811
    ws, model, spec, made = bound
    sae = made["jumprelu"]
    shutil.copytree(sae, tmp_path / "repo" / "layer_1")
    _cache(offline, "someone/their-saes", tmp_path / "repo")
    summary, folder = import_sae(ws, "someone/their-saes", spec, model=model, sae_id="layer_1")
    direct, direct_folder = import_sae(ws, sae, spec, model=model, name="jumprelu-direct")
    assert summary == direct and summary["hook"] == RESID and summary["max_abs_diff_vs_source"] == 0.0
    ours, theirs = load_sae(folder).state_dict(), load_sae(direct_folder).state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert artifact_manifest(folder / "artifact.json")["inputs"]["source"] == "someone/their-saes --sae-id layer_1"


@pytest.mark.parametrize("kind", ["transcoder_set", "cross_layer_transcoder"])
def test_a_cached_circuit_tracer_repo_imports_offline_equal_to_its_folder(
    bound,  # noqa: F811
    offline,
    tmp_path,
    capsys,
    kind,
):
    """Hub id owner/name/subfolder (circuit-tracer's own parsing), a transcoder set or a CLT; the weights the
    workbench writes are byte-equal to those of the folder imported directly."""
    ws, model, spec, _ = bound
    src = tmp_path / "repo" / kind
    if kind == "transcoder_set":
        _tracer_set(src, 2, skip=False)
    else:
        _tracer_clt(src, model.cfg.n_layers, "per_latent")
    cfg = yaml.safe_load((src / "config.yaml").read_text())
    (src / "config.yaml").write_text(yaml.safe_dump({**cfg, "model_kind": kind}))
    _cache(offline, "someone/their-transcoders", tmp_path / "repo")
    ref = f"someone/their-transcoders/{kind}"
    argv = ["sae", "import", ref, "--model", spec, "--workspace", str(ws.root), "--name", f"hub-{kind}"]
    assert main(argv) == 0, capsys.readouterr().err
    assert "of the source library's own loader" in capsys.readouterr().out
    _, direct = import_sae(ws, src, spec, model=model, name=f"direct-{kind}")
    hub_folder = direct.parent / f"hub-{kind}"
    weights = sorted(p.relative_to(direct) for p in direct.rglob("*.safetensors"))
    assert weights and weights == sorted(p.relative_to(hub_folder) for p in hub_folder.rglob("*.safetensors"))
    assert all((direct / w).read_bytes() == (hub_folder / w).read_bytes() for w in weights)
