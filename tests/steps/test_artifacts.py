"""An artifact's folder: its name from a spec or a query, whether it is complete, and a stopped run's folder refused
unless resumed."""

import json
from contextlib import ExitStack

import pytest

from workbench.errors import OutputExistsError
from workbench.steps.artifacts import circuit_name, claim_in_place, complete, slug
from workbench.workspace import MANIFEST


def test_a_spec_becomes_a_folder_name():
    assert slug("data/x.txt,hf:y") == "data_x.txt_hf_y"
    assert slug("../..") == "artifact"  # nothing name-like left


def test_a_circuit_name_is_stable_and_changes_with_the_query_or_the_method():
    query = {"prompt": "When Mary and John went to the store, John gave a drink to", "answer": " Mary"}
    name = circuit_name(query, {"budget": 0.1})
    assert name == circuit_name(dict(query), {"budget": 0.1}) and name.startswith(
        "gave-a-drink-to-"
    )  # its last four words
    assert len({name, circuit_name(query, {"budget": 0.2}), circuit_name({**query, "answer": " John"}, {})}) == 3


def test_a_stopped_run_is_refused_unless_resumed_and_a_finished_one_always(tmp_path):
    folder = tmp_path / "interventions" / "batch"
    folder.mkdir(parents=True)
    (folder / "results.jsonl").write_text("{}\n")  # what a stopped batch leaves
    with ExitStack() as held, pytest.raises(OutputExistsError, match="files of a run stopped before it finished"):
        claim_in_place(held, folder, "test", {}, "interventions", resume=False)
    with ExitStack() as held:
        assert claim_in_place(held, folder, "test", {}, "interventions", resume=True) == folder
    (folder / MANIFEST).write_text(json.dumps({"kind": "interventions"}))
    assert complete(folder)
    with ExitStack() as held, pytest.raises(OutputExistsError, match="already holds an intervention"):
        claim_in_place(held, folder, "test", {}, "interventions", resume=True)
