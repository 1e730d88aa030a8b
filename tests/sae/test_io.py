"""Saved SAEs load through sae_lens.SAE.load_from_disk and reconstruct exactly like the workbench SAE."""

import json

import pytest
import torch
from sae_lens import SAE, GatedSAE, JumpReLUSAE, StandardSAE, TopKSAE

from workbench.errors import DamagedFileError
from workbench.sae.config import SAEConfig, TrainConfig
from workbench.sae.io import load_sae, save_sae
from workbench.sae.saelens import BlockSparseSAE, ScaffoldSAE
from workbench.sae.trainer import Trainer, run_steps

from .conftest import D_IN, feature_batches

EXPECTED = {  # architecture -> (SAELens architecture, class) without / with a scaffold
    "topk": ("topk", TopKSAE),
    "batchtopk": ("jumprelu", JumpReLUSAE),
    "matryoshka": ("jumprelu", JumpReLUSAE),
    "block_topk": ("workbench_block_sparse", BlockSparseSAE),
    "group_lasso": ("workbench_block_sparse", BlockSparseSAE),
    "block_jumprelu": ("workbench_block_sparse", BlockSparseSAE),
    "grassmannian": ("workbench_block_sparse", BlockSparseSAE),
    "jumprelu": ("jumprelu", JumpReLUSAE),
    "gated": ("gated", GatedSAE),
    "standard": ("standard", StandardSAE),
}


def _trained(arch, scaffold_rank):
    cfg = SAEConfig(
        arch, k=4, n_latents=48, block_size=3, n_active_blocks=2, block_l0_coef=0.3, scaffold_rank=scaffold_rank
    ).resolve(D_IN, 10_000)
    tr = Trainer([cfg], TrainConfig(n_tokens=128 * 20, batch_size=128, lr=3e-3, warmup_steps=1, progress=False))
    run_steps(tr, feature_batches(), 20)
    return tr.saes[0]


@pytest.mark.parametrize("scaffold_rank", [0, 3])
@pytest.mark.parametrize("arch", list(EXPECTED))
def test_saelens_loads_and_matches(arch, scaffold_rank, tmp_path):
    sae = _trained(arch, scaffold_rank)
    save_sae(sae, tmp_path, {"hook_name": "blocks.2.hook_resid_post", "model_name": "test"})
    cfg = json.loads((tmp_path / "cfg.json").read_text())
    name, cls = EXPECTED[arch]
    if scaffold_rank and not sae.cfg.is_block:
        name, cls = "workbench_scaffold", ScaffoldSAE
    assert cfg["architecture"] == name
    assert cfg["metadata"]["hook_name"] == "blocks.2.hook_resid_post"
    loaded = SAE.load_from_disk(tmp_path)
    assert type(loaded) is cls
    x = next(feature_batches(99))
    torch.testing.assert_close(loaded(x), sae.reconstruct(x), atol=1e-4, rtol=1e-4)
    if arch in ("batchtopk", "matryoshka"):
        assert torch.allclose(loaded.threshold[: sae.cfg.n_latents], torch.tensor(float(sae.threshold)))
    if arch == "jumprelu":  # one threshold per latent
        torch.testing.assert_close(loaded.threshold[: sae.cfg.n_latents], sae.theta.detach())
    if scaffold_rank:  # zeroing the scaffold's codes removes exactly its output
        codes = loaded.encode(x)
        codes[:, sae.cfg.n_latents :] = 0
        torch.testing.assert_close(loaded.decode(codes), sae.reconstruct(x, drop_scaffold=True), atol=1e-4, rtol=1e-4)
    assert load_sae(tmp_path).cfg.d_in == D_IN


def test_load_sae_names_the_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="cfg.json is missing"):
        load_sae(tmp_path)


def _saved(tmp_path):
    save_sae(_trained("topk", 0), tmp_path, {"hook_name": "blocks.2.hook_resid_post", "model_name": "test"})
    return tmp_path / "sae_weights.safetensors"


def test_damaged_weights_are_refused_on_load(tmp_path):
    from safetensors.torch import load_file, save_file

    weights = _saved(tmp_path)
    load_sae(tmp_path)
    t = load_file(str(weights))
    t["W_dec"][0, 0] = float("nan")
    save_file(t, str(weights))
    with pytest.raises(DamagedFileError, match="does not match the checksum in .*workbench.json"):
        load_sae(tmp_path)
    (tmp_path / "workbench.json").unlink()  # an SAE saved elsewhere: no checksum, but NaN is still caught
    with pytest.raises(DamagedFileError, match=r"sae_weights.safetensors holds NaN/inf values in W_dec"):
        load_sae(tmp_path)
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(DamagedFileError, match=f"cannot load the SAE in {tmp_path}"):
        load_sae(tmp_path)
    (tmp_path / "cfg.json").write_text("[1]")
    with pytest.raises(DamagedFileError, match="cfg.json holds a JSON list"):
        load_sae(tmp_path)


@pytest.mark.parametrize(
    "first_import, order",
    [
        ("import workbench.sae.config", "workbench first"),
        ("import workbench.features", "sae_lens first"),
        ("from workbench.sae import register; register()", "workbench first"),  # the README's order
        ("from workbench.sae import register; register()", "sae_lens first"),
        ("import workbench.sae.saelens", "workbench first"),
    ],
)
def test_saelens_loads_workbench_saes_after_any_workbench_import(first_import, order, tmp_path):
    """A fresh process that imported a workbench SAE-facing module loads a block-sparse and a scaffold SAE
    with sae_lens alone: no register() ritual, whichever of the two it imported first; the README's
    `from workbench.sae import register; register()` works as its first line too."""
    import subprocess
    import sys
    from pathlib import Path

    for arch, rank in (("block_topk", 0), ("topk", 3)):
        save_sae(_trained(arch, rank), tmp_path / arch, {"hook_name": "blocks.2.hook_resid_post", "model_name": "t"})
    imports = [first_import, "from sae_lens import SAE"]
    code = "\n".join(
        (imports if order == "workbench first" else imports[::-1])
        + [f"print(type(SAE.load_from_disk({str(tmp_path / a)!r})).__name__)" for a in ("block_topk", "topk")]
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, env={"PYTHONPATH": str(root)}
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["BlockSparseSAE", "ScaffoldSAE"]
