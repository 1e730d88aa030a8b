import pytest
import torch

from workbench.errors import BadValueError, ConfigError
from workbench.sae import evaluate
from workbench.sae.config import SAEConfig, TrainConfig
from workbench.sae.eval import fvu_at_inference_k
from workbench.sae.io import load_sae, save_sae
from workbench.sae.trainer import Trainer, run_steps

from .conftest import D_IN, feature_batches


def test_zero_tokens_is_refused_before_any_work(tmp_path):
    """Not 'the cache has no held-out rows': the value is named before the SAE or cache is read."""
    with pytest.raises(ConfigError, match=r"max_tokens=0 must be an integer >= 1"):
        evaluate(tmp_path / "no-sae", tmp_path / "no-cache", None, max_tokens=0)


@pytest.mark.parametrize("arch", ["topk", "batchtopk"])
def test_fvu_at_inference_k_is_the_top_k_rule_at_any_k(arch, tmp_path):
    """At the trained k a Top-k SAE's own rule is the top-k rule, so the FVU is its FVU; a larger k' never
    reconstructs worse than a smaller one on these codes (more of the same non-negative terms, fitted jointly
    in training); a scaffold SAE is refused."""
    cfg = SAEConfig(arch, k=4, n_latents=48).resolve(D_IN, 10_000)
    tr = Trainer([cfg], TrainConfig(n_tokens=128 * 30, batch_size=128, lr=3e-3, warmup_steps=1, progress=False))
    run_steps(tr, feature_batches(), 30)
    save_sae(tr.saes[0], tmp_path, {"hook_name": "blocks.2.hook_resid_post", "model_name": "test"})
    sae = load_sae(tmp_path)
    x = next(feature_batches(start=100))
    out = fvu_at_inference_k(sae, x, [1, 2, 4, 8])
    assert list(out) == [1, 2, 4, 8] and out[1] > out[4]
    if arch == "topk":
        with torch.no_grad():
            own = (x - sae.decode(sae.encode(x))).pow(2).sum() / (x - x.mean(0)).pow(2).sum()
        assert out[4] == pytest.approx(float(own), rel=1e-5)
    cfg_s = SAEConfig("topk", k=4, n_latents=48, scaffold_rank=2).resolve(D_IN, 10_000)
    save_sae(Trainer([cfg_s], TrainConfig(n_tokens=256, batch_size=128, progress=False)).saes[0], tmp_path / "s")
    with pytest.raises(BadValueError, match="without scaffold"):
        fvu_at_inference_k(load_sae(tmp_path / "s"), x, [4])


def test_ce_loss_recovered_is_undefined_when_zero_ablation_lowers_the_loss(tmp_path):
    """A random model predicts worse than the uniform guess that zeroing its residual stream gives, so zero
    ablation LOWERS the loss: the ratio has a negative denominator and is recorded as undefined with the reason,
    not as a huge negative number, and shown that way."""
    import math

    from small_models import small_model

    from workbench.sae.architectures import build
    from workbench.sae.eval import splice_metrics
    from workbench.sae.scores import shown

    model = small_model(seed=0)
    save_sae(build(SAEConfig("topk", k=4, n_latents=64).resolve(32, None)), tmp_path, {"hook_name": "h"})
    tokens = torch.randint(0, 50, (4, 16), generator=torch.Generator().manual_seed(0))
    s = splice_metrics(model, [(load_sae(tmp_path), "blocks.1.hook_resid_post", None)], tokens, [])
    assert s["ce_zero_ablation"] < s["ce_clean"] and math.isfinite(s["kl_score"])
    assert s["ce_loss_recovered"] is None
    reason = s["ce_loss_recovered_undefined"]
    assert reason.startswith("zero ablation does not raise the CE loss (ce_zero_ablation 3.912 <= ce_clean")
    assert shown(s, "ce_loss_recovered", ".3f") == f"undefined ({reason})"
    assert shown(s, "kl_score", ".3f") == format(s["kl_score"], ".3f")
