"""A graph's feature labels (circuit-tracer's `clerp`): the short form of a latent's explanation where its member's
store has explanations, else its best ground-truth label."""

import shutil

from workbench.circuits.feature.graph_json import set_labels
from workbench.circuits.feature.transcoders import open_set
from workbench.features import FeatureStore
from workbench.features.explain import ExplainConfig
from workbench.features.explain_run import explain_store
from workbench.features.explanations import short_labels


def test_explained_members_label_their_latents_with_the_explanation_s_short_form(transcoder_workspace, tmp_path):
    root = shutil.copytree(transcoder_workspace, tmp_path / "ws", symlinks=True)
    tset = root / "transcoders" / "set"
    before = set_labels(str(tset))
    folders = open_set(str(tset)).member_folders(0)
    assert sorted(folders) == [0, 2] and {layer for layer, _ in before} == {0, 2}
    explain_store(folders[0], ExplainConfig(pool=200), ("detection",), progress=False)
    after = set_labels(str(tset))
    short = short_labels(FeatureStore(folders[0]))
    assert len(short) == FeatureStore(folders[0]).n_units
    assert {u: v for (layer, u), v in after.items() if layer == 0} == short
    assert all(v.startswith("[template] ") and len(v) <= 40 for v in short.values())
    assert {k: v for k, v in after.items() if k[0] == 2} == {k: v for k, v in before.items() if k[0] == 2}
    assert all("precision" in v for (layer, _), v in before.items() if layer == 0)  # ground truth before explaining
