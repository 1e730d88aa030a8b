"""The output guard: every command that writes, walked from the CLI parser, refuses an output on an input, inside
an input folder, and inside (or on) another artifact's folder, in one line naming both paths, before any work; the
steps refuse the same for Python callers."""

import argparse
import json
import os
from pathlib import Path

import pytest
from cli_commands import leaf_commands

from workbench.cli import build_parser, main
from workbench.errors import BadValueError
from workbench.guard import FILE, INPUT, ROLE, Role, check
from workbench.workspace import KINDS, MANIFEST

# string arguments that name no path (a new path argument must be declared: test_every_path_argument_is_declared)
NOT_PATHS = {
    "--answer",
    "--counterfactual",
    "--hook",
    "--hooks",
    "--host",
    "--member",
    "--name",
    "--paraphrase",
    "--prompt",
    "--set",
    "--target",
    "--targets",
    "--task",
    "--wrong",
    "--device",
    "--tasks",
    "--text-field",
    "text",  # features search: the words to find
    "--format",
    "--feature",
    "--positions",
    "--sae-id",
}
LAYERS = {("sae", "train", "--transcoders"), ("sae", "train", "--layers")}  # layer specs ('all', '0,2'), not paths


def _label(action) -> str:
    return action.option_strings[0] if action.option_strings else action.dest


def _declared(parser, writes: bool) -> list:
    return [a for a in parser._actions if (r := getattr(a, ROLE, None)) is not None and r.writes == writes]


def _own_kind(role: Role) -> str:
    """An artifact kind that is not the output's own: its manifest in the output folder must be refused."""
    return next(k for k in KINDS if k not in role.kinds)


def _argv(parser, values: dict) -> list[str]:
    """Arguments that get the command as far as its checks: `values` (action -> value) and placeholders for what
    it requires (a positional with choices before a given one gets its first choice: `cache verify DIR`)."""
    pos, opts = [], []
    positional = [a for a in parser._actions if not a.option_strings]
    for a in parser._actions:
        if a.dest == "help" or isinstance(a, argparse._SubParsersAction):
            continue
        value = values.get(a)
        if value is not None and a.nargs == 2:
            value = [value, "x"]
        if not a.option_strings:
            later = positional[positional.index(a) + 1 :]
            if a.choices and any(values.get(b) is not None for b in later):  # `cache verify DIR`
                pos.append(str(next(iter(a.choices))))
            elif value is not None:
                pos += value if isinstance(value, list) else [value]
            elif a.nargs not in ("?", "*"):
                pos.append(str(next(iter(a.choices))) if a.choices else "x")  # `attention add NAME`
        elif value is not None:
            opts += [a.option_strings[0], *(value if isinstance(value, list) else [value])]
        elif a.required:
            opts += [a.option_strings[0], str(next(iter(a.choices))) if a.choices else "x"]
    return pos + opts


def _cases():
    """(command, output action, input action or None, case) for every command with a declared output, and each of
    its inputs that the output is written beside (`cache verify DIR` records nothing in the workspace)."""
    for path, parser in leaf_commands():
        for out in _declared(parser, writes=True):
            if _written(path, parser, {out: "o"}, out):
                yield pytest.param(
                    path, parser, out, None, "another_artifact", id=f"{' '.join(path)} {_label(out)} foreign"
                )
            for inp in _declared(parser, writes=False):
                if not _written(path, parser, {out: "o", inp: "i"}, out):
                    continue
                for case in ("is_input", "inside_input"):
                    yield pytest.param(
                        path, parser, out, inp, case, id=f"{' '.join(path)} {_label(out)} {_label(inp)} {case}"
                    )


def _written(path, parser, values: dict, out) -> bool:
    when = getattr(out, ROLE).when
    return when is None or when(build_parser().parse_args([*path, *_argv(parser, values)]))


CASES = list(_cases())


def test_the_walk_finds_the_commands_of_the_issue():
    ids = {c.id for c in CASES}
    assert {
        "circuit graph --out --transcoders inside_input",
        "circuit find --out --transcoders inside_input",
        "attention compare --out --sparse inside_input",
        "sae train --out --cache is_input",
        "sae train --out foreign",
        "circuit graph --work-dir --transcoders inside_input",
        "cache --out --corpus inside_input",
        "demo --workspace foreign",
    } <= ids


