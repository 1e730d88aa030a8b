"""The docs match the code: every 'docs/methods.md §N' citation has its section, every README flag parses."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_methods_citation_has_its_section():
    sections = set(re.findall(r"^## (\d+)\. ", (ROOT / "docs" / "methods.md").read_text(), flags=re.M))
    cited = {}
    for path in [*ROOT.glob("workbench/**/*.py"), *ROOT.glob("bench/*.py"), *ROOT.glob("bench/[a-z]*/*.py")]:
        text = path.read_text()
        assert not re.search(r"(?<!docs/)methods\.md", text), f"{path}: cite docs/methods.md §N"
        for n in re.findall(r"docs/methods\.md §(\d+)", text):
            cited.setdefault(n, []).append(path.name)
    assert cited and {"1", "5", "6", "8"} <= set(cited)
    assert set(cited) <= sections, {n: files for n, files in cited.items() if n not in sections}


def _readme_commands() -> list[str]:
    """The README's command block, one string per `workbench ...` command (continuation lines joined)."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## Commands", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    commands = []
    for line in block.splitlines():
        if line.startswith("workbench "):
            commands.append(line)
        elif line.strip() and commands:
            commands[-1] += " " + line.strip()
    return commands


def _subcommand(argv_words: list[str]):
    """(the command words, its parser) for the longest run of sub-command names at the start."""
    import argparse

    from workbench.cli import build_parser

    parser, path = build_parser(), []
    for word in argv_words:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            break
        parser, path = subs[0].choices[word], [*path, word]
        if hasattr(parser, "_ensure"):
            parser._ensure()
    return path, parser


def _example_values(tokens: list[str]) -> list[str] | None:
    """A flag's example values as the README writes them (`float16|bfloat16` -> float16), or None for a
    placeholder (N, DIR, FIELD=JSON, "...")."""
    values = []
    for t in tokens:
        t = t.strip("[]'")
        if not t or t == "..." or '"' in t or re.fullmatch(r"[A-Z_]+(=[A-Z_]+)?(\.\.\.)?", t):
            return None if not values else values
        values.append(t.split("|")[0])
    return values


def _flag_uses(command: str):
    words = command.split()
    for i, w in enumerate(words):
        flag = w.strip("[]")
        if not flag.startswith("--"):
            continue
        after = []
        for t in words[i + 1 :]:
            if t.startswith(("--", "[", "|")) or t == "]":
                break
            after.append(t.rstrip("]"))
            if t.endswith("]"):
                break
        yield flag, after


README_COMMANDS = _readme_commands()


def test_the_readme_command_block_is_found():
    assert len(README_COMMANDS) >= 15 and any(c.startswith("workbench attention") for c in README_COMMANDS)


@pytest.mark.parametrize("command", README_COMMANDS, ids=lambda c: " ".join(c.split()[1:3]))
def test_every_flag_the_readme_shows_exists_and_parses_with_its_example(command):
    """Each flag is an exact option of its command (an abbreviation argparse would guess is not enough),
    and with the README's example value it parses."""
    from tests.test_cli import _required_args
    from workbench.cli import build_parser

    path, parser = _subcommand(command.split()[1:])
    assert path, command
    for flag, after in _flag_uses(command):
        assert flag in parser._option_string_actions, f"README shows {flag} for `workbench {' '.join(path)}`"
        action = parser._option_string_actions[flag]
        values = [] if action.nargs == 0 else _example_values(after)
        if values is None:
            continue
        argv = [*path, *_required_args(parser), flag, *values]
        try:
            build_parser().parse_args(argv)
        except SystemExit:
            pytest.fail(f"the README's `{flag} {' '.join(values)}` does not parse: workbench {' '.join(argv)}")


SIZES = "CACHE_TOKENS, TRAIN_TOKENS = 200_000, 1_000_000"


def test_the_readme_python_block_runs_verbatim_and_records_in_a_workspace(tmp_path, monkeypatch, capsys):
    """The README's Python API block, as written, with only its documented sizes line made small."""
    from workbench.workspace import Workspace

    text = (ROOT / "README.md").read_text()
    block = text.split("## Python API", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert block.count(SIZES) == 1, "the README's sizes line changed: update SIZES here"
    monkeypatch.chdir(tmp_path)
    exec(compile(block.replace(SIZES, "CACHE_TOKENS, TRAIN_TOKENS = 6_000, 8_192"), "README.md", "exec"), {})
    assert "ndf" in capsys.readouterr().out.lower()
    kinds = sorted(a.kind for a in Workspace(tmp_path / "workspace").artifacts())
    assert kinds == ["caches", "circuits", "saes"]
