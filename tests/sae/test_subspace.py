"""Subspace alignment and the principal-direction baseline, on planted geometry and a real (random) model."""

import pytest
import torch
import torch.nn.functional as F

from workbench.errors import BadValueError
from workbench.sae import subspace


def _planted(n=3000, d=12):
    """Large variance along e1 and e4, a large constant offset on coordinate 7, small noise elsewhere."""
    g = torch.Generator().manual_seed(0)
    x = 0.1 * torch.randn(n, d, generator=g, dtype=torch.float64)
    x[:, 1] += 5 * torch.randn(n, generator=g, dtype=torch.float64)
    x[:, 4] += 3 * torch.randn(n, generator=g, dtype=torch.float64)
    x[:, 7] += 20.0
    return x


def test_principal_components_recover_the_planted_directions():
    mu, V, share = subspace.principal_components(_planted(), 2)
    assert mu[7] == pytest.approx(20.0, abs=0.05)
    assert V[:, 0].abs().argmax() == 1 and V[:, 1].abs().argmax() == 4
    assert share[0] > share[1] > 0.2 and float(share.sum()) < 1
    with pytest.raises(BadValueError, match="rank r=13 must be in 1..12"):
        subspace.principal_components(_planted(), 13)


def test_overlap_is_one_for_the_same_span_and_zero_for_orthogonal_ones():
    eye = torch.eye(6, dtype=torch.float64)
    A = eye[:, :2]
    assert subspace.overlap(A @ torch.tensor([[2.0, 1.0], [0.0, 3.0]], dtype=torch.float64), A) == pytest.approx(1.0)
    assert subspace.overlap(eye[:, 2:4], A) == pytest.approx(0.0, abs=1e-12)
    assert subspace.overlap(eye[:, :3], A) == pytest.approx(1.0)  # A inside a larger span
    with pytest.raises(BadValueError, match="linearly dependent"):
        subspace.overlap(torch.ones(6, 2, dtype=torch.float64), A)


def test_outlier_dims_and_axis_overlap():
    x = _planted()
    dims, ratio = subspace.outlier_dims(x, 1)
    assert dims == [7] and ratio[0] > 10
    e = torch.eye(12, dtype=torch.float64)
    assert subspace.axis_overlap(e[:, [7, 2]], [7]) == pytest.approx(1.0)
    assert subspace.axis_overlap((e[:, 7] + e[:, 3])[:, None], [7, 3]) == pytest.approx(0.5)


def test_projection_removed_ce_on_a_real_model():
    """Clean CE is the model's own loss; removing the whole space puts the centre at every non-special
    position, which a hook doing exactly that reproduces."""
    from workbench.corpus.vocab import vocabulary
    from workbench.models.tokenizer import build_tokenizer
    from workbench.models.toy import TinyConfig, build

    torch.manual_seed(0)
    model = build(TinyConfig(), build_tokenizer(vocabulary())).eval()
    d, hook = model.cfg.d_model, "blocks.1.hook_resid_post"
    tokens = torch.randint(1, model.cfg.d_vocab, (3, 20))
    tokens[:, 0] = 0  # a "special" id, left as it is
    centre = torch.randn(d, dtype=torch.float64)
    out = subspace.projection_removed_ce(model, hook, torch.eye(d, dtype=torch.float64), centre, tokens, {0}, 2)
    with torch.no_grad():
        assert out["ce_clean"] == pytest.approx(float(model(tokens, return_type="loss")), rel=1e-5)

        def to_centre(act, hook):
            act = act.clone()
            act[:, 1:] = centre.to(act.dtype)
            return act

        logits = model.run_with_hooks(tokens, fwd_hooks=[(hook, to_centre)])[:, :-1]
        ce = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
    assert out["ce_removed"] == pytest.approx(float(ce), rel=1e-5)
    assert out["n_predictions"] == 3 * 19
