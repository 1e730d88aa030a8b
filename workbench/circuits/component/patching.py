"""Exact circuit evaluation: run the model with every edge outside the circuit patched.

Each reader's input becomes its actual input plus, for every writer u whose edge into it is not in
the circuit, (z_u(ablated) - z_u(this run)). Writers inside the circuit pass their value from the
*patched* run, so the effect of removed edges propagates (the EAP-IG / MIB semantics). With all
edges kept the run is the clean model; with none kept it is the ablated (counterfactual) model.
Several circuits are evaluated at once, one per batch row.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.circuits.component.graph import Graph
from workbench.circuits.component.hooks import answer_logits, collect_writers, flags, writer_slices, writer_values
from workbench.circuits.config import ABLATIONS, check_ablation  # noqa: F401  (ABLATIONS re-exported)
from workbench.circuits.inputs import QueryInput, align
from workbench.errors import BadValueError


@dataclass
class Setup:
    """What exact evaluation needs for one query: clean tokens and the ablated value of every writer."""

    graph: Graph
    tokens: torch.Tensor  # [pos]
    z_clean: torch.Tensor  # [n_writers, pos, d_model]
    z_abl: torch.Tensor  # [n_writers, pos, d_model], aligned to the clean positions
    clean_logits: torch.Tensor  # [vocab] at the answer position
    ablation: str
    alignment: torch.Tensor | None = None  # counterfactual position per clean position (-1: none)


def make_setup(
    model, graph: Graph, q: QueryInput, ablation: str = "counterfactual", means: torch.Tensor | None = None
) -> Setup:
    check_ablation(ablation, q, means)
    z, resid = collect_writers(model, graph, q.tokens, return_resid=True)
    z_clean, clean_logits = z[0], answer_logits(model, resid)[0]
    idx = None
    if ablation == "counterfactual":
        z_cf = collect_writers(model, graph, q.cf_tokens)[0]
        idx = align(len(q.tokens), len(q.cf_tokens), anchor_first=bool(q.tokens[0] == q.cf_tokens[0]))
        if torch.equal(idx, torch.arange(len(idx))):
            z_abl = z_cf
        else:
            keep = idx >= 0
            z_abl = z_clean.clone()
            z_abl[:, keep] = z_cf[:, idx[keep]]
        del z_cf
    elif ablation == "mean":
        if tuple(means.shape) != (len(graph.writers), graph.d_model):
            raise BadValueError(
                f"means must have shape [n_writers={len(graph.writers)}, d_model={graph.d_model}], "
                f"got {tuple(means.shape)}"
            )
        z_abl = means.to(z_clean)[:, None, :].expand_as(z_clean).clone()
    else:
        z_abl = torch.zeros_like(z_clean)
    return Setup(graph, q.tokens, z_clean, z_abl, clean_logits, ablation, idx)


def _reader_hooks(graph: Graph):
    """(hook name, reader slice, writer prefix length) for every reader hook point."""
    per = graph.n_heads + (0 if graph.attn_only else 1)
    out = []
    for layer in range(graph.n_layers):
        n_attn = 1 + layer * per
        for kind in "qkv":
            out.append((f"blocks.{layer}.hook_{kind}_input", graph.reader_slice(layer, kind), n_attn))
        if not graph.attn_only:
            n_mlp = n_attn + (0 if graph.parallel_attn_mlp else graph.n_heads)
            out.append((f"blocks.{layer}.hook_mlp_in", graph.reader_slice(layer, "mlp"), n_mlp))
    last = len(graph.readers) - 1
    out.append((f"blocks.{graph.n_layers - 1}.hook_resid_post", slice(last, last + 1), len(graph.writers)))
    return out


def _group(graph: Graph, sl: slice, n: int, readers) -> slice:
    """The contiguous reader range sharing this reader's writer prefix (a layer's q, k and v)."""
    same = [r for _, r, m in readers if m == n]
    return slice(min(r.start for r in same), max(r.stop for r in same))


@torch.inference_mode()
def evaluate(model, setup: Setup, in_circuit: torch.Tensor, max_batch: int = 64) -> torch.Tensor:
    """Answer-position logits [n_circuits, vocab] for circuits given as bool edge masks [n_circuits, n_edges]."""
    in_circuit = torch.as_tensor(in_circuit, dtype=torch.bool).reshape(-1, setup.graph.n_edges)
    return torch.cat(
        [_evaluate(model, setup, in_circuit[i : i + max_batch]) for i in range(0, len(in_circuit), max_batch)]
    )


def _evaluate(model, setup: Setup, in_circuit: torch.Tensor) -> torch.Tensor:
    graph, device = setup.graph, model.cfg.device
    dtype = model.cfg.dtype
    b = in_circuit.shape[0]
    removed = graph.edges_to_matrix((~in_circuit).to(device=device, dtype=dtype))  # [b, W, R]
    z_abl = setup.z_abl.to(device)
    delta = torch.empty(b, *z_abl.shape, dtype=dtype, device=device)  # [b, W, pos, d]
    w_slices = writer_slices(graph)

    def store(act, hook):
        sl = w_slices[hook.name]
        delta[:, sl] = z_abl[sl] - writer_values(model, hook.name, act)

    corr = {}

    def patch(name, sl, n, group):
        def fn(act, hook):
            if name not in corr:  # one contraction for all of a layer's q/k/v readers (same writers)
                c = torch.einsum("bwpd,bwr->bprd", delta[:, :n], removed[:, :n, group])
                start = 0
                for nm, s in siblings[group.start]:
                    corr[nm] = c[:, :, start : start + s.stop - s.start]
                    start += s.stop - s.start
            c = corr.pop(name)
            return act + (c if act.ndim == 4 else c[:, :, 0])

        return fn

    readers = _reader_hooks(graph)
    siblings: dict[int, list] = {}
    hooks = [(name, store) for name in w_slices]
    for name, sl, n in readers:
        group = _group(graph, sl, n, readers)
        siblings.setdefault(group.start, []).append((name, sl))
        hooks.append((name, patch(name, sl, n, group)))
    tokens = setup.tokens.to(device)[None].expand(b, -1)
    with flags(model, use_split_qkv_input=True, use_hook_mlp_in=True):
        resid = model.run_with_hooks(tokens, fwd_hooks=hooks, stop_at_layer=graph.n_layers)
    return answer_logits(model, resid)
