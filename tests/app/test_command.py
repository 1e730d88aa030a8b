"""`workbench app`: binds localhost by default with the offline flags; a missing workspace is one clear line."""

from workbench.cli import build_parser, main
from workbench.cli.app import APP, streamlit_command


def test_defaults_bind_localhost_offline(tmp_path):
    a = build_parser().parse_args(["app"])
    assert (a.host, a.port, a.workspace) == ("127.0.0.1", 8501, "workspace")
    cmd = streamlit_command(tmp_path, a.host, a.port)
    flags = dict(zip(cmd[5::2], cmd[6::2]))
    assert cmd[4] == str(APP) and APP.is_file()
    assert flags["--server.address"] == "127.0.0.1" and flags["--browser.gatherUsageStats"] == "false"
    assert flags["--server.headless"] == "true"
    assert flags["--runner.postScriptGC"] == "false" and flags["--runner.magicEnabled"] == "false"  # rerun speed


def test_missing_workspace_is_a_user_error(tmp_path, capsys):
    assert main(["app", "--workspace", str(tmp_path / "none")]) == 2
    assert "no workspace folder" in capsys.readouterr().err
