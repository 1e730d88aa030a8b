"""sparsify: the saved gated model and report, exact resume, refusals, the unmet constraint, torchrun."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from workbench import checkpoint
from workbench.attention import gates as G
from workbench.attention import train as T
from workbench.attention.config import GateConfig, SparsifyConfig
from workbench.cli import main
from workbench.corpus.vocab import TASKS
from workbench.errors import BadValueError, DamagedFileError
from workbench.models import load
from workbench.workspace import Workspace

ROOT = Path(__file__).resolve().parents[2]


def _cfg(**kw):
    return SparsifyConfig(
        **{
            "steps": 6,
            "batch_size": 4,
            "eval_sequences": 4,
            "verdict_sequences": 8,
            "eval_every": 3,
            "checkpoint_every": 3,
            "tolerance": 0.5,
            "lr": 1e-3,
            "gate_lr": 0.1,
            "progress": False,
            "gates": GateConfig(init_bias=1.0),
            **kw,
        }
    )


def test_sparsify_saves_a_gated_model_and_its_report(small_dir, tmp_path):
    out = tmp_path / "sparse"
    report = T.sparsify(small_dir, out, _cfg(), report_queries=4)
    model, _ = load(str(out), device="cpu")
    assert G.is_gated(model) and not model.training
    saved = json.loads((out / "attention_report.json").read_text())
    v = saved["verdict"]
    assert saved["constraint_met"] is v["constraint_met"] is True and v["ci95"][1] <= 0.5
    assert v["n"] == 8 and v["split"]["sequences"] == [4, 12]  # fresh: after the selection split [0, 4)
    assert saved["ce"]["increase"] == pytest.approx(v["difference"], abs=1e-6)
    assert saved["selection"]["sequences"] == [0, 4] and "difference" in saved["selected_eval"]
    assert 0 < saved["open_fraction"] < 1 and saved["ctx_len"] == model.cfg.n_ctx
    assert saved["mean_open_keys_per_query"] == pytest.approx(saved["open_fraction"] * (saved["ctx_len"] + 1) / 2)
    assert len(saved["single_key_row_fraction_per_head"][0]) == model.cfg.n_heads
    assert len(saved["mean_open_keys_per_query_per_layer"]) == model.cfg.n_layers
    assert len(saved["open_fraction_per_head"]) == model.cfg.n_layers
    assert len(saved["mean_open_keys_per_query_per_head"][0]) == model.cfg.n_heads
    families = set(saved["ce_per_task"]["base"])
    assert len(families) >= 2 and families <= set(TASKS) and set(saved["task_accuracy"]) == {"base", "sparse"}
    ex = saved["examples"]["sparse"]["induction"][0]
    n = len(ex["str_tokens"])
    assert len(ex["patterns"]) == model.cfg.n_layers and len(ex["patterns"][0][0]) == n
    assert report["constraint_met"] is True
    curves = (out / "curves.jsonl").read_text().splitlines()
    assert len(curves) == 6 and {"ce", "ce_base", "lambda", "open_fraction", "tau"} <= set(json.loads(curves[0]))
    info = json.loads((out / "sparsify.json").read_text())
    assert [e["step"] for e in info["evals"]] == [3, 6] and info["config"]["tolerance"] == 0.5


def test_a_finished_run_embeds_as_a_model_with_its_card(small_dir, tmp_path):
    from workbench.attention.card import embed

    T.sparsify(small_dir, tmp_path / "run", _cfg(steps=3), report_queries=2)
    out = embed(tmp_path / "run", tmp_path / "embedded", "workbench attention sparsify --steps 3")
    card = (out / "README.md").read_text()
    assert "workbench attention sparsify --steps 3" in card and "Verdict on the fresh split" in card
    assert "Open keys per query per head" in card and "T = " in card
    assert G.is_gated(load(str(out), device="cpu")[0])


def test_a_kept_checkpoint_is_adopted_as_the_saved_state_and_one_from_another_run_is_refused(small_dir, tmp_path):
    from workbench.attention.report import format_report

    run, kept = tmp_path / "run", tmp_path / "step3.pt"
    T.sparsify(small_dir, run, _cfg(steps=3), report_queries=2)
    shutil.copy(run / T.CHECKPOINT, kept)
    T.sparsify(small_dir, run, _cfg(steps=6), resume=True, report_queries=2)
    report = T.sparsify(small_dir, run, _cfg(steps=6), resume=True, report_queries=2, adopt=kept)
    assert report["selected_step"] == 3 and report["selected_eval"]["adopted_from"] == "step3.pt"
    assert report["selection"]["rule"] == T.ADOPT_RULE and "adopted after the run from step3.pt" in format_report(
        report
    )
    saved = load(str(run), device="cpu")[0].state_dict()
    assert all(torch.equal(saved[k], v) for k, v in checkpoint.read(kept)["model"].items())
    other = tmp_path / "other"
    T.sparsify(small_dir, other, _cfg(steps=3, tolerance=0.4), report_queries=2)
    with pytest.raises(DamagedFileError, match="different configuration"):
        T.sparsify(small_dir, run, _cfg(steps=6), resume=True, report_queries=2, adopt=other / T.CHECKPOINT)
    with pytest.raises(BadValueError, match="holds step 6, which this run did not evaluate; adopt one of .*: 3"):
        T.sparsify(small_dir, tmp_path / "r2", _cfg(steps=3), report_queries=2, adopt=run / T.CHECKPOINT)


class Crash(Exception):
    pass


HELDOUT_DUAL = {"dual_stream": "heldout", "dual_sequences": 4, "dual_every": 2}


@pytest.mark.parametrize(
    "dual",
    [{}, HELDOUT_DUAL, {**HELDOUT_DUAL, "control": "finetune"}],
    ids=["train-dual", "heldout-dual", "finetune-control"],
)
def test_resume_after_a_crash_gives_the_identical_model(small_dir, tmp_path, monkeypatch, dual):
    cfg = _cfg(steps=8, gates=GateConfig(init_bias=1.0, estimator="hard_concrete"), **dual)
    T.sparsify(small_dir, tmp_path / "full", cfg, report_queries=2)
    real = T.training_batches

    def dying(corpus, ctx, cfg, start, rank, world):
        for i, b in enumerate(real(corpus, ctx, cfg, start, rank, world)):
            if start + i == 5:
                raise Crash
            yield b

    monkeypatch.setattr(T, "training_batches", dying)
    with pytest.raises(Crash):
        T.sparsify(small_dir, tmp_path / "resumed", cfg, report_queries=2)
    assert checkpoint.read(tmp_path / "resumed" / T.CHECKPOINT)["step"] == 3
    monkeypatch.setattr(T, "training_batches", real)
    T.sparsify(small_dir, tmp_path / "resumed", cfg, resume=True, report_queries=2)
    weights = ["model.safetensors"] + ([f"{T.CONTROL_DIR}/model.safetensors"] if "control" in dual else [])
    for name in weights:  # the fine-tuned control resumes from the checkpoint too
        a, b = (load_file(str(tmp_path / d / name)) for d in ("full", "resumed"))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (tmp_path / "full" / "curves.jsonl").read_text() == (tmp_path / "resumed" / "curves.jsonl").read_text()
    rows = (tmp_path / "resumed" / "curves.jsonl").read_text().splitlines()
    assert {json.loads(r)["threads"] for r in rows} == {torch.get_num_threads()}  # identical at the same count
    ia, ib = (json.loads((tmp_path / d / "sparsify.json").read_text()) for d in ("full", "resumed"))
    assert ia["evals"] == ib["evals"] and ia["final_lambda"] == ib["final_lambda"]


def test_the_held_out_dual_stream_moves_lambda_on_its_own_difference(small_dir, tokenizer, tmp_path):
    from workbench.attention.report import measure, stack, summarise
    from workbench.attention.verdict import dual_sequences
    from workbench.corpus import load_corpus

    cfg = _cfg(steps=8, ce_ema=0.0, multiplier_lr=0.1, **HELDOUT_DUAL)
    out = tmp_path / "run"
    T.sparsify(small_dir, out, cfg, report_queries=2)
    rows = [json.loads(line) for line in (out / T.CURVES).read_text().splitlines()]
    info = json.loads((out / T.RUN).read_text())
    first, end = info["dual_split"]["sequences"]
    assert end - first == 4 and first >= cfg.eval_sequences + cfg.verdict_sequences  # after the verdict split
    allowed, lam = cfg.tolerance * (1 - cfg.dual_margin), cfg.lambda_init
    for r in rows:  # lambda moves only at the held-out evaluations, by dual_every steps of its difference
        if r["step"] % 2 == 0:
            lam = max(0.0, lam + 0.1 * 2 * (r["dual_difference"] - allowed))
        else:
            assert "dual_difference" not in r
        assert r["lambda"] == pytest.approx(lam, abs=1e-12)
    assert info["final_lambda"] == pytest.approx(lam, abs=1e-12) and 0 < lam < cfg.lambda_init
    # the logged difference is the step-8 model's CE minus the base model's on the dual split itself
    base, _ = load(small_dir, device="cpu")
    seqs, start = dual_sequences(load_corpus("synthetic", tokenizer, seed=0), cfg.resolve(), base.cfg.n_ctx)
    tokens = stack(seqs)[0]
    run = T.prepare(small_dir, out, cfg, "synthetic", resume=True)
    assert start == first and run.trainer.step_no == 8
    ce = [summarise(measure(m, tokens))["ce"] for m in (run.model, base)]
    assert rows[-1]["dual_difference"] == pytest.approx(ce[0] - ce[1], abs=1e-9)
    T.sparsify(small_dir, tmp_path / "train", _cfg(steps=2, ce_ema=0.0, multiplier_lr=0.1), report_queries=2)
    trained = json.loads((tmp_path / "train" / T.CURVES).read_text().splitlines()[0])
    assert rows[0]["lambda"] == cfg.lambda_init != trained["lambda"]  # the training-batch dual moves every step


def test_more_steps_extend_a_finished_run_to_the_straight_run_and_fewer_are_refused(small_dir, tmp_path):
    T.sparsify(small_dir, tmp_path / "straight", _cfg(steps=6), report_queries=2)
    T.sparsify(small_dir, tmp_path / "split", _cfg(steps=3), report_queries=2)
    T.sparsify(small_dir, tmp_path / "split", _cfg(steps=6), resume=True, report_queries=2)
    a, b = (load_file(str(tmp_path / d / "model.safetensors")) for d in ("straight", "split"))
    assert all(torch.equal(a[k], b[k]) for k in a)  # the published gate's temperature is constant
    assert (tmp_path / "straight" / "curves.jsonl").read_text() == (tmp_path / "split" / "curves.jsonl").read_text()
    with pytest.raises(BadValueError, match=r"steps=4 is smaller than the 6 steps this run has finished"):
        T.sparsify(small_dir, tmp_path / "split", _cfg(steps=4), resume=True, report_queries=2)


def test_resume_refuses_another_config_or_base_model(small_dir, tokenizer, tmp_path):
    from workbench.models import save

    from .conftest import build

    out = tmp_path / "run"
    T.sparsify(small_dir, out, _cfg(steps=2, eval_every=2), report_queries=2)
    with pytest.raises(DamagedFileError, match=r"config\.tolerance: checkpoint 0\.5 != now 0\.2"):
        T.sparsify(small_dir, out, _cfg(steps=2, eval_every=2, tolerance=0.2), resume=True)
    other = str(save(build(tokenizer, seed=9), tmp_path / "other"))
    with pytest.raises(DamagedFileError, match=r"base_model: checkpoint 'test-attention@"):
        T.sparsify(other, out, _cfg(steps=2, eval_every=2), resume=True)
    with pytest.raises(BadValueError, match="already exists and is not empty; pass --resume"):
        T.sparsify(small_dir, out, _cfg(steps=2, eval_every=2))


def _cli(args, capsys):
    rc = main(args)
    return rc, capsys.readouterr()


def _own_text(model, path: Path, n_docs: int = 40) -> str:
    """A text corpus the model itself sampled: in distribution for it, whatever its vocabulary."""
    torch.manual_seed(0)
    bos = torch.full((n_docs, 1), model.tokenizer.bos_token_id)
    out = model.generate(bos, max_new_tokens=24, temperature=1.0, verbose=False, stop_at_eos=False)
    special = set(model.tokenizer.all_special_ids)
    docs = [model.tokenizer.decode([t for t in row.tolist() if t not in special]) for row in out]
    path.write_text("\n\n".join(docs))
    return str(path)


def test_cli_unmet_constraint_saves_the_best_state_marked_and_exits_nonzero(tmp_path, capsys):
    corpus = _own_text(load("tiny", device="cpu")[0], tmp_path / "own.txt", n_docs=120)
    ws = tmp_path / "ws"  # the trained embedded model with every edge closed: its CE must rise
    rc, io = _cli(
        [
            "attention",
            "train",
            "--model",
            "tiny",
            "--workspace",
            str(ws),
            "--name",
            "closed",
            "--corpus",
            corpus,
            "--steps",
            "2",
            "--batch-size",
            "2",
            "--tolerance",
            "0.001",
            "--quiet",
            "--eval-sequences",
            "2",
            "--eval-every",
            "1",
            "--lr",
            "0",
            "--ctx-len",
            "16",
            "--init-bias",
            "-10000",
            "--verdict-sequences",
            "2",
        ],
        capsys,
    )
    assert rc == 2
    err = io.err.strip().splitlines()
    assert len(err) == 1 and "not met on the fresh verdict split" in err[0] and "constraint_met=false" in err[0]
    out = ws / "models" / "closed"
    report = json.loads((out / "attention_report.json").read_text())
    assert report["constraint_met"] is False and report["verdict"]["ci95"][1] > 0.001
    assert G.is_gated(load(str(out), device="cpu")[0])
    (art,) = Workspace(ws).artifacts("models")
    assert art.manifest["summary"]["constraint_met"] is False and art.manifest["made_by"] == "workbench attention train"
    rc, io = _cli(["attention", "report", str(out)], capsys)
    assert rc == 0 and "constraint NOT MET" in io.out and "layer 0" in io.out


@pytest.mark.parametrize("value", ["0", "nan", "-1"])
def test_cli_bad_tolerance_is_refused_as_the_flag_is_parsed(value, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["attention", "train", "--out", str(tmp_path / "x"), "--tolerance", value, "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert e.value.code == 2 and f"argument --tolerance: tolerance={float(value)!r} must be a finite number > 0" in err
    assert not (tmp_path / "x").exists()


def test_sparsify_under_torchrun_with_two_processes(small_dir, tmp_path):
    out = tmp_path / "ddp"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "workbench.cli",
        "attention",
        "train",
        "--model",
        small_dir,
        "--out",
        str(out),
        "--steps",
        "4",
        "--batch-size",
        "4",
        "--tolerance",
        "0.5",
        "--quiet",
        "--eval-sequences",
        "4",
        "--eval-every",
        "2",
        "--verdict-sequences",
        "8",
    ]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads((out / "sparsify.json").read_text())
    assert info["world_size"] == 2 and len(info["evals"]) == 2
    model, _ = load(str(out), device="cpu")
    assert G.is_gated(model)
    assert proc.stdout.count("fresh verdict split") == 1  # only rank 0 reports
