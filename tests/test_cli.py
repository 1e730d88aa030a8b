import argparse
import json
import math
import re
from pathlib import Path

import pytest
from cli_commands import leaf_commands

from workbench.cli import build_parser, main
from workbench.errors import BadValueError


def test_every_command_documents_every_option(capsys):
    for argv in (
        ["--help"],
        ["model", "train", "--help"],
        ["model", "info", "--help"],
        ["cache", "--help"],
        ["demo", "--help"],
    ):
        with pytest.raises(SystemExit) as e:
            build_parser().parse_args(argv)
        assert e.value.code == 0
    text = capsys.readouterr().out
    assert "--resume" in text and "--overwrite" in text and "hook_resid_post" in text


def _commands(parser, path=()):
    """Every command path of the parser, e.g. ('circuit', 'find'), the groups included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name)
                yield from _commands(sub, (*path, name))


def test_every_command_has_help(capsys):
    commands = list(_commands(build_parser()))
    assert {("attention", "train"), ("attention", "sparsify"), ("circuit", "find"), ("ls",), ("demo",)} <= set(commands)
    for path in commands:
        with pytest.raises(SystemExit) as e:
            build_parser().parse_args([*path, "--help"])
        assert e.value.code == 0, path
        name = "train" if path == ("attention", "sparsify") else path[-1]  # an alias prints its command's usage
        assert f"usage: workbench {' '.join((*path[:-1], name))}" in capsys.readouterr().out


def test_attention_sparsify_is_the_old_name_of_attention_train(tmp_path, capsys):
    argv = ["--workspace", str(tmp_path / "ws"), "--model", "no-such-model", "--quiet"]
    assert main(["attention", "sparsify", *argv]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "workbench attention sparsify is deprecated: use `workbench attention train`"
    assert err[1].startswith("workbench attention: error: unknown model spec 'no-such-model'") and len(err) == 2
    assert main(["attention", "train", *argv]) == 2
    assert "deprecated" not in capsys.readouterr().err


def test_attention_add_copies_an_embedded_sparse_model_into_the_workspace_once(tmp_path, capsys):
    ws = str(tmp_path / "ws")
    assert main(["attention", "add", "tiny-sparse", "--workspace", ws]) == 0
    out = capsys.readouterr().out
    assert "open keys per query per head (T = 128)" in out and "addition, facts, greater_than, induction, ioi" in out
    assert (tmp_path / "ws" / "models" / "tiny-sparse" / "artifact.json").is_file()
    assert main(["attention", "add", "tiny-sparse", "--workspace", ws]) == 2
    assert "already holds a model" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse's choices: exit 2 naming the valid ones
        main(["attention", "add", "tiny", "--workspace", ws])
    assert "invalid choice: 'tiny' (choose from" in capsys.readouterr().err


def test_model_info_lists_hooks(tiny, capsys):
    assert main(["model", "info"]) == 0
    out = capsys.readouterr().out
    assert "4 layers, d_model 128" in out and "blocks.{0..3}.hook_resid_post" in out


def test_user_errors_exit_2_with_one_clear_line(capsys):
    assert main(["model", "info", "--model", "no-such-model"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("workbench model: error: unknown model spec 'no-such-model'") and "Traceback" not in err


def test_cache_then_sae_train_and_eval_from_the_cli(tiny, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default workspace, ./workspace, records the artifacts made elsewhere
    cache = tmp_path / "cache"
    assert (
        main(["cache", "--out", str(cache), "--hooks", "blocks.2.hook_resid_post", "--tokens", "6000", "--quiet"]) == 0
    )
    assert "blocks.2.hook_resid_post" in capsys.readouterr().out
    assert main(["cache", "--out", str(cache), "--tokens", "6000", "--quiet"]) == 2  # exists: refuse
    assert "--overwrite" in capsys.readouterr().err
    saes = tmp_path / "saes"
    assert (
        main(
            [
                "sae",
                "train",
                "--cache",
                str(cache),
                "--hook",
                "blocks.2.hook_resid_post",
                "--out",
                str(saes),
                "--arch",
                "topk",
                "block_topk",
                "--k",
                "8",
                "--expansion",
                "2",
                "--tokens",
                "8192",
                "--batch-size",
                "1024",
                "--block-size",
                "2",
                "--n-active-blocks",
                "4",
                "--quiet",
            ]
        )
        == 0
    )
    folders = [line.split()[-1] for line in capsys.readouterr().out.splitlines() if line.startswith("saved")]
    assert len(folders) == 2
    assert main(["sae", "eval", *folders, "--cache", str(cache), "--no-model", "--tokens", "300"]) == 0
    assert capsys.readouterr().out.count("fvu") == 2
    assert (
        main(
            [
                "sae",
                "train",
                "--cache",
                str(cache),
                "--hook",
                "blocks.2.hook_resid_post",
                "--out",
                str(tmp_path / "x"),
                "--set",
                "no_such_field=1",
            ]
        )
        == 2
    )
    assert "no_such_field" in capsys.readouterr().err
    listed = [line.split()[:2] for line in _ls(capsys)]
    assert ["caches", "cache"] in listed and sum(kind == "saes" for kind, _ in listed) == 2


def _ls(capsys, *args) -> list[str]:
    assert main(["ls", *args]) == 0
    return capsys.readouterr().out.splitlines()


def test_every_command_records_into_its_workspace(tiny, tmp_path, capsys):
    ws = str(tmp_path / "ws")
    assert main(["cache", "--workspace", ws, "--hooks", "blocks.1.hook_resid_post", "--tokens", "3000", "--quiet"]) == 0
    cache = tmp_path / "ws" / "caches" / "tiny-synthetic"
    assert (cache / "artifact.json").is_file()
    assert (
        main(
            [
                "sae",
                "train",
                "--workspace",
                ws,
                "--cache",
                str(cache),
                "--hook",
                "blocks.1.hook_resid_post",
                "--name",
                "run",
                "--k",
                "4",
                "8",
                "--expansion",
                "2",
                "--tokens",
                "4096",
                "--batch-size",
                "1024",
                "--quiet",
            ]
        )
        == 0
    )
    saes = sorted((tmp_path / "ws" / "saes" / "run").glob("*/artifact.json"))
    assert len(saes) == 2
    assert (
        main(
            [
                "sae",
                "eval",
                str(saes[0].parent),
                "--workspace",
                ws,
                "--cache",
                str(cache),
                "--no-model",
                "--tokens",
                "200",
            ]
        )
        == 0
    )
    manifest = json.loads(saes[0].read_text())
    assert manifest["inputs"]["cache"] == "caches/tiny-synthetic" and "fvu" in manifest["summary"]
    assert "metrics.json" in manifest["files"] and manifest["side_files"] == [
        "saes/run/checkpoint.pt",
        "saes/run/run.json",
    ]
    metrics = json.loads((saes[0].parent / "metrics.json").read_text())
    assert not Path(metrics["cache"]).is_absolute()
    capsys.readouterr()
    assert [line.split()[0] for line in _ls(capsys, "--workspace", ws)] == ["caches", "saes", "saes"]
    assert _ls(capsys, "--workspace", ws, "--kind", "circuits") == [f"no artifacts recorded in {ws} of kind circuits"]


def test_sae_train_refuses_a_target_cache_it_would_ignore(tmp_path, capsys):
    """A transcoder set reads each layer's input and output from --cache: --target-cache is refused, not ignored."""
    argv = ["sae", "train", "--cache", str(tmp_path / "c"), "--transcoders", "all", "--target-cache", "other"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--target-cache 'other' applies to one transcoder" in err[0], err
    assert not (tmp_path / "o").exists()


def test_attention_train_set_names_the_flag_of_a_training_field(tmp_path, capsys):
    """--set feeds GateConfig; a SparsifyConfig field given through it is refused with the flag that sets it."""
    assert main(["attention", "train", "--out", str(tmp_path / "o"), "--set", "dual_start=5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dual_start has its own flag; use --dual-start 5" in err[0], err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "pair, match",
    [
        ("k=3", "k has its own flag; use --k 3"),
        ("architecture=topk", "use --arch"),
        ("seed=1", "use --seed"),
        ("lr=0.1", "lr has its own flag; use --lr 0.1"),  # a TrainConfig field: the same command's flag
        ("prefixes=[1.5,2]", r"prefixes=\[1.5, 2\] is not of type list\[int\] \| None"),
        ("prefixes=[1,2", r"prefixes='\[1,2' is not of type"),
        ("name=../../x", "must be a plain folder name"),
    ],
)
def test_sae_train_set_refuses_flag_fields_and_wrong_types_before_any_work(pair, match, tmp_path, capsys):
    assert (
        main(
            [
                "sae",
                "train",
                "--cache",
                str(tmp_path / "no-cache"),
                "--hook",
                "h",
                "--out",
                str(tmp_path / "o"),
                "--set",
                pair,
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "Traceback" not in err and re.search(match, err), err
    assert not (tmp_path / "o").exists()


def _required_args(parser) -> list[str]:
    """Placeholder values for a command's required arguments, so it gets as far as checking its flags."""
    out = []
    for a in parser._actions:
        if not a.option_strings and a.dest != "help" and a.nargs not in ("?", "*"):
            out.append("x")
        elif a.option_strings and a.required:
            out += [a.option_strings[0], str(next(iter(a.choices))) if a.choices else "x"]
    return out


DEVICE_COMMANDS = [list(path) for path, p in leaf_commands() if "--device" in p._option_string_actions]


def test_the_device_commands_are_found():
    """Every heavy command takes --device (only `sae train`, `sae eval` and `attention train` used to)."""
    heavy = [["cache"], ["sae", "train"], ["sae", "eval"], ["circuit", "find"], ["circuit", "graph"]]
    heavy += [["circuit", "check"], ["intervene"], ["features", "build"], ["features", "explain"]]
    heavy += [["attention", "train"], ["attention", "compare"]]
    assert [c for c in heavy if c not in DEVICE_COMMANDS] == []


@pytest.mark.parametrize("device", ["cuda", "cuda:7", "gpu"])
@pytest.mark.parametrize("command", DEVICE_COMMANDS, ids=" ".join)
def test_an_unusable_device_is_one_line_on_every_command_that_takes_one(command, device, tmp_path, capsys):
    import torch

    if device != "gpu" and torch.cuda.device_count() > (7 if device == "cuda:7" else 0):
        pytest.skip("this machine has that device")
    parser = dict((tuple(p), q) for p, q in leaf_commands())[tuple(command)]
    ws = ["--workspace", str(tmp_path / "ws")] if "--workspace" in parser._option_string_actions else []
    assert main([*command, *_required_args(parser), "--device", device, *ws]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"device={device!r}" in err[0] and "cpu" in err[0], err
    assert not (tmp_path / "ws").exists()


def test_the_device_flag_resolves_unset_to_cuda_when_available_else_cpu():
    import torch

    from workbench.cli.options import chosen_device

    assert chosen_device(argparse.Namespace(device=None)) == ("cuda" if torch.cuda.is_available() else "cpu")
    assert chosen_device(argparse.Namespace(device="cpu")) == "cpu"
    with pytest.raises(BadValueError, match=r"device='tpu' is not a torch device; use cpu"):
        chosen_device(argparse.Namespace(device="tpu"))


OUT_COMMANDS = {  # command -> (what --out names, arguments whose work would fail if it started: a bad model)
    ("model", "train"): ("dir", ["--steps", "300"]),
    ("cache",): ("dir", ["--model", "no-such-model"]),
    ("sae", "train"): ("dir", ["--cache", "no-such-cache", "--hook", "h"]),
    ("sae", "export"): ("dir", ["no-such-set", "--format", "sparsify", "--model", "no-such-model"]),
    ("circuit", "find"): ("file", ["--model", "no-such-model", "--prompt", "a", "--answer", "b"]),
    ("circuit", "export"): ("file", ["no-such-circuit.json", "--format", "mib"]),
    ("circuit", "graph"): ("file", ["--model", "no-such-model", "--prompt", "a", "--transcoders", "no-such-set"]),
    ("circuit", "report"): ("file", ["--model", "no-such-model"]),
    ("attention", "train"): ("dir", ["--model", "no-such-model"]),
    ("attention", "compare"): ("file", ["--base", "no-such-model", "--sparse", "no-such-model", "--task", "ioi"]),
    ("attention", "judge"): ("file", ["no-such-model"]),
    ("intervene",): ("file", ["--model", "no-such-model", "--dictionary", "no-such-dict", "--prompt", "a"]),
    ("features", "explain"): ("file", ["no-such-store"]),
}


def test_every_command_with_out_is_listed():
    assert {tuple(p) for p, q in leaf_commands() if "--out" in q._option_string_actions} == set(OUT_COMMANDS)


@pytest.mark.parametrize("command", OUT_COMMANDS, ids=" ".join)
def test_an_unusable_out_is_refused_before_the_work(command, tmp_path, capsys):
    """--out naming a folder where a file goes (or a file where a folder goes) is one line about --out, before
    any input is read (the inputs here would fail, with another message)."""
    kind, args = OUT_COMMANDS[command]
    out = tmp_path / "existing"
    out.mkdir() if kind == "file" else out.write_text("x")
    parser = dict((tuple(p), q) for p, q in leaf_commands())[command]
    ws = ["--workspace", str(tmp_path / "ws")] if "--workspace" in parser._option_string_actions else []
    assert main([*command, *args, "--out", str(out), *ws]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(out) in err[0] and "no-such" not in err[0], err


def _int_flags():
    for path, parser in leaf_commands():
        for a in parser._actions:
            if a.option_strings and getattr(a.type, "__name__", "") == "int":
                yield path, parser, a.option_strings[0]


def _refusal(argv, capsys) -> str:
    """The last stderr line of a command that must exit with status 2 (argparse or a UserError)."""
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2, err
    return err[-1]


@pytest.mark.parametrize(
    "path, parser, flag",
    list(_int_flags()),
    ids=lambda x: " ".join(x) if isinstance(x, list) else x if isinstance(x, str) else "",
)
def test_every_integer_flag_refuses_a_negative_value_by_name(path, parser, flag, capsys):
    """A count, size or seed below zero is never meaningful: refused as the flag is parsed, before any work."""
    line = _refusal([*path, *_required_args(parser), flag, "-3"], capsys)
    assert f"argument {flag}" in line and "-3" in line and ">= " in line, line


def _config_number_flags():
    """(command, parser, flag, config field, int or float) of every flag generated from a numeric config field."""
    for path, parser in leaf_commands():
        for a in parser._actions:
            f = getattr(a.type, "field", None)
            if a.option_strings and f is not None and a.type.__name__ in ("int", "float"):
                yield path, parser, a.option_strings[0], f, {"int": int, "float": float}[a.type.__name__]


CONFIG_NUMBER_FLAGS = list(_config_number_flags())


def test_the_config_number_flags_are_found():
    flags = {(" ".join(p), flag) for p, _, flag, _, _ in CONFIG_NUMBER_FLAGS}
    assert {("circuit graph", "--chunk-mib"), ("demo", "--target-ndf"), ("attention train", "--tolerance")} <= flags


@pytest.mark.parametrize(
    "path, parser, flag, f, kind",
    CONFIG_NUMBER_FLAGS,
    ids=[" ".join((*p, flag)) for p, _, flag, _, _ in CONFIG_NUMBER_FLAGS],
)
def test_every_config_number_flag_refuses_out_of_range_nan_and_inf(path, parser, flag, f, kind, capsys):
    """The flag generated from a numeric config field refuses what the config refuses, with the config's message,
    as it is parsed (status 2, before any work)."""
    from tests.test_config import bad_values
    from workbench.config import valid_range

    values = [v for v in bad_values(f, kind) if kind is float or math.isfinite(v)]
    for value in values:
        line = _refusal([*path, *_required_args(parser), f"{flag}={value}"], capsys)
        assert f"argument {flag}" in line and valid_range(f, kind) in line, line


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["attention", "compare", "--sparse", "x", "--task", "ioi", "--n", "0"], "--n"),
        (["circuit", "find", "--task", "ioi", "--n", "0"], "--n"),
        (["circuit", "report", "--n", "0"], "--n"),
        (["circuit", "report", "--induction-tries", "0"], "--induction-tries"),
        (["cache", "--ctx-len", "0"], "--ctx-len"),
        (["cache", "--tokens", "0"], "--tokens"),
        (["sae", "train", "--cache", "x", "--hook", "h", "--tokens", "0"], "--tokens"),
        (["demo", "--cache-tokens", "0", "--no-serve"], "--cache-tokens"),
    ],
)
def test_a_zero_count_is_refused_where_zero_means_nothing(argv, flag, capsys):
    line = _refusal(argv, capsys)
    assert f"argument {flag}" in line and ">= 1" in line, line


def test_a_zero_ctx_len_is_refused_by_the_config_too():
    from workbench.cache.config import HarvestConfig

    with pytest.raises(BadValueError, match=r"ctx_len=0 must be an integer >= 1 \(or None\)"):
        HarvestConfig(ctx_len=0)


def test_cache_reads_the_chosen_text_field_and_names_the_columns_of_a_wrong_one(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = [f"Mary went to the park . John saw a big tree {i % 10} ." for i in range(60)]
    pq.write_table(pa.table({"body": docs}), tmp_path / "b.parquet")
    argv = ["cache", "--workspace", str(tmp_path / "ws"), "--corpus", str(tmp_path / "b.parquet"), "--quiet"]
    argv += ["--hooks", "blocks.0.hook_resid_post", "--tokens", "300", "--heldout-fraction", "0.1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "has no 'text' column; its columns: ['body'] (--text-field)" in err and len(err.splitlines()) == 1
    assert main([*argv, "--text-field", "body"]) == 0
    out, err = capsys.readouterr()
    assert "0.0% of the corpus's tokens unknown" in out
    # 3 held-out documents fill no sequence: a one-line notice naming the corpus, no source line
    assert err.splitlines() == [
        f"workbench: corpus {tmp_path / 'b.parquet'} ran out after 0 heldout rows of the 30 requested"
    ]
