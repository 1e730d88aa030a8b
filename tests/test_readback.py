"""The one damaged-file path (workbench.readback), enumerated: for every artifact kind the workspace knows
(workspace.KINDS), a small real artifact of it is made through workbench.steps, and each of its files in turn is
truncated, emptied, swapped for a JSON value of another type, and has bytes flipped in the middle; the loaders the
commands call for that kind must then raise one DamagedFileError naming the file: never a traceback, never a
silent success. A kind without a loader registered in READERS fails the test, so a new kind is covered (or
flagged) without editing the cases."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from workbench import browse, readback
from workbench.errors import DamagedFileError
from workbench.workspace import KINDS, MANIFEST, Workspace


def _cache(folder: Path) -> None:
    from workbench.cache import ActivationCache

    ActivationCache.open(folder, verify=True)  # what a harvest's readers check as they read each file


def _sae(folder: Path) -> None:
    from workbench.sae.io import load_sae

    browse.open_sae(folder)
    load_sae(folder)


def _transcoders(folder: Path) -> None:
    from workbench.sae.transcoders import load_set

    browse.open_transcoder_set(folder)
    load_set(folder)


def _clt(folder: Path) -> None:
    from workbench.circuits.feature.transcoders import open_set

    open_set(folder).load()


def _circuit(folder: Path) -> None:
    if (folder / browse.CIRCUIT).is_file():
        browse.open_circuit(folder)
    if (folder / browse.FEATURE_GRAPH).is_file():
        browse.open_feature_graph(folder)


def _model(folder: Path) -> None:
    from workbench.models import load

    load(str(folder), device="cpu")


def _features(folder: Path) -> None:
    from workbench.features.store import FeatureStore

    store = FeatureStore(folder)
    store.units, store.vocab, store.scaffold  # noqa: B018  (each file parsed as the app reads it)
    for name in store.manifest["files"]:
        if name.endswith(".npy"):
            store.array(name[: -len(".npy")])
    store.unit(0)


def _intervention(folder: Path) -> None:
    readback.verify_artifact(folder, "intervention")
    readback.json_file(folder / "result.json", "intervention result")


READERS = {  # kind -> what the commands and the app call to read one
    "caches": _cache,
    "saes": _sae,
    "transcoders": _transcoders,
    "clts": _clt,
    "circuits": _circuit,
    "models": _model,
    "features": _features,
    "interventions": _intervention,
}


def _truncate(b: bytes) -> bytes:
    return b[: len(b) // 2]


def _empty(b: bytes) -> bytes:
    return b""


def _type_swap(b: bytes) -> bytes:
    """Valid JSON of another type than the file holds (a list where an object was, else an object)."""
    return b"{}" if b.lstrip().startswith(b"[") else b"[]"


def _flip(b: bytes) -> bytes:
    """16 bytes in the middle of the file changed (inside a float payload for a binary file)."""
    data = bytearray(b)
    mid = len(data) // 2
    for i in range(mid, min(mid + 16, len(data))):
        data[i] ^= 0x01
    return bytes(data)


DAMAGES = {"truncated": _truncate, "empty": _empty, "type-swapped": _type_swap, "byte-flipped": _flip}


@pytest.fixture(scope="module")
def workspace(transcoder_workspace, tiny, tmp_path_factory):
    """The transcoder workspace (copied: every kind but circuits), plus a query circuit of its random model and an
    attribution graph through a transcoder set on all its layers, each made through workbench.steps."""
    from workbench.circuits.feature.graph_config import GraphConfig
    from workbench.corpus import tasks
    from workbench.interventions.config import InterventionConfig
    from workbench.models import load
    from workbench.sae.config import CLTConfig, SAEConfig, TrainConfig
    from workbench.steps.circuits import find_circuit
    from workbench.steps.dictionaries import train_clt, train_transcoder_set
    from workbench.steps.graphs import attribution_graph
    from workbench.steps.interventions import intervene

    root = tmp_path_factory.mktemp("readback") / "ws"
    shutil.copytree(transcoder_workspace, root, symlinks=True)
    ws = Workspace(root)
    model_dir = str(root / "models" / "random")
    model, tok = load(model_dir, device="cpu")
    q = tasks.queries("induction", 1, tokenizer=tok)[0]
    fast = dict(budget=0.1, n_samples=1, steps=2, refine_steps=1, min_gap=0.0, curve=False)
    find_circuit(ws, model, q.prompt, q.answer, q.counterfactual, model_spec=model_dir, name="query", **fast)
    train = TrainConfig(n_tokens=2048, batch_size=512, lr=1e-3, progress=False)
    every, _ = train_transcoder_set(ws, root / "caches" / "mlp", "all", [SAEConfig("topk", k=4)], train, name="all")
    cfg = GraphConfig(max_feature_nodes=8, batch_size=8, heads=False)
    attribution_graph(ws, model, every, q.prompt, cfg=cfg, model_spec=model_dir, name="g")
    clt = CLTConfig("topk", k=4, expansion=2)
    train_clt(ws, root / "caches" / "mlp", "all", clt, train, name="clt")
    iv = InterventionConfig(features=["0:1"], op="ablate", continue_tokens=2)
    intervene(ws, model, every, q.prompt, iv, model_spec=model_dir, name="iv")
    return root


def _files(artifact) -> list[Path]:
    """The artifact's files: its manifest and what it lists, less those of an artifact recorded inside it."""
    folder = artifact.path
    listed = [folder / rel for rel in artifact.manifest["files"]]
    return [folder / MANIFEST] + [p for p in listed if readback.owner(p) == folder / MANIFEST]


