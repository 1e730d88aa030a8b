import importlib
import inspect
import pkgutil

import pytest

import workbench
from workbench.cli import main
from workbench.errors import UserError

# Owned by issue 8 (the lead's corpus work); drop from here once it subclasses UserError.
PENDING: set[str] = set()


def _error_classes():
    for info in pkgutil.walk_packages(workbench.__path__, "workbench."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, Exception) and cls.__module__ == info.name:
                yield f"{cls.__module__}.{cls.__qualname__}", cls


def test_every_workbench_error_is_a_user_error():
    found = dict(_error_classes())
    assert "workbench.errors.DamagedFileError" in found and "workbench.lock.OutputBusyError" in found
    wrong = sorted(name for name, cls in found.items() if not issubclass(cls, UserError) and name not in PENDING)
    assert not wrong, f"error classes outside the UserError hierarchy: {wrong}"
    fixed = sorted(name for name in PENDING if name in found and issubclass(found[name], UserError))
    assert not fixed, f"remove {fixed} from PENDING: they are UserErrors now"


def _run_with(monkeypatch, exc):
    def boom(args):
        raise exc

    monkeypatch.setattr("workbench.cli.model._info", boom)
    return main(["model", "info"])


def test_cli_reports_a_user_error_in_one_line(monkeypatch, capsys):
    from workbench.errors import BadValueError

    assert _run_with(monkeypatch, BadValueError("k=0 is not valid; choose k >= 1")) == 2
    assert capsys.readouterr().err == "workbench model: error: k=0 is not valid; choose k >= 1\n"


def test_cli_names_the_file_of_an_os_error(monkeypatch, capsys, tmp_path):
    assert _run_with(monkeypatch, PermissionError(13, "Permission denied", str(tmp_path / "out"))) == 2
    assert capsys.readouterr().err == f"workbench model: error: Permission denied: {tmp_path / 'out'}\n"


@pytest.mark.parametrize("exc", [ValueError("a bug"), KeyError("a bug"), OSError("no file named")])
def test_cli_keeps_the_traceback_of_a_bug(monkeypatch, exc):
    with pytest.raises(type(exc)):
        _run_with(monkeypatch, exc)
