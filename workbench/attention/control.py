"""The fine-tuned control of a sparse-attention run (docs/methods.md §7, "The control").

The trainer fine-tunes the model's weights beside its gates, so a CE held within the tolerance of the frozen base can
be paid for by the fine-tuning itself. Under `control "finetune"` an ungated copy of the base takes the same AdamW
steps (learning rate, weight decay, warm-up, gradient clip) on the same batches, CE alone, in lockstep with the gated
model; its loss on each batch is the dual step's reference, and its state at an evaluated step is what the selection
and the verdict compare with. bench/attention/finetune_control.py fine-tunes the same control after the fact.
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
        return float(loss.detach())

    def state(self) -> dict:
        """The weights alone, on the CPU (what a kept state and the saved control need)."""
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}

    def state_dict(self) -> dict:
        return {"model": self.state(), "optim": self.opt.state_dict(), "sched": self.sched.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optim"])
        self.sched.load_state_dict(state["sched"])
