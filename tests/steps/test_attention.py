"""The embedded sparse-attention models copied into a workspace with the circuit claims shipped with them."""

from pathlib import Path

import pytest

from workbench import browse
from workbench.errors import DamagedFileError, OutputExistsError
from workbench.steps.artifacts import rerecord
from workbench.steps.attention import embedded_sparse_model
from workbench.workspace import MANIFEST, Workspace

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name, base, flows", [("tiny-sparse", "tiny", 0), ("small-sparse", "small", 10)])
def test_the_embedded_sparse_model_is_copied_recorded_and_loadable(name, base, flows, tmp_path):
    """Each embedded sparse model ships its circuit claims for Compare: the committed section-3 results of
    bench/circuits/circuit_claims.py for all five task families, byte for byte (flows: the head flows through per-layer sets
    and CLTs, one per family and kind), measured on base, the control shipped beside it and sparse."""
    from workbench.errors import BadValueError
    from workbench.models import load, model_id

    ws = Workspace(tmp_path / "ws")
    report, folder = embedded_sparse_model(ws, name, ensure=True)
    art = next(a for a in ws.artifacts("models"))
    assert art.name == name and art.manifest["made_by"] == f"embedded data/models/{name}"
    assert {"model.safetensors", "attention_report.json", "README.md"} <= set(art.manifest["files"])
    shipped = dict(browse.compare_results(folder))  # the circuit claims measured on this model, for Compare
    assert set(shipped) == {"ioi", "induction", "greater_than", "addition", "facts"}
    assert all(r["n"] == 20 and r["sparse_model"] == report["model_id"] for r in shipped.values())
    assert all(r["base_model"] == report["base_model"] for r in shipped.values())
    # the control shipped beside the model (finetune_control.py --write) is the one its claims were measured with
    control = report.get("fine_tuned_control", {}).get("model")
    claims = ROOT / "bench" / "results" / "circuit_claims" / f"{base}-vs-{name}-control-vs-{name}"
    assert control and all(r.get("control_model") == control for r in shipped.values())
    from workbench.attention.compare import saved_control

    assert model_id(saved_control(folder)) == control  # the workspace's copy carries the shipped control
    for task in shipped:
        assert (folder / "compare" / f"{task}.json").read_bytes() == (claims / f"heldout-{task}-n20.json").read_bytes()
    heads = browse.head_flow_results(folder)
    assert len(heads) == flows and {kind for kind, _, _ in heads} <= {"set", "clt"}
    for kind, task, res in heads:
        stored = claims / f"heads-{kind}-heldout-{task}-n20.json"
        assert (folder / "compare" / f"heads-{kind}-{task}.json").read_bytes() == stored.read_bytes()
        assert res["n"] == 20 and res["sparse_model"] == report["model_id"] and res["task"] == task
        assert res["control_model"] == control
    assert art.manifest["summary"]["mean_open_keys_per_query"] == report["mean_open_keys_per_query"]
    assert model_id(load(str(folder), device="cpu")[0]) == report["model_id"] == model_id(load(name)[0])
    manifest = (folder / MANIFEST).read_text()
    assert embedded_sparse_model(ws, name, ensure=True)[1] == folder and (folder / MANIFEST).read_text() == manifest
    with pytest.raises(OutputExistsError, match="already holds a model"):
        embedded_sparse_model(ws, name)
    if flows:  # a listed file outside the naming scheme is refused by name, not misread
        (folder / "compare" / "heads-sae-ioi.json").write_bytes(
            (folder / "compare" / "heads-set-ioi.json").read_bytes()
        )
        rerecord(ws, folder, "models", "a test")
        with pytest.raises(DamagedFileError, match=r"heads-sae-ioi.json: .* with kind one of set, clt; rename"):
            browse.head_flow_results(folder)
    with pytest.raises(
        BadValueError,
        match="'tiny' is not an embedded sparse-attention model; choose one of: tiny-sparse, small-sparse",
    ):
        embedded_sparse_model(ws, "tiny")
