"""Every leaf command of the CLI, walked from its parser: the enumerating tests (the output guard's, the
config flags', the device flag's) cover a command added later without a new case."""

import argparse

from workbench.cli import build_parser


def leaf_commands(parser=None, path=()):
    """(command path, parser) of every leaf command, walked from build_parser(); an alias (one parser under two
    names, e.g. the deprecated `attention sparsify`) is walked once, under its first name."""
    parser = parser or build_parser()
    if hasattr(parser, "_ensure"):
        parser._ensure()  # the lazily populated flags of `model train`
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for a in subs:
        seen = set()
        for name, sub in a.choices.items():
            if id(sub) not in seen:
                seen.add(id(sub))
                yield from leaf_commands(sub, (*path, name))