def _samples(root: Path, kind: str) -> list:
    """The smallest artifact of the kind for each set of top-level file names it comes in (a query circuit and an
    attribution graph; a feature store with and without a scaffold or blocks; one SAE, one transcoder set)."""
    seen, out = set(), []
    for a in sorted(Workspace(root).artifacts(kind), key=lambda a: len(a.manifest["files"])):
        names = frozenset(f for f in a.manifest["files"] if "/" not in f)
        if names not in seen:
            seen.add(names)
            out.append(a)
    return out


def _fresh_process() -> None:
    """Forget which files this process already checked (a file rewritten in the same clock tick keeps its
    mtime): each damaged file is read as the next command, a new process, reads it."""
    from workbench.cache import reader

    readback._VERIFIED.clear()
    reader._VERIFIED.clear()


def test_every_artifact_kind_has_a_reader():
    assert set(READERS) == set(KINDS), f"register a reader for {sorted(set(KINDS) - set(READERS))}"


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("kind", KINDS)
def test_every_file_of_every_kind_damaged_is_one_line_naming_it(workspace, kind, damage):
    samples = _samples(workspace, kind)
    assert samples, f"the test workspace holds no {kind} artifact: make one in the `workspace` fixture"
    failures = []
    for artifact in samples:
        READERS[kind](artifact.path)  # undamaged, it reads
        for path in _files(artifact):
            good = path.read_bytes()
            bad = DAMAGES[damage](good)
            if bad == good:
                continue
            path.write_bytes(bad)
            _fresh_process()
            try:
                READERS[kind](artifact.path)
                failures.append(f"{path}: read without an error")
            except DamagedFileError as e:
                if str(path) not in str(e) or "\n" in str(e):
                    failures.append(f"{path}: the error does not name it on one line: {e}")
            except Exception as e:  # noqa: BLE001  (what the test looks for: any other error is a traceback)
                failures.append(f"{path}: {type(e).__name__}: {e}")
            finally:
                path.write_bytes(good)
    assert not failures, f"{len(failures)} {damage} files of {kind}:\n" + "\n".join(failures)


def test_json_file_names_the_file_and_what_is_wrong(tmp_path):
    path = tmp_path / "x.json"
    for text, detail in (
        ("{", "JSONDecodeError"),
        ("[]", "a JSON list, not a JSON dict"),
        ('{"a": 1}', "no 'layers'"),
        ('{"layers": {}}', "'layers' is dict, not list"),
    ):
        path.write_text(text)
        with pytest.raises(DamagedFileError, match=rf"^{path}: damaged test file \({detail}.*\); remake it$"):
            readback.json_file(path, "test file", "remake it", fields={"layers": list})


