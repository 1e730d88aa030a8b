"""The feature graph page's prompt box (app/graph_prompt.py): each bad entry refused in one line naming the value and
what is valid, before any model loads; and the two commands it shows (`circuit graph`, `circuit check`) run as shown
from a folder other than the workspace, recording the same kind of checked graph the box records."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from app import graph_prompt as gp
from workbench.circuits import neuronpedia
from workbench.corpus import tasks
from workbench.errors import UserError
from workbench.workspace import MANIFEST, Workspace

REPO = Path(__file__).resolve().parents[2]
MODELS, SETS = ["tiny", "/abs/models/m"], ["transcoders/all", "clts/c"]


def entry(**changes):
    args = dict(prompt="a b c", answer="", model="tiny", dictionary="transcoders/all", name="")
    return gp.checked(**{**args, **changes}, models=MODELS, dictionaries=SETS)


@pytest.mark.parametrize(
    "changes, says",
    [
        (dict(prompt="   "), "the prompt is empty"),
        (dict(prompt="word " * 500), f"at most {gp.MAX_PROMPT_CHARS:,}"),
        (dict(model="gpt-9"), "model 'gpt-9' is not a model the app can run here; choose one of: tiny, /abs/models/m"),
        (dict(dictionary="saes/x"), "choose one of: transcoders/all, clts/c"),
        (dict(answer="x" * 300), "it names one token"),
        (dict(name="my graph"), "e.g. my_graph"),
    ],
)
def test_a_bad_entry_is_refused_naming_it(changes, says):
    with pytest.raises(UserError) as e:
        entry(**changes)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_good_entry_takes_a_free_default_name(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_WORKSPACE", str(tmp_path))
    (tmp_path / "circuits" / "graph-a_b_c").mkdir(parents=True)  # taken: the next one
    r = entry(prompt="  a b c ", answer=" x ")
    assert (r.prompt, r.answer, r.name) == ("a b c", "x", "graph-a_b_c-2")
    assert entry(name="mine").name == "mine"


def _cli(words: list[str]) -> list[str]:
    assert words[0] == "workbench"
    return [sys.executable, "-m", "workbench.cli", *words[1:]]


def test_the_shown_commands_run_from_another_folder(prompt_workspace, tokenizer, tmp_path):
    """What the box shows is pasted into a shell in another folder: every path in it is absolute, --workspace names
    the workspace, and the graph is recorded there with its check, as the box records it."""
    prompt = tasks.queries("ioi", 1, seed=0, tokenizer=tokenizer)[0].prompt
    model = str(prompt_workspace / "models" / "random")
    r = gp.Request(prompt, None, model, "transcoders/all", "pasted")
    shown = gp.shown(gp.commands(prompt_workspace, r))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for line in shown.splitlines():
        words = shlex.split(line)  # the text as a shell reads it
        paths = [w for w in words if "/" in w and w != prompt]
        assert paths and all(Path(w).is_absolute() for w in paths), line
        run = subprocess.run(_cli(words), cwd=elsewhere, capture_output=True, text=True, env=_env())
        assert run.returncode == 0, run.stderr
    folder = prompt_workspace / "circuits" / "pasted"
    assert folder in {a.path.resolve() for a in Workspace(prompt_workspace).artifacts()}
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["made_by"] == "workbench circuit graph" and "check_nodes_confirmed_share" in manifest["summary"]
    assert neuronpedia.GRAPH_CHECK[0] in json.loads((folder / "graph.json").read_text())
    assert not list(elsewhere.iterdir())  # nothing written beside the shell


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def test_a_shown_command_names_absolute_paths_and_the_workspace(tmp_path, monkeypatch):
    """state.command, as the SAE page shows `sae eval`: quoted for a shell, --workspace the absolute root."""
    from app import state

    monkeypatch.setenv("WORKBENCH_WORKSPACE", str(tmp_path / "my ws"))
    (tmp_path / "my ws" / "saes" / "a").mkdir(parents=True)
    folder = state.shown_path("saes/a")
    assert folder == str(tmp_path / "my ws" / "saes" / "a")
    shown = state.command("workbench", "sae", "eval", folder, "--cache", "...")
    assert (
        shown
        == f"`workbench sae eval {shlex.quote(folder)} --cache ... --workspace {shlex.quote(str(tmp_path / 'my ws'))}`"
    )


def test_the_bar_advances_through_the_check_instead_of_sitting_full():
    """The check is the last of STAGES: begun, the bar sits at its start; its nodes and edges move it on to the end."""
    last = gp.STAGES
    assert gp.bar_share(1, None) == 0.0 and gp.bar_share(last, None) == pytest.approx((last - 1) / last)
    halves = [gp.bar_share(last, w) for w in (0.0, 0.25, 0.5, 0.99)]
    assert halves == sorted(halves) and halves[-1] < 1.0 and gp.bar_share(last, 1.0) == 1.0