@pytest.mark.parametrize("command, parser, out, inp, case", CASES)
def test_every_output_on_or_in_an_input_or_another_artifact_is_refused(
    command, parser, out, inp, case, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "inp"
    folder.mkdir()
    manifest = folder / MANIFEST
    if case == "is_input":
        target = given = tmp_path / "inp.json"
        given.write_text("{}")
    elif case == "inside_input":
        given, target = folder, folder / ("out.json" if getattr(out, ROLE).form == "file" else "sub")
    else:
        given = None
        kind = _own_kind(getattr(out, ROLE))
        manifest.write_text(json.dumps({"kind": kind}))
        target = folder / "out.json" if getattr(out, ROLE).form == "file" else folder
    before, existed = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}, target.exists()
    values = {out: str(target), **({inp: str(given)} if inp is not None else {})}
    ws = next((a for a in parser._actions if a.dest == "workspace"), None)
    if ws is not None and ws not in values:
        values[ws] = str(tmp_path / "ws")
    assert main([*command, *_argv(parser, values)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"{_label(out)} {target}" in err[0], err
    if case == "another_artifact":
        assert str(manifest) in err[0] and f"kind {kind}" in err[0], err
    else:
        assert f"{_label(inp) if inp.option_strings else inp.metavar or inp.dest.upper()} {given}" in err[0], err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before  # nothing written
    assert not (tmp_path / "ws").exists() and target.exists() == existed


def test_every_path_argument_is_declared():
    """A string argument is a path the guard knows, or one of the few that name no path: a new command's --out
    is covered by the test above the day it lands, or fails here."""
    undeclared = set()
    for path, parser in leaf_commands():
        for a in parser._actions:
            if getattr(a, ROLE, None) is not None or a.dest == "help" or a.nargs == 0 or a.choices:
                continue
            if isinstance(a, argparse._SubParsersAction) or getattr(a.type, "__name__", "str") != "str":
                continue
            if _label(a) not in NOT_PATHS and (*path, _label(a)) not in LAYERS:
                undeclared.add((*path, _label(a)))
    assert not undeclared


# ---- the cases of the issue, end to end through the CLI ------------------------------------------------------


def _artifact(folder: Path, kind: str, *files: str) -> Path:
    folder.mkdir(parents=True)
    (folder / MANIFEST).write_text(json.dumps({"kind": kind, "name": folder.name}))
    for f in files:
        (folder / f).write_text("{}")
    return folder


PROMPT = ["--prompt", "the cat saw the hat and the dog"]


@pytest.mark.parametrize(
    "argv, out, given",
    [
        (
            ["circuit", "graph", "--transcoders", "SET", *PROMPT, "--out", "SET/transcoders.json"],
            "--out",
            "--transcoders SET",
        ),
        (
            ["circuit", "find", "--transcoders", "SET", *PROMPT, "--answer", "dog", "--counterfactual", "the cat saw"]
            + ["--out", "SET/transcoders.json"],
            "--out",
            "--transcoders SET",
        ),
        (
            ["attention", "compare", "--sparse", "M", "--task", "ioi", "--n", "1", "--out", "M/config.json"],
            "--out",
            "--sparse M",
        ),
        (["sae", "train", "--transcoders", "0", "--cache", "CACHE", "--out", "CACHE"], "--out", "--cache CACHE"),
        (["sae", "train", "--transcoders", "0", "--cache", "C2", "--out", "CACHE"], "--out", "CACHE/artifact.json"),
    ],
)
def test_the_issues_cases_are_refused_naming_both_paths(argv, out, given, small_world, tmp_path, capsys, monkeypatch):
    """On real artifacts (a transcoder set, a saved model, a cache): refused in one line, every input untouched."""
    import shutil

    from workbench.workspace import Workspace

    monkeypatch.chdir(tmp_path)
    shutil.copytree(small_world["set"], "SET")
    shutil.copytree(small_world["model"], "M")
    Workspace("ws").record(Path("M"), "models", made_by="test", config={})
    for cache in ("CACHE", "C2"):
        shutil.copytree(small_world["cache"], cache)
    flag = {"circuit": "--model", "attention": "--base"}.get(argv[0])
    model = [flag, str(small_world["model"])] if flag else small_world["train"]
    extra = [] if argv[0] == "attention" else ["--workspace", "ws"]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert main([*argv, *model, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{out} {argv[argv.index(out) + 1]}" in err[0] and given in err[0], err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


# ---- the rule itself ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["relative", "symlink", "hardlink"])
def test_an_input_is_compared_by_the_file_it_names(how, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "c.json").write_text("{}")
    out = {"relative": "d/../d/c.json", "symlink": "link.json", "hardlink": "hard.json"}[how]
    if how == "symlink":
        (tmp_path / "link.json").symlink_to(tmp_path / "d" / "c.json")
    if how == "hardlink":
        os.link(tmp_path / "d" / "c.json", tmp_path / "hard.json")
    with pytest.raises(BadValueError, match=r"^--out .* is the input IN "):
        check([("--out", out, FILE)], [("IN", "d/c.json")])
    (tmp_path / "dl").symlink_to(tmp_path / "d")
    with pytest.raises(BadValueError, match=r"^--out dl/x.json lies inside the input IN d"):
        check([("--out", "dl/x.json", FILE)], [("IN", "d")])


def test_an_artifact_folder_holding_an_input_or_two_equal_outputs_are_refused(tmp_path):
    from workbench.guard import artifact

    (tmp_path / "run" / "cache").mkdir(parents=True)
    with pytest.raises(BadValueError, match="holds the input --cache .*: the artifact's manifest would list"):
        check([("--out", tmp_path / "run", artifact("caches"))], [("--cache", tmp_path / "run" / "cache")])
    with pytest.raises(BadValueError, match="--json .*a.json is also the output --out"):
        check([("--out", tmp_path / "a.json", FILE), ("--json", tmp_path / "a.json", FILE)], [])
    # the same kind's own manifest is a resume, not another artifact; a workspace holding inputs is the usual case
    _artifact(tmp_path / "c", "caches")
    check([("--out", tmp_path / "c", artifact("caches"))], [])
    check([("--workspace", tmp_path, Role("workspace"))], [("--cache", tmp_path / "c")])
    check([("--out", tmp_path / "x.json", FILE)], [("--model", "tiny")])  # a spec, not on disk: not a path here
    assert INPUT.writes is False


def test_the_steps_refuse_the_same_for_python_callers(tmp_path):
    from workbench.sae.config import SAEConfig, TrainConfig
    from workbench.steps.attention import train_attention
    from workbench.steps.cache import make_cache
    from workbench.steps.dictionaries import train_saes, train_transcoder_set
    from workbench.steps.models import train_model
    from workbench.workspace import Workspace

    ws, cache = Workspace(tmp_path / "ws"), _artifact(tmp_path / "cache", "caches", "manifest.json")
    cfgs, train = [SAEConfig("topk", k=4, expansion=2)], TrainConfig(n_tokens=256, batch_size=256)
    with pytest.raises(BadValueError, match=rf"output folder {cache} is the input cache_dir {cache}"):
        train_transcoder_set(ws, cache, "0", cfgs, train, out=cache)
    with pytest.raises(BadValueError, match="lies inside the input cache_dir"):
        train_saes(ws, cache, "h", cfgs, train, out=cache / "run")
    with pytest.raises(
        BadValueError, match=rf"holds the manifest of another artifact \({cache / MANIFEST}, kind caches"
    ):
        train_model(ws, out=cache)
    with pytest.raises(BadValueError, match="holds the manifest of another artifact"):
        train_attention(ws, "tiny", out=cache)
    corpus = tmp_path / "text" / "a.txt"
    corpus.parent.mkdir()
    corpus.write_text("hello")
    with pytest.raises(BadValueError, match=f"holds the input corpus_spec {corpus}"):
        make_cache(ws, "tiny", f"synthetic,{corpus}", out=corpus.parent)
    assert not ws.root.exists()


@pytest.mark.parametrize("command", ["sae eval", "features build"])
def test_an_in_place_writer_is_refused_on_a_folder_of_another_artifact(feature_workspace, tmp_path, capsys, command):
    """An SAE copied into a cache's folder: `sae eval` wrote metrics.json and an `saes` manifest into the cache,
    `features build` its store (in-place writers declare the kinds they add to: guard.in_place)."""
    from workbench.workspace import Workspace

    sae = sorted((feature_workspace / "saes" / "run").glob(f"*/{MANIFEST}"))[0].parent
    ws = Workspace(tmp_path / "ws")
    host = ws.path("caches", "host")
    (host / "sae").mkdir(parents=True)
    for name in ("cfg.json", "sae_weights.safetensors"):
        (host / "sae" / name).write_bytes((sae / name).read_bytes())
    ws.record(host, "caches", made_by="test", config={})
    before = sorted(p.relative_to(host).as_posix() for p in host.rglob("*"))
    cache = feature_workspace / "caches" / "random-synthetic"
    argv = [*command.split(), str(host / "sae"), "--cache", str(cache), "--workspace", str(ws.root), "--model"]
    argv.append(str(feature_workspace / "models" / "random"))
    assert main([*argv, *(["--no-model"] if command == "sae eval" else ["--quiet"])]) == 2
    err = capsys.readouterr().err
    assert f"SAE {host / 'sae'} belongs to another artifact ({host / MANIFEST}, kind caches)" in err, err
    assert sorted(p.relative_to(host).as_posix() for p in host.rglob("*")) == before
