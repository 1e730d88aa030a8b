"""Writer outputs and reader inputs of the graph, read from a TransformerLens model with hooks.

Head outputs are computed here from `hook_z` and W_O (z_h @ W_O[h]) instead of switching on
`use_attn_result`, so attribution keeps the model's own memory footprint. Reader inputs need the
split q/k/v inputs only when they are patched (exact evaluation), via `flags`.
"""

from __future__ import annotations

import contextlib

import torch

from workbench.circuits.component.graph import Graph
from workbench.errors import BadValueError


@contextlib.contextmanager
def flags(model, **values):
    """Temporarily set TransformerLens config flags (restored even on error)."""
    old = {k: getattr(model.cfg, k) for k in values}
    try:
        for k, v in values.items():
            setattr(model.cfg, k, v)
        yield
    finally:
        for k, v in old.items():
            setattr(model.cfg, k, v)


def writer_slices(graph: Graph) -> dict[str, slice]:
    """Hook name -> slice of `graph.writers` it produces."""
    out = {"blocks.0.hook_resid_pre": slice(0, 1)}
    per = graph.n_heads + (0 if graph.attn_only else 1)
    for layer in range(graph.n_layers):
        start = 1 + layer * per
        out[f"blocks.{layer}.attn.hook_z"] = slice(start, start + graph.n_heads)
        if not graph.attn_only:
            out[f"blocks.{layer}.hook_mlp_out"] = slice(start + graph.n_heads, start + per)
    return out


def writer_values(model, name: str, act: torch.Tensor) -> torch.Tensor:
    """A writer hook's activation as [batch, n_writers_here, pos, d_model]."""
    if name.endswith("hook_z"):
        layer = int(name.split(".")[1])
        return torch.einsum("bphe,hed->bhpd", act, model.blocks[layer].attn.W_O)
    return act.unsqueeze(1)


@torch.no_grad()
def collect_writers(model, graph: Graph, tokens: torch.Tensor, return_resid: bool = False):
    """Writer outputs of a forward pass: [batch, n_writers, pos, d_model] (and the final residual)."""
    tokens = tokens.reshape(-1, tokens.shape[-1]).to(model.cfg.device)
    out = torch.empty(
        tokens.shape[0],
        len(graph.writers),
        tokens.shape[1],
        graph.d_model,
        dtype=model.cfg.dtype,
        device=model.cfg.device,
    )
    slices = writer_slices(graph)

    def store(act, hook):
        out[:, slices[hook.name]] = writer_values(model, hook.name, act)

    resid = model.run_with_hooks(tokens, fwd_hooks=[(n, store) for n in slices], stop_at_layer=graph.n_layers)
    return (out, resid) if return_resid else out


def answer_logits(model, resid: torch.Tensor) -> torch.Tensor:
    """Logits at the last position from the final residual stream [batch, pos, d_model], as the model's own
    forward pass finishes: the final norm when it has one (normalization_type=None has none), the unembedding,
    the logit soft-cap when configured."""
    from transformer_lens.utilities import apply_softcap

    x = resid[:, -1:]
    if model.cfg.normalization_type is not None:
        x = model.ln_final(x)
    return apply_softcap(model.unembed(x), model.cfg.output_logits_soft_cap)[:, 0]


def writer_means(
    model, source, graph: Graph | None = None, batch_size: int = 16, max_sequences: int = 256, split: str = "train"
) -> torch.Tensor:
    """Mean output of every writer over a token source: [n_writers, d_model] (for mean ablation).

    `source`: a workbench ActivationCache (its stored token sequences are re-run), a [N, ctx]
    token tensor, or a list of strings. Averaged over all positions of all sequences.
    """
    graph = graph or Graph.from_model(model)
    if hasattr(source, "sequences") and hasattr(source, "manifest"):
        tokens = torch.as_tensor(source.sequences(split)[:max_sequences])
    elif isinstance(source, (list, tuple)) and source and isinstance(source[0], str):
        tokens = model.to_tokens(list(source)[:max_sequences])
    else:
        tokens = torch.as_tensor(source)[:max_sequences]
    if tokens.ndim != 2 or tokens.shape[0] == 0:
        raise BadValueError(
            f"mean ablation needs a non-empty [n_sequences, ctx] token source, got shape {tuple(tokens.shape)}"
        )
    total = torch.zeros(len(graph.writers), graph.d_model, dtype=torch.float64, device=model.cfg.device)
    count = 0
    for i in range(0, tokens.shape[0], batch_size):
        z = collect_writers(model, graph, tokens[i : i + batch_size])
        total += z.double().sum(dim=(0, 2))
        count += z.shape[0] * z.shape[2]
    return (total / count).to(model.cfg.dtype)
