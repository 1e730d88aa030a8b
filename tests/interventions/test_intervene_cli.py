"""`workbench intervene` end to end on the embedded model: recorded with a manifest, --out, one-line errors."""

import dataclasses
import json

import pytest

from workbench.cli import build_parser, main
from workbench.cli import intervene as intervene_cli
from workbench.configflags import flag_fields
from workbench.interventions.batch import RESULTS, read_results
from workbench.interventions.config import InterventionConfig
from workbench.provenance import dictionary_id

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


def _timeless(r: dict) -> dict:
    return {k: v for k, v in r.items() if k != "seconds"}


def test_a_batch_of_prompts_gives_each_prompts_single_run(tiny, saes, tmp_path, capsys):
    """--prompts: one result per line (a JSON line may carry its counterfactual), each what the single run gives;
    the Python API's batch the same."""
    from workbench.interventions import InterventionConfig, intervene, intervene_batch

    other = "When Tom and Anna went to the park , Anna gave a ball to"
    lines = [PROMPT, json.dumps({"prompt": other, "counterfactual": PROMPT}), "", other]
    (tmp_path / "p.txt").write_text("\n".join(lines))
    ws = tmp_path / "ws"
    argv = [
        "intervene",
        "--workspace",
        str(ws),
        "--dictionary",
        str(saes["topk"]),
        "--prompts",
        str(tmp_path / "p.txt"),
    ]
    argv += ["--feature", "3", "--op", "ablate", "--ablate-to", "counterfactual", "--counterfactual", other]
    assert main([*argv, "--positions", "-1", "--continue", "2", "--name", "batch"]) == 0
    assert capsys.readouterr().out.count("intervened:") == 3
    batch = json.loads((ws / "interventions" / "batch" / "result.json").read_text())
    assert batch["schema"] == "workbench.intervention_stream" and batch["prompts"] == 3
    batch["results"] = list(read_results(ws / "interventions" / "batch"))
    base = dict(features=["3"], op="ablate", ablate_to="counterfactual", positions="-1", continue_tokens=2)
    model = tiny[0]
    for (prompt, cf), got in zip([(PROMPT, other), (other, PROMPT), (other, other)], batch["results"]):
        single = intervene(model, saes["topk"], prompt, InterventionConfig(**base, counterfactual=cf))
        assert _timeless(json.loads(json.dumps(single))) == _timeless(got)
    api = intervene_batch(
        model, saes["topk"], [PROMPT, (other, PROMPT)], InterventionConfig(**base, counterfactual=other)
    )
    assert [_timeless(r) for r in api["results"]] == [_timeless(r) for r in batch["results"][:2]]
    manifest = json.loads((ws / "interventions" / "batch" / "artifact.json").read_text())
    assert manifest["summary"]["prompts"] == 3 and manifest["inputs"]["prompts"]["n"] == 3


class Stop(Exception):
    pass


def test_a_batch_streams_each_line_and_resumes_after_the_last_complete_one(tiny, saes, tmp_path, capsys):
    """Each prompt's line is on disk when the next starts (nothing accumulates); a run stopped after two prompts
    (a line cut off mid-write after them) leaves no manifest, is refused without --resume, and --resume finishes
    it with exactly the lines an uninterrupted run writes."""
    from workbench.interventions import InterventionConfig
    from workbench.steps.interventions import intervene
    from workbench.workspace import Workspace

    prompts = [
        PROMPT,
        "When Tom and Anna went to the park , Anna gave a ball to",
        "the baker saw a coin",
        "John gave a drink to",
    ]
    (tmp_path / "p.txt").write_text("\n".join(prompts))
    cfg = InterventionConfig(features=["3"], positions="-1", continue_tokens=1)
    ws = Workspace(tmp_path / "ws")
    folder = ws.path("interventions", "b")
    seen = []

    def stop_after_two(r):
        seen.append(sum(1 for _ in open(folder / RESULTS)))  # the line is written before the next prompt runs
        if len(seen) == 2:
            raise Stop

    with pytest.raises(Stop):
        intervene(ws, tiny[0], saes["topk"], prompts, cfg, name="b", on_result=stop_after_two)
    assert seen == [1, 2] and not (folder / "artifact.json").exists()
    with open(folder / RESULTS, "a") as f:
        f.write('{"prompt": "cut off')
    argv = ["intervene", "--workspace", str(ws.root), "--dictionary", str(saes["topk"]), "--name", "b"]
    argv += ["--prompts", str(tmp_path / "p.txt"), "--feature", "3", "--positions", "-1", "--continue", "1"]
    assert main(argv) == 2 and "stopped before it finished" in capsys.readouterr().err
    assert main([*argv, "--continue", "2", "--resume"]) == 2
    assert "another config" in capsys.readouterr().err
    other = [a if a != str(saes["topk"]) else str(saes["block"]) for a in argv]
    assert main([*other, "--resume"]) == 2
    err = capsys.readouterr().err
    assert f"dictionary_id {dictionary_id(saes['topk'])} (this run's: {dictionary_id(saes['block'])})" in err
    assert main([*argv, "--resume"]) == 0
    assert capsys.readouterr().out.count("intervened:") == 2  # only the two prompts left
    assert main([a if a != "b" else "c" for a in argv]) == 0  # the same batch uninterrupted
    got, want = list(read_results(folder)), list(read_results(ws.path("interventions", "c")))
    assert [_timeless(r) for r in got] == [_timeless(r) for r in want] and len(got) == 4
    summary = json.loads((folder / "artifact.json").read_text())["summary"]
    assert summary["prompts"] == 4 and summary["mean_kl"] == pytest.approx(
        sum(r["positions"][-1]["kl"] for r in want) / 4
    )


