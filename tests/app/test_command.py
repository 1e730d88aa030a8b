"""`workbench app`: binds localhost by default with the offline flags; a missing workspace is one clear line; the
served page HTML carries the hosting hook."""

from workbench.cli import build_parser, main
from workbench.cli.app import APP, streamlit_command


def test_defaults_bind_localhost_offline(tmp_path):
    a = build_parser().parse_args(["app"])
    assert (a.host, a.port, a.workspace) == ("127.0.0.1", 8501, "workspace")
    cmd = streamlit_command(tmp_path, a.host, a.port)
    flags = dict(zip(cmd[5::2], cmd[6::2]))
    assert cmd[4] == str(APP) and APP.is_file() and APP.name == "server.py"  # st.App: the pages' HTML names the server
    assert flags["--server.address"] == "127.0.0.1" and flags["--browser.gatherUsageStats"] == "false"
    assert flags["--server.headless"] == "true"
    assert flags["--runner.postScriptGC"] == "false" and flags["--runner.magicEnabled"] == "false"  # rerun speed


def test_missing_workspace_is_a_user_error(tmp_path, capsys):
    assert main(["app", "--workspace", str(tmp_path / "none")]) == 2
    assert "no workspace folder" in capsys.readouterr().err


def test_every_page_url_serves_streamlit_page_with_the_hosting_hook():
    import asyncio

    from app import server
    from app.pages import PAGES

    assert {r.path for r in server.ROUTES} == {"/", *(f"/{u}" for _, _, u, _ in PAGES)}
    body = asyncio.run(server.ROUTES[1].endpoint(None)).body.decode()
    assert body.count(server.HOSTING) == 1 and body.index(server.HOSTING) < body.index('<script type="module"')
