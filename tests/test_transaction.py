"""The artifact transaction (workbench/transaction.py) and names checked where paths are made: an import that fails
half-way leaves nothing listed and its name free, a name cannot reach another artifact's folder, a new workspace
folder is made by the import itself, and a staged artifact that is not whole is never renamed into place."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.sae.test_foreign import _dictionary_learning, _sparsify_run
from tests.sae.test_imports import _tracer_set, bound  # noqa: F401 (a fixture)
from workbench.cli import main
from workbench.errors import BadValueError
from workbench.steps.exchange import import_sae
from workbench.transaction import artifact_transaction
from workbench.workspace import MANIFEST, Workspace


@pytest.mark.parametrize("relative", [True, False])
def test_sae_import_refuses_a_name_that_leaves_its_folder(bound, tmp_path, capsys, relative):  # noqa: F811
    """`--name ../../../victim/c1` (or an absolute path) once wrote a sparsify run's SAEs into that artifact."""
    ws, _, spec, _ = bound
    _sparsify_run(tmp_path / "run", {"layers.0": False, "layers.1": False})
    victim = Workspace(ws.root.parent / f"victim-{relative}")
    folder = victim.root / "c1"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text("{}")
    victim.record(folder, "caches", made_by="test", config={})
    before = (folder / MANIFEST).read_bytes()
    (ws.root / "saes" / "imported").mkdir(parents=True, exist_ok=True)
    name = f"../../../{victim.root.name}/c1" if relative else str(folder)
    argv = ["sae", "import", str(tmp_path / "run"), "--workspace", str(ws.root), "--model", spec, "--name", name]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"artifact name {name!r} must be one folder name" in err, err
    assert (folder / MANIFEST).read_bytes() == before
    assert sorted(p.relative_to(victim.root).as_posix() for p in victim.root.rglob("*")) == [
        "c1",
        f"c1/{MANIFEST}",
        "c1/manifest.json",
    ]


def test_a_tracer_set_failing_at_layer_1_records_nothing_and_frees_its_name(bound, tmp_path):  # noqa: F811
    ws, model, spec, _ = bound
    _tracer_set(tmp_path / "tracer", 2, False)
    good = load_file(str(tmp_path / "tracer" / "layer_0.safetensors"))
    bad = {k: v.clone() for k, v in good.items()}
    bad["activation_function.threshold"][:3] = -0.1  # layer 1 is refused after layer 0 was converted
    save_file(bad, str(tmp_path / "tracer" / "layer_1.safetensors"))
    with pytest.raises(BadValueError, match="3 JumpReLU thresholds are negative"):
        import_sae(ws, tmp_path / "tracer", spec, model=model, name="half")
    assert not ws.path("transcoders", "half").exists()
    assert [a for a in ws.artifacts() if "half" in a.path.parts] == []
    assert not [p for p in ws.root.rglob("*half*")]  # no staging folder left either
    save_file(good, str(tmp_path / "tracer" / "layer_1.safetensors"))
    summary, folder = import_sae(ws, tmp_path / "tracer", spec, model=model, name="half")
    assert summary["transcoders"] == 2 and (folder / MANIFEST).is_file()


@pytest.mark.parametrize(
    "cls",
    ["AutoEncoder", "AutoEncoderTopK"],
)
def test_a_dictionary_learning_import_makes_a_new_workspace(bound, tmp_path, capsys, cls):  # noqa: F811
    _, _, spec, _ = bound
    _dictionary_learning(tmp_path / cls, cls, "resid_post_layer_1")
    new = tmp_path / "new" / "ws"
    argv = ["sae", "import", str(tmp_path / cls), "--workspace", str(new), "--model", spec]
    assert main([*argv, "--hook", "blocks.1.hook_resid_post", "--name", "dl"]) == 0, capsys.readouterr().err
    [a] = Workspace(new).artifacts()
    assert a.path == new / "saes" / "imported" / "dl" and a.kind == "saes"
    assert sorted(p.name for p in new.iterdir()) == ["saes"]  # no temp or staging folder left


def test_a_staged_tensor_with_a_nan_is_never_renamed_into_place(tmp_path):
    ws = Workspace(tmp_path / "ws")
    with pytest.raises(BadValueError, match=r"tensor 'W' has 1 NaN or infinite value\(s\); nothing was recorded"):
        with artifact_transaction(ws, ws.path("clts", "x"), "clts", "test") as staged:
            save_file({"W": torch.tensor([1.0, float("inf")])}, str(staged / "w.safetensors"))
            ws.record(staged, "clts", made_by="test", config={})
    assert not ws.path("clts", "x").exists() and ws.artifacts() == []


def test_a_step_that_fails_inside_the_transaction_leaves_the_name_free(tmp_path):
    ws = Workspace(tmp_path / "ws")
    folder = ws.path("circuits", "c")
    with pytest.raises(RuntimeError, match="stopped"), artifact_transaction(ws, folder, "circuits", "test") as staged:
        (staged / "circuit.json").write_text("{}")
        ws.record(staged, "circuits", made_by="test", config={})
        assert ws.artifacts() == []  # a staged artifact is not listed
        raise RuntimeError("stopped")
    assert not folder.exists() and ws.artifacts() == []
    with artifact_transaction(ws, folder, "circuits", "test") as staged:
        (staged / "circuit.json").write_text("{}")
        ws.record(staged, "circuits", made_by="test", config={})
    [a] = ws.artifacts()
    assert a.path == folder and json.loads((folder / MANIFEST).read_text())["name"] == "c"


def test_a_staged_sae_whose_shapes_are_not_its_config_is_refused(tmp_path):
    ws = Workspace(tmp_path / "ws")
    with pytest.raises(BadValueError, match=r"W_enc has shape \[4, 8\], but cfg.json says \[4, 6\]"):
        with artifact_transaction(ws, ws.path("saes", "s"), "saes", "test") as staged:
            (staged / "cfg.json").write_text(json.dumps({"d_in": 4, "d_sae": 6}))
            save_file({"W_enc": torch.zeros(4, 8), "W_dec": torch.zeros(6, 4)}, str(staged / "sae_weights.safetensors"))
            ws.record(staged, "saes", made_by="test", config={})
    assert not ws.path("saes", "s").exists()


def test_model_import_overwrite_swaps_the_old_model_out_in_one_rename(tmp_path, capsys):
    from tests.hf_folders import hf_folder

    src, ws = hf_folder("llama", tmp_path / "src"), Workspace(tmp_path / "ws")
    argv = ["model", "import", str(src), "--workspace", str(ws.root), "--name", "mine"]
    assert main(argv) == 0 and main([*argv, "--dtype", "float16", "--overwrite"]) == 0, capsys.readouterr().err
    [a] = ws.artifacts()
    assert a.manifest["config"]["dtype"] == "float16" and a.path == ws.path("models", "mine")
    assert sorted(p.name for p in (ws.root / "models").iterdir()) == ["mine"]  # no staging or old folder left