def test_a_bad_prompts_file_is_one_line(saes, tmp_path, capsys):
    base = ["intervene", "--workspace", str(tmp_path), "--dictionary", str(saes["topk"]), "--feature", "1"]
    (tmp_path / "bad.jsonl").write_text('{"prompt": "a", "answer": "b"}\n')
    (tmp_path / "empty.txt").write_text("\n\n")
    (tmp_path / "unknown.txt").write_text(f"{PROMPT}\nthe zebra\n")
    for path, message in [
        ("unknown.txt", "prompt 2: the prompt has 1 word(s) outside"),  # before the first prompt runs
        ("nope.txt", "does not exist"),
        ("bad.jsonl", "bad.jsonl:1 must be"),
        ("empty.txt", "holds no"),
    ]:
        assert main([*base, "--prompts", str(tmp_path / path)]) == 2, path
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
    assert main(base) == 2 and "give one of --prompt TEXT" in capsys.readouterr().err  # neither
    assert not list(tmp_path.glob("interventions/*/results.jsonl"))


def test_intervene_on_a_clt_feature(tiny, tiny_clt, tmp_path, capsys):
    """A CLT folder as the dictionary: the unit's record names every MLP output it writes."""
    ws, out = tmp_path / "ws", tmp_path / "r.json"
    argv = ["intervene", "--workspace", str(ws), "--dictionary", str(tiny_clt), "--prompt", PROMPT, "--out", str(out)]
    assert main([*argv, "--feature", "1:3", "--op", "steer", "--value", "6", "--continue", "3"]) == 0
    assert "intervened:" in capsys.readouterr().out
    unit = json.loads(out.read_text())["units"][0]
    assert unit["write_hooks"] == [f"blocks.{t}.hook_mlp_out" for t in range(1, tiny[0].cfg.n_layers)]
    assert unit["layer"] == 1


def test_every_field_of_the_intervention_reaches_its_config_from_a_flag(capsys):
    """The flags are generated from InterventionConfig: each scalar field has one (temperature and mean_sequences
    too), the list fields their own, and a value out of a field's bounds is refused as it is parsed."""
    line = ["intervene", "--dictionary", "d", "--prompt", "x", "--feature", "1", "--op", "steer", "--value", "2"]
    given = ["--temperature", "0.5", "--mean-sequences", "8", "--continue", "3", "--live-norm", "--semantics", "frozen"]
    lists = ["--constrained-layers", "0,1", "--strengths", "0,4"]
    cfg = intervene_cli._config(build_parser().parse_args([*line, *given, *lists]))
    assert (cfg.temperature, cfg.mean_sequences, cfg.continue_tokens, cfg.frozen_norm) == (0.5, 8, 3, False)
    assert (cfg.value, cfg.constrained_layers, cfg.strengths, cfg.semantics) == ([2.0], [0, 1], [0.0, 4.0], "frozen")
    flags = {f.name for f in flag_fields(InterventionConfig)}
    assert flags | {"features", "value", "constrained_layers", "strengths"} == {
        f.name for f in dataclasses.fields(InterventionConfig)
    }
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([*line, "--temperature", "0"])
    assert e.value.code == 2 and "temperature=0.0 must be a finite number > 0" in capsys.readouterr().err
