"""What every side of a benchmark shares, so the sides differ only in the library under test.

Imported by the peer scripts in their own virtual environments, so it needs nothing but numpy,
torch and the standard library. A peer script reads a JSON config (path in argv[1]) and prints one
JSON line of results (the last line of its stdout).
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import sys
import time
from importlib import metadata

import numpy as np
import torch


def load_config() -> dict:
    with open(sys.argv[1]) as f:
        return json.load(f)


def _status_mb(field: str) -> float | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def reset_peak() -> float:
    """Start a new peak-RSS window (Linux: clear_refs 5 resets VmHWM); returns the RSS now, in MB.

    Without the reset, a transient peak during imports or data loading would hide the measured part.
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    now = _status_mb("VmRSS")
    return now if now is not None else rss_mb()


def rss_mb() -> float:
    """Peak resident set (MB) since the last reset_peak() (VmHWM), else since the process started."""
    hwm = _status_mb("VmHWM")
    return hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def versions(*packages: str) -> dict:
    out = {"python": platform.python_version(), "torch": torch.__version__, "threads": torch.get_num_threads()}
    for p in packages:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = None
    return out


def emit(result: dict) -> None:
    print(json.dumps(result), flush=True)


def median(xs) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


# ---- SAE benchmarks ----------------------------------------------------------------------------
class SAEData:
    """The shared activations: every side sees the same batches in the same order.

    cfg["d_target"] (transcoders): each row is [input | target], the target its last d_target columns.
    """

    def __init__(self, cfg: dict):
        self.train = np.load(cfg["train"])  # loaded whole so the baseline RSS already holds it
        self.heldout = torch.from_numpy(np.load(cfg["heldout"]))
        self.d_target = cfg.get("d_target")
        self.batch_size, self.n_steps = cfg["batch_size"], cfg["n_steps"]
        n = self.train.shape[0]
        rng = np.random.default_rng(cfg["seed"])
        need = self.batch_size * self.n_steps
        reps = -(-need // n)
        self.order = np.concatenate([rng.permutation(n) for _ in range(reps)])[:need]

    @property
    def d_in(self) -> int:
        return self.train.shape[1] - (self.d_target or 0)

    def split(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(input, target) of [input | target] rows; an SAE's target is its input."""
        return (rows[:, : self.d_in], rows[:, self.d_in :]) if self.d_target else (rows, rows)

    def batch(self, step: int) -> torch.Tensor:
        idx = np.sort(self.order[step * self.batch_size : (step + 1) * self.batch_size])
        return torch.from_numpy(self.train[idx])


@torch.no_grad()
def fvu(reconstruct, x: torch.Tensor, y: torch.Tensor | None = None, chunk: int = 4096) -> float:
    """Sum ||y - reconstruct(x)||^2 / sum ||y - mean(y)||^2 over the held-out rows (an SAE's y is x)."""
    y = x if y is None else y
    num = 0.0
    for i in range(0, x.shape[0], chunk):
        num += float((y[i : i + chunk] - reconstruct(x[i : i + chunk]).float()).pow(2).sum())
    den = float((y - y.mean(0)).pow(2).sum())
    return num / den


def run_sae(
    cfg: dict,
    side: str,
    step,
    reconstruct,
    packages=(),
    extra: dict | None = None,
    base_rss: float | None = None,
    before_step=None,
    n_dead=None,
) -> dict:
    """Time `step(x, i)` per batch, then the held-out FVU (a transcoder's: of its target, from
    `reconstruct(input)`); peak memory above the loaded-data baseline.

    base_rss: the RSS after the data was loaded and before the SAE existed (the SAE's weights and
    optimiser state count as training memory); the peak is VmHWM since then.
    before_step(x, i): called untimed before each step (the workbench times its reference matmul
    there, so the two are measured under the same load).
    n_dead(): the library's own count of dead latents, read untimed before each step: AuxK works
    on the steps where it is above 0.
    """
    data = cfg["_data"]
    times, dead = [], []
    for i in range(data.n_steps):
        x = data.batch(i)
        if n_dead is not None:
            dead.append(int(n_dead()))
        if before_step is not None:
            before_step(x, i)
        t0 = time.perf_counter()
        step(x, i)
        times.append(time.perf_counter() - t0)
    peak = rss_mb()
    warm = cfg.get("warmup_steps", 2)
    step_s = median(times[warm:])
    out = {
        "side": side,
        "d_in": data.d_in,
        "d_target": data.d_target,
        "n_latents": cfg["expansion"] * data.d_in,
        "k": cfg["k"],
        "batch_size": data.batch_size,
        "n_steps": data.n_steps,
        "tokens": data.batch_size * data.n_steps,
        "step_s_median": step_s,
        "step_s": times,
        "tokens_per_s": data.batch_size / step_s,
        "fvu": fvu(reconstruct, *data.split(data.heldout)),
        "rss_base_mb": base_rss,
        "rss_peak_mb": peak,
        "rss_train_mb": peak - base_rss if base_rss is not None else None,
        "versions": versions(*packages),
    }
    if dead:
        n = out["n_latents"]
        out["dead_frac"] = [c / n for c in dead]
        out["auxk_steps"] = sum(c > 0 for c in dead)
        out["dead_frac_timed"] = sum(dead[warm:]) / max(1, len(dead[warm:])) / n  # mean over the timed steps
    out.update(extra or {})
    return out


def sae_setup() -> dict:
    """Read the config, fix the seed, load the data; returns cfg with '_data' and '_base_rss'."""
    cfg = load_config()
    torch.manual_seed(cfg["seed"])
    cfg["_data"] = SAEData(cfg)
    cfg["_base_rss"] = reset_peak()
    return cfg


# ---- circuit benchmarks ------------------------------------------------------------------------
def load_model(model_dir: str):
    """A HookedTransformer from config.json + model.safetensors (the workbench's saved-model layout), eval mode.

    An older TransformerLens (2.x, which SAEDashboard requires) lacks some config fields the workbench's
    3.x saves; they are dropped only while they switch off what 2.x has not got, buffers saved in another
    shape are the model's own, and strict loading of every weight catches any other difference."""
    import dataclasses

    from safetensors.torch import load_file
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)["hooked_transformer_config"]
    known = {f.name for f in dataclasses.fields(HookedTransformerConfig)}
    unknown = {k: v for k, v in cfg.items() if k not in known}
    yarn_off = not cfg.get("use_yarn_rope")  # the yarn_* numbers mean nothing while YaRN is off
    used = {
        k: v
        for k, v in unknown.items()
        if not (
            v in (None, False) or (k == "rotary_scaling_factor" and v == 1.0) or (k.startswith("yarn_") and yarn_off)
        )
    }
    if used:
        raise ValueError(f"this TransformerLens lacks config fields the model uses: {used}")
    cfg = {k: v for k, v in cfg.items() if k in known}
    model = HookedTransformer(HookedTransformerConfig(**{**cfg, "device": "cpu"}), move_to_device=False)
    state = load_file(os.path.join(model_dir, "model.safetensors"))
    own = dict(model.named_buffers())  # derived from the config (causal mask, IGNORE): 3.x saves the mask empty
    state.update({k: v for k, v in own.items() if k in state and state[k].shape != v.shape})
    model.load_state_dict(state, strict=True)
    return model.eval()


def load_prompts(path: str) -> list[dict]:
    """[{tokens, cf_tokens, answer, wrong, name}] as token ids."""
    with open(path) as f:
        return json.load(f)


def timed(fn, repeats: int, warmup: int = 1) -> tuple[list[float], object]:
    """Wall times of `repeats` calls after `warmup` untimed calls, and the last result."""
    out = None
    for _ in range(warmup):
        out = fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return times, out
