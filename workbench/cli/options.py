"""What several command groups share: the parent parsers (--quiet, --workspace), the --model flag, the
--resume / --overwrite pair, and a sub-command parser whose config flags are added on first use. Every path
argument is declared as read or written (workbench.guard.declare) where it is defined: the output guard
checks them all before the command runs."""

from __future__ import annotations

import argparse

from workbench.config import check_device
from workbench.errors import BadValueError
from workbench.guard import INPUT, WORKSPACE, Role, declare

CORPUS = Role("input", split=",")  # a corpus spec: comma-separated files (or synthetic, hf:...)
# the names of workbench.models.EMBEDDED, written out: the CLI starts without importing torch
EMBEDDED_DENSE = ("tiny", "small")
EMBEDDED_SPARSE = ("tiny-sparse", "small-sparse")  # sparse-attention versions (`attention add`)
EMBEDDED_HELP = f"an embedded model ({', '.join(EMBEDDED_DENSE + EMBEDDED_SPARSE)})"
MODEL_HELP = (
    f"{EMBEDDED_HELP}, a saved model folder, a Hugging Face model folder, or a TransformerLens name "
    "(default: %(default)s)"
)


def quiet_flag() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def workspace_flag(purpose: str = "that records the artifact", writes=True) -> argparse.ArgumentParser:
    """--workspace, declared as written (or read: writes=False; or written when writes(args) holds)."""
    p = argparse.ArgumentParser(add_help=False)
    flag = p.add_argument("--workspace", default="workspace", help=f"workspace folder {purpose} (default: %(default)s)")
    declare(flag, INPUT if writes is False else WORKSPACE if writes is True else Role("workspace", when=writes))
    return p


def add_model_flag(p: argparse.ArgumentParser, help: str = MODEL_HELP, flag: str = "--model") -> None:
    declare(p.add_argument(flag, default="tiny", help=help), INPUT)


def add_device_flag(p: argparse.ArgumentParser) -> None:
    """--device for a command that runs a model or a dictionary; read it with `chosen_device`."""
    p.add_argument(
        "--device", default=None, help="torch device: cpu, cuda, cuda:1 ... (default: cuda when available, else cpu)"
    )


def check_device_flag(a: argparse.Namespace) -> None:
    """A command's --device must name a device this machine has: one line naming the way out (`main` runs it first)."""
    check_device(getattr(a, "device", None), BadValueError)


def chosen_device(a: argparse.Namespace) -> str:
    """The checked --device, resolved: unset is cuda when torch sees a GPU, else cpu (what `models.load` picks)."""
    check_device_flag(a)
    if a.device:
        return a.device
    import torch  # here: building the CLI's parsers stays torch-free

    return "cuda" if torch.cuda.is_available() else "cpu"


def add_text_field_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--text-field",
        default="text",
        help="the text's jsonl key, parquet column or saved-dataset column in a file corpus (default: %(default)s)",
    )


def add_resume_or_overwrite(p: argparse.ArgumentParser, resume: str, overwrite: str) -> None:
    """--resume and --overwrite, which exclude each other."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--resume", action="store_true", help=resume)
    g.add_argument("--overwrite", action="store_true", help=overwrite)


class LazyFlagsParser(argparse.ArgumentParser):
    """A sub-command parser that adds its flags (`populate(parser)`) when it is first used, so building
    the whole CLI stays cheap (no torch) while the flags still come from their config dataclass."""

    def __init__(self, *args, populate=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._populate = populate

    def _ensure(self) -> None:
        if self._populate is not None:
            populate, self._populate = self._populate, None
            populate(self)

    def parse_known_args(self, *args, **kwargs):
        self._ensure()
        return super().parse_known_args(*args, **kwargs)

    def format_help(self) -> str:
        self._ensure()
        return super().format_help()
