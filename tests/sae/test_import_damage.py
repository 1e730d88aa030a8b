"""Every importer reads its source through workbench.readback: each format x each kind of damage is refused by
`workbench sae import` in one line naming the damaged file (exit 2, no traceback), and nothing is left in the
workspace. The sources are built as the import tests build them (sae_lens's and circuit-tracer's own writers;
sparsify's and dictionary_learning's layouts, neither library being installed), then damaged; the hub-* formats are the same files in a Hugging Face cache, imported by Hub id offline through the library's
own loader (workbench.sae.hub).
"""

import itertools
import json
import shutil

import pytest
import torch
import yaml
from safetensors.torch import load_file, save_file

from tests.sae.test_foreign import _dictionary_learning, _sparsify_run
from tests.sae.test_hub import _cache, offline  # noqa: F401 (a fixture)
from tests.sae.test_imports import RESID, _tracer_clt, _tracer_set, bound  # noqa: F401 (a fixture)
from workbench.cli import main

LOCAL = ("saelens", "sparsify", "circuit-tracer-set", "circuit-tracer-clt", "dictionary-learning")
HUB = ("hub-saelens", "hub-circuit-tracer-set", "hub-circuit-tracer-clt")
FORMATS = LOCAL + HUB
REPO = "someone/their-dictionaries"
KINDS = (
    "missing_file",
    "renamed_tensor",
    "broken_text",
    "wrong_type",
    "wrong_shape",
    "nan",
    "inf",
    "path_escape",
    "truncated",
    "pickled_object",
)
# the files damaged, per format: (weights file, the tensor damaged in it, text file)
FILES = {
    "saelens": ("sae_weights.safetensors", "W_enc", "cfg.json"),
    "sparsify": ("layers.1.mlp/sae.safetensors", "W_dec", "config.json"),
    "circuit-tracer-set": ("layer_1.safetensors", "W_enc", "config.yaml"),
    "circuit-tracer-clt": ("W_enc_1.safetensors", "W_enc_1", "config.yaml"),
    "dictionary-learning": ("ae.pt", "decoder.weight", "config.json"),
}
# (format, kind) pairs that cannot occur: no file of the format lists a path (a Hub config's paths are resolved
# inside its repo by huggingface_hub); only ae.pt is a pickle
NOT_GENERATED = {(f, "path_escape") for f in ("saelens", "circuit-tracer-clt", "dictionary-learning", *HUB)} | {
    (f, "pickled_object") for f in FORMATS if f != "dictionary-learning"
}
CASES = [c for c in itertools.product(FORMATS, KINDS) if c not in NOT_GENERATED]


def _build(fmt: str, src, model, saelens_folder) -> None:
    if fmt in HUB[1:]:  # a circuit-tracer Hub config says which kind it is
        _build(fmt.removeprefix("hub-"), src, model, saelens_folder)
        kind = "transcoder_set" if fmt.endswith("set") else "cross_layer_transcoder"
        cfg = yaml.safe_load((src / "config.yaml").read_text())
        (src / "config.yaml").write_text(yaml.safe_dump({**cfg, "model_kind": kind}))
        return
    fmt = fmt.removeprefix("hub-")
    if fmt == "saelens":
        shutil.copytree(saelens_folder, src)
    elif fmt == "sparsify":
        _sparsify_run(src, {"layers.0.mlp": True, "layers.1.mlp": True})
    elif fmt == "circuit-tracer-set":
        _tracer_set(src, 2, skip=False)
    elif fmt == "circuit-tracer-clt":
        _tracer_clt(src, model.cfg.n_layers, "per_latent")
    else:
        _dictionary_learning(src, "AutoEncoderTopK", RESID)


def _load(path) -> dict:
    return torch.load(path, weights_only=True) if path.suffix == ".pt" else load_file(str(path))


def _save(state, path) -> None:
    torch.save(state, path) if path.suffix == ".pt" else save_file(state, str(path))


def _edit(path, change) -> None:
    state = _load(path)
    change(state)
    _save(state, path)


def _wrong_type(fmt: str, src, weights, tensor, text):
    """The format's file holding another type than it should; returns the file."""
    if fmt == "saelens":
        text.write_text("[1, 2]")
        return text
    if fmt == "sparsify":  # a string where a list of hookpoints belongs
        text.write_text(json.dumps({**json.loads(text.read_text()), "hookpoints": "layers.0.mlp"}))
        return text
    if fmt == "dictionary-learning":
        torch.save([torch.zeros(3)], weights)
        return weights
    _edit(weights, lambda w: w.__setitem__(tensor, w[tensor].to(torch.int32)))
    return weights


def _escape(fmt: str, src, tmp_path):
    """The format's list of files naming a valid copy of one of its files outside its folder."""
    outside = tmp_path / "outside"
    if fmt == "sparsify":
        shutil.copytree(src / "layers.1.mlp", outside / "layers.1.mlp")
        cfg = json.loads((src / "config.json").read_text())
        (src / "config.json").write_text(json.dumps({**cfg, "hookpoints": ["layers.0.mlp", "../outside/layers.1.mlp"]}))
        return src / "config.json"
    outside.mkdir()
    shutil.copy(src / "layer_1.safetensors", outside / "layer_1.safetensors")
    cfg = yaml.safe_load((src / "config.yaml").read_text())
    listed = ["layer_0.safetensors", "../outside/layer_1.safetensors"]
    (src / "config.yaml").write_text(yaml.safe_dump({**cfg, "transcoders": listed}))
    return src / "config.yaml"


