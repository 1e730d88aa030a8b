"""The read-only layer, on artifacts the steps really made (tiny sizes)."""

import pytest

from workbench import browse
from workbench.cache.config import HarvestConfig
from workbench.errors import DamagedFileError
from workbench.sae.config import SAEConfig, TrainConfig
from workbench.steps.cache import make_cache
from workbench.steps.circuits import find_circuit
from workbench.steps.dictionaries import train_saes
from workbench.workspace import Workspace

HOOK = "blocks.1.hook_resid_post"


@pytest.fixture(scope="module")
def made(tiny, tmp_path_factory):
    model, tok = tiny
    ws = Workspace(tmp_path_factory.mktemp("browse") / "ws")
    cache = make_cache(ws, "tiny", "synthetic", [HOOK], HarvestConfig(n_tokens=3000), progress=False, model=model)
    [sae] = train_saes(
        ws,
        cache.path,
        HOOK,
        [SAEConfig(k=4, expansion=2)],
        TrainConfig(n_tokens=4096, batch_size=1024, progress=False),
        name="run",
    )
    from workbench.corpus import tasks

    q = tasks.queries("induction", 1, tokenizer=tok)[0]
    _, circuit = find_circuit(
        ws,
        model,
        q.prompt,
        q.answer,
        q.counterfactual,
        wrong=q.wrong,
        budget=0.1,
        n_samples=1,
        steps=2,
        refine_steps=1,
        min_gap=0.0,
        curve=False,
    )
    return ws, cache, sae, circuit


def test_artifacts_by_kind(made):
    ws, cache, sae, circuit = made
    assert [a.path for a in browse.artifacts(ws.root, "caches")] == [cache.path]
    assert [a.path for a in browse.artifacts(ws.root, "saes")] == [sae]
    assert [a.path for a in browse.artifacts(ws.root, "circuits")] == [circuit]


def test_catalog_lists_what_the_manifests_record(made):
    ws, _, sae, circuit = made
    cat = browse.catalog(ws.root)
    rel = lambda p: p.resolve().relative_to(ws.root.resolve()).as_posix()  # noqa: E731
    assert cat.saes == [rel(sae)] and cat.circuits == [rel(circuit)] and cat.models == [] and not cat.skipped
    assert cat.feature_stores == set() and cat.sparse_models == []
    cat.circuits.append("x")  # each listing is worked out once and handed out as a copy: the catalog keeps its own
    assert cat.circuits == [rel(circuit)]
    stray = ws.root / "circuits" / "stray"  # a circuit file no manifest records is not listed
    stray.mkdir()
    (stray / "circuit.json").write_text((circuit / "circuit.json").read_text())
    try:
        assert browse.catalog(ws.root).circuits == [rel(circuit)]
    finally:
        (stray / "circuit.json").unlink()
        stray.rmdir()


@pytest.mark.parametrize("text", ["{", "[]", '{"kind": "someone-else"}', '"x"'])
def test_a_damaged_manifest_is_skipped_and_named(made, text):
    ws, _, sae, circuit = made
    bad = ws.root / "circuits" / "broken"
    bad.mkdir()
    (bad / "artifact.json").write_text(text)
    try:
        arts, skipped = browse.scan(ws.root)
        assert [s.path for s in skipped] == [bad / "artifact.json"] and str(bad / "artifact.json") in str(skipped[0])
        assert {a.path for a in arts} >= {sae, circuit} and bad not in {a.path for a in arts}
        assert browse.catalog(ws.root).circuits == [circuit.resolve().relative_to(ws.root.resolve()).as_posix()]
    finally:
        (bad / "artifact.json").unlink()
        bad.rmdir()


def test_resolve_keeps_paths_inside(made, tmp_path):
    ws, _, sae, _ = made
    rel = sae.resolve().relative_to(ws.root.resolve()).as_posix()
    assert browse.resolve(ws.root, rel) == sae.resolve()
    for bad, match in (("../x", "'..' may not appear"), ("/etc", "not a path inside"), ("nothing", "does not exist")):
        with pytest.raises(browse.OutsideWorkspace, match=match):
            browse.resolve(ws.root, bad)


def test_open_sae_reads_config_info_and_curves(made):
    _, _, sae, _ = made
    view = browse.open_sae(sae)
    assert view.hook == HOOK and view.info["sae_config"]["k"] == 4 and view.curves and "fvu" in view.curves[-1]
    assert view.metrics == {} and view.store == {} and view.artifact["kind"] == "saes"  # not evaluated yet


def test_open_circuit_reads_the_folder_or_the_file(made):
    _, _, _, circuit = made
    rec = browse.open_circuit(circuit)
    assert rec.fmt == "workbench" and rec.n_graph_edges == rec.shape.n_edges and rec.query["tokens"]
    assert rec.edges == browse.open_circuit(circuit / "circuit.json").edges
    with pytest.raises(DamagedFileError, match="not a workbench circuit file"):
        browse.open_circuit(circuit / "mib.json")


def test_transcoder_sets_are_listed_with_what_each_member_reads_and_writes(transcoder_workspace):
    cat = browse.catalog(transcoder_workspace)
    assert cat.transcoder_sets == ["transcoders/set"]
    view = browse.open_transcoder_set(transcoder_workspace / "transcoders" / "set")
    rows = view.layers()
    assert [r["layer"] for r in rows] == [0, 2] and view.artifact["kind"] == "transcoders"
    for r in rows:
        assert r["reads"] == f"blocks.{r['layer']}.ln2.hook_normalized"
        assert r["writes"] == f"blocks.{r['layer']}.hook_mlp_out"
        assert 0 < r["fvu"] and r["l0"] > 0  # the set's evaluation, per member
    [(config, recovered)] = view.all_replaced().items()  # one config: every MLP of the set replaced at once
    assert rows[0]["member"].endswith(config) and recovered == view.metrics["all_replaced"][config]["ce_loss_recovered"]
    members = [f"transcoders/set/{r['member']}" for r in rows]
    assert set(members) <= set(cat.saes) and set(members) <= cat.feature_stores


def test_an_sae_and_a_transcoder_say_what_they_read_and_write(transcoder_workspace):
    sae = browse.open_sae(next((transcoder_workspace / "saes" / "run").glob("*/cfg.json")).parent)
    assert sae.kind == "sae" and sae.reads == sae.writes == "blocks.2.hook_resid_post"
    tc = browse.open_sae(next((transcoder_workspace / "transcoders" / "set").glob("L2-*/cfg.json")).parent)
    assert tc.kind == "transcoder" and tc.reads == "blocks.2.ln2.hook_normalized"
    assert tc.writes == "blocks.2.hook_mlp_out" == tc.store["writes"] and tc.store["kind"] == "transcoder"


def test_a_transcoder_set_manifest_without_layers_is_refused(tmp_path):
    (tmp_path / "transcoders.json").write_text('{"model": "m"}')
    with pytest.raises(DamagedFileError, match=r"transcoders.json: damaged transcoder set manifest \(no .layers.\)"):
        browse.open_transcoder_set(tmp_path)


def test_inside_names_a_path_relative_to_the_workspace_or_none(tmp_path):
    """Another dictionary a feature store names, as the app links it: inside the workspace, else None."""
    inside = browse.inside
    (tmp_path / "ws" / "saes" / "a").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    assert inside(tmp_path / "ws", tmp_path / "ws" / "saes" / "x" / ".." / "a") == "saes/a"
    assert inside(tmp_path / "ws", tmp_path / "elsewhere") is None
    assert inside(tmp_path / "ws", tmp_path / "ws" / "saes" / "gone") is None
