import pytest

from workbench.cli import build_parser, main


def test_every_command_documents_every_option(capsys):
    for argv in (["--help"], ["model", "train", "--help"], ["model", "info", "--help"], ["cache", "--help"], ["demo", "--help"]):
        with pytest.raises(SystemExit) as e:
            build_parser().parse_args(argv)
        assert e.value.code == 0
    text = capsys.readouterr().out
    assert "--resume" in text and "--overwrite" in text and "hook_resid_post" in text


def test_model_info_lists_hooks(tiny, capsys):
    assert main(["model", "info"]) == 0
    out = capsys.readouterr().out
    assert "4 layers, d_model 128" in out and "blocks.{0..3}.hook_resid_post" in out


def test_user_errors_exit_2_with_one_clear_line(capsys):
    assert main(["model", "info", "--model", "no-such-model"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("workbench model: error: unknown model spec 'no-such-model'") and "Traceback" not in err