def _damage(fmt: str, kind: str, src, tmp_path):
    """Damage the source folder `src` of format `fmt` by `kind`; returns the file a user must be told about."""
    fmt = fmt.removeprefix("hub-")
    weights, tensor, text = src / FILES[fmt][0], FILES[fmt][1], src / FILES[fmt][2]
    if kind == "missing_file":  # a set's first layer: without its last, a set is a shorter set
        weights = src / "layer_0.safetensors" if fmt == "circuit-tracer-set" else weights
        weights.unlink()
    elif kind == "renamed_tensor":
        _edit(weights, lambda w: w.__setitem__(f"{tensor}_renamed", w.pop(tensor)))
    elif kind == "broken_text":
        text.write_text("feature_input_hook: [unclosed\n" if text.suffix == ".yaml" else text.read_text()[:20])
        return text
    elif kind == "wrong_type":
        return _wrong_type(fmt, src, weights, tensor, text)
    elif kind == "wrong_shape":  # one dimension 16 wider than the rest of the file says
        _edit(weights, lambda w: w.__setitem__(tensor, torch.cat([w[tensor], w[tensor][..., :16]], dim=-1)))
    elif kind in ("nan", "inf"):
        _edit(weights, lambda w: w[tensor].view(-1).__setitem__(5, float(kind)))
    elif kind == "path_escape":
        return _escape(fmt, src, tmp_path)
    elif kind == "truncated":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    else:  # the whole module pickled (torch.save(ae)), which torch's weights_only loader refuses
        torch.save(torch.nn.Linear(2, 2), weights)
    return weights


def _hub_source(fmt: str, src, cache) -> list[str]:
    """The damaged folder `src` as subfolder `sub` of Hub repo REPO in the cache; the import's source arguments."""
    _cache(cache, REPO, src.parent)
    return [REPO, "--sae-id", "sub"] if fmt == "hub-saelens" else [f"{REPO}/sub"]


def test_the_enumeration_covers_each_format_and_damage_kind():
    assert len(FORMATS) * len(KINDS) == 80 and len(NOT_GENERATED) == 13 and len(CASES) == 67


@pytest.mark.parametrize("fmt, kind", CASES)
def test_a_damaged_source_is_refused_in_one_line_naming_the_file(
    bound,  # noqa: F811
    offline,  # noqa: F811
    tmp_path,
    capsys,
    fmt,
    kind,
):
    ws, model, spec, made = bound
    src = tmp_path / "repo" / "sub"
    _build(fmt, src, model, made["standard"])
    named = _damage(fmt, kind, src, tmp_path)
    name = f"damaged-{fmt}-{kind}"
    source = _hub_source(fmt, src, offline) if fmt in HUB else [str(src)]
    argv = ["sae", "import", *source, "--model", spec, "--workspace", str(ws.root), "--name", name]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    if fmt == "hub-saelens" and kind == "missing_file":  # a file missing from the cache is a cache miss
        assert "not in the local cache" in err and str(offline) in err, err
    else:  # the file in the cache where the source is a Hub id
        where = offline / f"models--{REPO.replace('/', '--')}" / "snapshots" if fmt in HUB else named.parent
        assert named.name in err and str(where) in err, err
    assert not list(ws.root.rglob(f"*{name}*"))  # nothing written, nothing listed


def _refused(ws, spec, src, capsys) -> str:
    assert main(["sae", "import", str(src), "--model", spec, "--workspace", str(ws.root), "--name", "refused"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and not list(ws.root.rglob("*refused*")), err
    return err


def test_a_clt_without_a_decoder_file_names_it(bound, tmp_path, capsys):  # noqa: F811
    ws, model, spec, _ = bound
    _tracer_clt(tmp_path / "clt", model.cfg.n_layers, "per_layer")
    (tmp_path / "clt" / "W_dec_1.safetensors").unlink()
    err = _refused(ws, spec, tmp_path / "clt", capsys)
    assert f"{tmp_path / 'clt' / 'W_dec_1.safetensors'} is missing: the CLT has 2 encoder, 1 decoder files" in err


@pytest.mark.parametrize("listed", ["../../../../etc/passwd", "/etc/passwd"])
def test_a_set_config_listing_a_system_file_is_refused_unread(bound, tmp_path, capsys, listed):  # noqa: F811
    ws, model, spec, _ = bound
    _tracer_set(tmp_path / "set", 2, skip=False)
    cfg = yaml.safe_load((tmp_path / "set" / "config.yaml").read_text())
    (tmp_path / "set" / "config.yaml").write_text(
        yaml.safe_dump({**cfg, "transcoders": ["layer_0.safetensors", listed]})
    )
    err = _refused(ws, spec, tmp_path / "set", capsys)
    assert (
        f"{tmp_path / 'set' / 'config.yaml'}: damaged circuit-tracer config (it names '{listed}', which is outside"
        in err
    )
