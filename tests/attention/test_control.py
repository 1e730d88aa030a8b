"""The fair controls of a sparse-attention run: frozen weights, and a control fine-tuned in lockstep that equals a
separate fine-tune on the same batches."""

import json

import pytest
import torch
from safetensors.torch import load_file

from workbench.attention import train as T
from workbench.attention.card import card_text
from workbench.attention.config import GateConfig, SparsifyConfig
from workbench.attention.report import format_report
from workbench.cli import main
from workbench.corpus import load_corpus
from workbench.errors import ConfigError
from workbench.models import load, model_id
from workbench.schedule import lr_factor


def _cfg(**kw):
    return SparsifyConfig(
        **{
            "steps": 4,
            "batch_size": 4,
            "eval_sequences": 4,
            "verdict_sequences": 8,
            "eval_every": 4,
            "checkpoint_every": 4,
            "tolerance": 0.5,
            "gate_lr": 0.1,
            "warmup_steps": 2,
            "progress": False,
            "gates": GateConfig(init_bias=1.0),
            **kw,
        }
    )


def test_the_frozen_control_trains_the_gates_alone(small_dir, tmp_path):
    report = T.sparsify(small_dir, tmp_path / "run", _cfg(control="frozen"), report_queries=2)
    base = load_file(f"{small_dir}/model.safetensors")
    gated = load_file(str(tmp_path / "run" / "model.safetensors"))
    gates = [k for k in gated if ".attn.gate." in k]
    assert gates and all(torch.equal(gated[k], base[k]) for k in base)  # every weight of the base, bit for bit
    curves = [json.loads(line) for line in (tmp_path / "run" / T.CURVES).read_text().splitlines()]
    assert curves[0]["open_fraction"] != curves[-1]["open_fraction"]  # the gates learned
    assert report["control"] == "frozen" and report["config"]["lr"] == 0.0
    assert report["reference"] == "the base model"
    text = format_report(report)  # what `attention train` prints: the reference is the base
    assert "CE difference sparse - base " in text and "sparse - control" not in text


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"control": "frozen", "lr": 1e-3}, "lr=0.001 with control 'frozen'"),
        ({"control": "finetune", "lr": 0.0}, "lr=0 with control 'finetune'"),
        ({"control": "finetune", "dual_ce": "fixed"}, "dual_ce 'fixed' with control 'finetune'"),
        ({"control": "none", "control_average": 0.9}, "control_average=0.9 with control 'none'"),
        ({"control": "finetune", "reference": "base"}, "base"),
        ({"control": "fine-tune"}, "fine-tune"),
    ],
)
def test_a_control_with_a_contradicting_setting_is_refused(fields, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(")):
        SparsifyConfig(**fields).resolve()


def _separate_fine_tune(small_dir, cfg, steps):
    """The control, written out by hand: AdamW with warm-up and clip on the run's own batches, CE alone; its losses,
    the frozen base's on the same batches, its final weights and their running average (decay control_average)."""
    model, tok = load(small_dir, device="cpu")
    base = load(small_dir, device="cpu")[0]
    corpus = load_corpus("synthetic", tok, seed=cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    average = {k: v.detach().clone() for k, v in model.named_parameters()}
    losses, base_losses = [], []
    for step, tokens in zip(range(steps), T.training_batches(corpus, model.cfg.n_ctx, cfg, 0, 0, 1)):
        with torch.no_grad():
            base_losses.append(float(base(tokens, return_type="loss")))
        for group in opt.param_groups:
            group["lr"] = cfg.lr * lr_factor(step, cfg.warmup_steps)
        loss = model(tokens, return_type="loss")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        losses.append(float(loss.detach()))
        for k, v in model.named_parameters():
            average[k].lerp_(v.detach(), 1 - cfg.control_average)
    return losses, base_losses, model.state_dict(), average


def test_the_finetune_control_equals_a_separate_fine_tune_on_the_same_batches(small_dir, tmp_path):
    cfg = _cfg(control="finetune", lr=1e-3, reference="control")
    out = tmp_path / "run"
    report = T.sparsify(small_dir, out, cfg, report_queries=2)
    losses, _, weights, _ = _separate_fine_tune(small_dir, cfg.resolve(), cfg.steps)
    curves = [json.loads(line) for line in (out / T.CURVES).read_text().splitlines()]
    assert [r["ce_base"] for r in curves] == pytest.approx(losses, abs=1e-6)  # the dual's reference: the control
    saved = load_file(str(out / T.CONTROL_DIR / "model.safetensors"))  # the control at the saved step (the last)
    assert report["selected_step"] == cfg.steps
    assert saved.keys() == weights.keys()
    assert all(torch.allclose(saved[k], weights[k], atol=1e-6) for k in saved)
    assert report["control"] == "finetune" and report["reference"] == T.CONTROL_REFERENCE
    assert "ce_control" in report["evals"][-1] and "difference_base" not in report["evals"][-1]
    against = report["against_base"]
    assert against["split"]["sequences"] == report["verdict"]["split"]["sequences"]
    assert against["control - base"]["difference"] != 0  # the control trained
    assert report["control_model"] == model_id(load(str(out / T.CONTROL_DIR), device="cpu")[0])
    card = card_text(report, "workbench attention train --control finetune", "run")
    saved_as = f"({report['control_model']}, saved beside the model as control/)"
    assert f"Control: finetune {saved_as}; the verdict compares with {T.CONTROL_REFERENCE}." in card
    assert "Against the frozen base, sparse - base: " in card and "Against the frozen base, control - base: " in card


def test_reference_both_holds_the_run_to_the_lower_of_control_and_base_and_averages_the_control(small_dir, tmp_path):
    """The dual's reference is min(control, base) on each batch; each evaluation is judged against both; the
    verdict is met only if met against each; control/ holds the running average of the control's weights."""
    # lr 0.05: a control that fine-tuning makes worse than the base on some batches, where the base binds
    cfg = _cfg(control="finetune", lr=0.05, control_average=0.5)  # reference "both": the default
    out = tmp_path / "run"
    report = T.sparsify(small_dir, out, cfg, report_queries=2)
    losses, base_losses, weights, average = _separate_fine_tune(small_dir, cfg.resolve(), cfg.steps)
    curves = [json.loads(line) for line in (out / T.CURVES).read_text().splitlines()]
    assert [r["ce_base"] for r in curves] == pytest.approx(list(map(min, losses, base_losses)), abs=1e-6)
    assert any(c < b for c, b in zip(losses, base_losses)) and any(c > b for c, b in zip(losses, base_losses))
    saved = load_file(str(out / T.CONTROL_DIR / "model.safetensors"))
    assert all(torch.allclose(saved[k], average[k], atol=1e-6) for k in average)
    assert not all(torch.allclose(saved[k], weights[k], atol=1e-6) for k in average)  # the average, not the last
    ev = report["evals"][-1]
    assert ev["feasible"] == all(
        d["difference"] + 1.96 * d["se"] <= 0.5 for d in (ev["difference"], ev["difference_base"])
    )
    v = report["verdict"]
    assert v["against_base"]["difference"] == report["against_base"]["sparse - base"]["difference"]
    assert report["constraint_met"] == (v["against_base"]["constraint_met"] and v["ci95"][1] <= 0.5 and v["se"] < 0.1)
    assert report["reference"] == T.BOTH_REFERENCE and "against the frozen base: " in v["why"]


def test_a_state_is_admitted_only_within_the_tolerance_of_each_reference():
    from workbench.attention.verdict import admitted

    ok, bad = {"difference": 0.001, "se": 0.001}, {"difference": 0.02, "se": 0.001}
    assert admitted({"difference": ok}, 0.01, 1.96) and not admitted({"difference": bad}, 0.01, 1.96)
    assert not admitted({"difference": ok, "difference_base": bad}, 0.01, 1.96)
    assert admitted({"difference": ok, "difference_base": ok}, 0.01, 1.96)


def test_cli_runs_the_finetune_control(small_dir, tmp_path, capsys):
    main(
        [
            "attention",
            "train",
            "--model",
            small_dir,
            "--out",
            str(tmp_path / "run"),
            "--workspace",
            str(tmp_path),
            "--control",
            "finetune",
            "--steps",
            "2",
            "--batch-size",
            "4",
            "--eval-sequences",
            "4",
            "--verdict-sequences",
            "8",
            "--eval-every",
            "2",
            "--tolerance",
            "0.5",
            "--quiet",
        ]
    )
    saved = json.loads((tmp_path / "run" / T.RUN).read_text())
    assert saved["config"]["control"] == "finetune" and saved["config"]["lr"] == 1e-4
    assert (tmp_path / "run" / T.CONTROL_DIR / "model.safetensors").is_file()
    printed = capsys.readouterr().out  # the differences are named by the reference they are taken against
    v = saved["verdict"]
    assert f"CE difference sparse - control {v['difference']:+.4f} " in printed
    assert (
        f"and against the frozen base: CE difference sparse - base {v['against_base']['difference']:+.4f} " in printed
    )
    assert "CE on the verdict split: control " in printed and "points of control" in printed
