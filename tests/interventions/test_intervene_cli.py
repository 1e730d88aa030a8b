"""`workbench intervene` end to end on the embedded model: recorded with a manifest, --out, one-line errors."""

import json

from workbench.cli import main

PROMPT = "When Mary and John went to the store , John gave a drink to"


def test_intervene_records_its_result(saes, tmp_path, capsys):
    ws, out = tmp_path / "ws", tmp_path / "r.json"
    argv = ["intervene", "--workspace", str(ws), "--dictionary", str(saes["block"]), "--prompt", PROMPT]
    argv += ["--feature", "5", "--op", "set", "--value", "1,2,3,4", "--positions", "-1", "--continue", "3"]
    assert main([*argv, "--out", str(out), "--name", "steer"]) == 0
    assert "intervened:" in capsys.readouterr().out
    folder = ws / "interventions" / "steer"
    manifest = json.loads((folder / "artifact.json").read_text())
    assert manifest["made_by"] == "workbench intervene" and manifest["config"]["value"] == [1.0, 2.0, 3.0, 4.0]
    assert json.loads(out.read_text()) == json.loads((folder / "result.json").read_text())
    assert main([*argv, "--name", "steer"]) == 2  # the folder is taken
    assert "already holds" in capsys.readouterr().err


def test_intervene_refuses_bad_flags_in_one_line(saes, tmp_path, capsys):
    base = ["intervene", "--workspace", str(tmp_path), "--dictionary", str(saes["topk"]), "--prompt", PROMPT]
    for extra, message in [
        (["--feature", "x:1"], "is not [layer:]index"),
        (["--feature", "1", "--op", "scale"], "needs a value"),
        (["--feature", "1", "--ablate-to", "counterfactual"], "needs the counterfactual"),
        (["--feature", "1", "--constrained-layers", "9"], "outside the model"),
        (["--feature", "1", "--ablate-to", "mean"], "--cache"),
        (["--positions", "a,b"], "positions 'a,b'"),
    ]:
        assert main([*base, *extra]) == 2, extra
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
