"""Dictionary folders: each kind opens as the class its table row names, every one a DictionaryFolder (the model
it was trained on, the manifest read once, the dictionary loaded once per device), and a folder of another kind
is refused where a set is needed."""

from pathlib import Path

import pytest
from small_models import small_model

from workbench.dictionaries.folders import CLTFolder, DictionaryFolder, SAEFolder, TranscoderSet, open_folder, open_set
from workbench.dictionaries.kinds import CLT, SAE, TRANSCODERS
from workbench.errors import BadValueError, UserError
from workbench.provenance import model_id


def test_every_kind_opens_as_its_folder_class_and_names_its_model(tiny, tiny_set, tiny_clt):
    model, _ = tiny
    member = next(iter(open_set(tiny_set).member_folders().values()))
    opened = {kind: open_folder(folder) for kind, folder in ((TRANSCODERS, tiny_set), (CLT, tiny_clt), (SAE, member))}
    assert [type(f) for f in opened.values()] == [TranscoderSet, CLTFolder, SAEFolder]
    for kind, folder in opened.items():
        assert isinstance(folder, DictionaryFolder) and folder.kind is kind and open_folder(folder) is folder
        assert folder.model == model_id(model) and Path(folder.cache).is_dir()  # the cache it was trained on
    assert open_set(opened[CLT]) is opened[CLT] and open_set(tiny_clt).kind is CLT
    with pytest.raises(UserError, match="transcoders.json"):  # an SAE folder is not a set: read as one, refused
        open_set(member)


def test_an_sae_folder_loads_its_sae_once_and_refuses_another_model(tiny, tiny_set):
    model, _ = tiny
    folder = SAEFolder(next(iter(open_set(tiny_set).member_folders().values())))
    sae = folder.load(device="cpu", model=model)
    assert folder.load() is sae and sae.cfg.metadata.hook_name == folder.manifest["metadata"]["hook_name"]
    with pytest.raises(BadValueError, match=r"the SAE '.*' was trained on 'workbench-tiny@.*', not on this model"):
        folder.load(model=small_model(None, seed=2, n_layers=2))
    with pytest.raises(BadValueError, match="an SAE folder holds one dictionary; member 1 is not 0"):
        folder.load(1)


def test_an_sae_folder_is_checked_when_it_loads_not_when_it_opens(tmp_path):
    """Opening reads nothing (load_sae's checks run on load), so a missing SAE fails with load_sae's message."""
    folder = open_folder(tmp_path)
    assert isinstance(folder, SAEFolder)
    with pytest.raises(UserError, match="is not an SAE folder: cfg.json is missing"):
        folder.load()