def test_a_sealed_file_with_a_changed_value_is_refused(tmp_path):
    path = tmp_path / "plan.json"
    readback.write_sealed_json(path, {"layers": [0, 1], "x": float("nan")})
    assert readback.sealed_json(path, "plan") == {"layers": [0, 1], "x": None}
    path.write_text(path.read_text().replace("1", "2", 1))
    with pytest.raises(DamagedFileError, match="checksum does not match its contents"):
        readback.sealed_json(path, "plan")
    path.write_text(json.dumps({"layers": [0, 1]}))  # written before seals: accepted only where legacy is
    assert readback.sealed_json(path, "plan", legacy=True) == {"layers": [0, 1]}
    with pytest.raises(DamagedFileError, match="no 'sha256' checksum: damaged, or written by an older"):
        readback.sealed_json(path, "plan")


def test_yaml_file_names_the_file_and_what_is_wrong(tmp_path):
    path = tmp_path / "config.yaml"
    for text, detail in (
        ("a: [unclosed\n", "ParserError: while parsing a flow sequence"),
        ("- 1\n", "a YAML list, not a YAML dict"),
        ("", "a YAML NoneType, not a YAML dict"),
        ("layers: 3\n", "'layers' is int, not list"),
    ):
        path.write_text(text)
        with pytest.raises(DamagedFileError, match=rf"^{path}: damaged test file \({detail}.*\); remake it$"):
            readback.yaml_file(path, "test file", "remake it", fields={"layers": list})
    path.write_text("layers: [1, 2]\n")
    assert readback.yaml_file(path, "test file", fields={"layers": list}) == {"layers": [1, 2]}


def test_a_listed_path_outside_its_folder_is_refused(tmp_path):
    config = tmp_path / "config.yaml"
    for listed in ("../../../../etc/passwd", "/etc/passwd", "a/../../b.safetensors"):
        with pytest.raises(
            DamagedFileError, match=rf"^{config}: damaged config \(it names '{listed}', which is outside"
        ):
            readback.confined(tmp_path, listed, "config", config)
    assert readback.confined(tmp_path, "a/../layer_0.safetensors", "config", config) == tmp_path / "layer_0.safetensors"


def test_tensors_checks_names_dtypes_shapes_and_finiteness(tmp_path):
    import torch

    path, shapes = tmp_path / "w.safetensors", {"W": ("n", "d"), "b": ("n",), "k": (), "skip": ("d", "d")}
    good = {"W": torch.zeros(4, 3), "b": torch.zeros(4), "k": torch.tensor(2)}
    assert readback.tensors(path, "weights", good, shapes, optional=("skip",), ints=("k",)) == {"n": 4, "d": 3}
    for state, detail in (
        ([torch.zeros(2)], "holds list, not a mapping of names to tensors"),
        ({**good, "W": "x"}, "holds a mapping with non-tensor values"),
        ({k: v for k, v in good.items() if k != "b"}, "no tensor 'b'; it has 'W', 'k'"),
        ({**good, "W": torch.zeros(4, 3, dtype=torch.int32)}, "'W' is torch.int32, not a float"),
        ({**good, "k": torch.tensor(2.0)}, "'k' is torch.float32, not an integer"),
        ({**good, "b": torch.zeros(5)}, r"'b' has shape \[5\], not \[n=4\] \(n from 'W'\)"),
        ({**good, "W": torch.zeros(4, 3, 1)}, r"'W' has shape \[4, 3, 1\], not \[n=4, d=3\]"),
        ({**good, "b": torch.tensor([0, float("inf"), float("nan"), 0])}, "'b' holds 2 NaN/inf values"),
    ):
        with pytest.raises(DamagedFileError, match=rf"^{path}: damaged weights \({detail}"):
            readback.tensors(path, "weights", state, shapes, optional=("skip",), ints=("k",))
    with pytest.raises(DamagedFileError, match=r"'W' has shape \[4, 3\], not \[n=4, d=5\] \(d from cfg.json\)"):
        readback.tensors(
            path, "weights", good, shapes, optional=("skip",), ints=("k",), dims={"d": 5}, given="cfg.json"
        )


def test_a_pickled_object_is_named_not_torchs_advice(tmp_path):
    import torch

    path = tmp_path / "ae.pt"
    torch.save(torch.nn.Linear(2, 2), path)
    with pytest.raises(DamagedFileError) as e:
        readback.torch_file(path, "state dict")
    assert str(e.value) == (
        f"{path}: damaged state dict (it holds a pickled torch.nn.modules.linear.Linear, not only tensors and plain "
        "data; such objects are not loaded (they could run code))"
    )
