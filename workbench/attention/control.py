"""The fine-tuned control of a sparse-attention run (docs/methods.md §7, "The control").

The trainer fine-tunes the model's weights beside its gates, so a CE held within the tolerance of the frozen base can
be paid for by the fine-tuning itself. Under `control "finetune"` an ungated copy of the base takes the same AdamW
steps (learning rate, weight decay, warm-up, gradient clip) on the same batches, CE alone, in lockstep with the gated
model; its loss on each batch is the dual step's reference, and its state at an evaluated step is what the selection
and the verdict compare with. With `control_average` > 0 those evaluations use a running average of its weights
(decay `control_average` a step), which takes out the step-to-step noise a constant learning rate leaves in the
control's held-out CE. bench/attention/finetune_control.py fine-tunes the same control after the fact.
"""

from __future__ import annotations

import copy

import torch

from workbench.schedule import lr_factor


class FineTunedControl:
    """An ungated copy of the base model, fine-tuned one step per `step(tokens)` with the run's optimiser settings."""

    def __init__(self, base_model, cfg):
        self.model = copy.deepcopy(base_model).train().requires_grad_(True)
        self.clip = cfg.grad_clip
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: lr_factor(s, cfg.warmup_steps))
        self.decay = cfg.control_average
        self.average = copy.deepcopy(self.model).eval().requires_grad_(False) if self.decay else None

    @property
    def reference(self):
        """What the evaluations compare with: the running average of the weights, else the weights themselves."""
        return self.average if self.average is not None else self.model

    def step(self, tokens: torch.Tensor) -> float:
        """One AdamW step on this batch's CE; the CE before the step (the gated model's is measured before its own)."""
        self.model.train()
        loss = self.model(tokens, return_type="loss")
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.opt.step()
        self.sched.step()
        if self.average is not None:
            with torch.no_grad():
                for a, p in zip(self.average.parameters(), self.model.parameters(), strict=True):
                    a.lerp_(p.detach(), 1 - self.decay)
        return float(loss.detach())

    def state(self) -> dict:
        """The reference's weights alone, on the CPU (what a kept state and the saved control need)."""
        return cpu_state(self.reference)

    def adopt(self, weights: dict) -> None:
        """Load a kept state into the reference (the state the verdict compares with and control/ saves)."""
        self.reference.load_state_dict(weights)

    def state_dict(self) -> dict:
        state = {"model": cpu_state(self.model), "optim": self.opt.state_dict(), "sched": self.sched.state_dict()}
        return state | ({"average": cpu_state(self.average)} if self.average is not None else {})

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optim"])
        self.sched.load_state_dict(state["sched"])
        if self.average is not None:
            self.average.load_state_dict(state["average"])


def cpu_state(model) -> dict:
    """A model's weights on the CPU, copied (a kept state, a checkpoint's)."""
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
