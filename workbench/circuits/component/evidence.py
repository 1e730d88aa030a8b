"""Evidence for what circuit nodes do, read from the model on the query itself: attention patterns and the
heads' previous-token and induction scores (workbench/models/heads.py), each head's and MLP's direct logit
effect, and induction evidence.

Direct logit effect of a node: its output at the last position divided by the final LayerNorm's scale of
this run, times W_U (the unembedding bias left out), so the effects of all nodes plus the embeddings'
and the biases' add up to the logits.

An induction mechanism in a circuit is an edge from a previous-token head into the key input of a later head
with a high induction score.
"""

from __future__ import annotations

import torch

from workbench.circuits import schema
from workbench.circuits.component.types import Circuit
from workbench.models.heads import attention_patterns, induction_targets, pattern_scores, patterns_from_cache


def direct_logit_effects(model, cache) -> dict[str, torch.Tensor]:
    """Per node `a{l}.h{h}` / `m{l}`: its direct effect on every logit [d_vocab] at the last position of a run
    cached with hook_z, hook_mlp_out and ln_final.hook_scale (the module docstring says how)."""
    scale = cache["ln_final.hook_scale"][0, -1] if "ln_final.hook_scale" in cache else torch.ones(1)
    outs = {}
    for layer in range(model.cfg.n_layers):
        z = cache[f"blocks.{layer}.attn.hook_z"][0, -1]  # [H, d_head]
        per_head = torch.einsum("hd,hdm->hm", z, model.W_O[layer])
        for h in range(model.cfg.n_heads):
            outs[schema.head(layer, h)] = per_head[h]
        if f"blocks.{layer}.hook_mlp_out" in cache:
            outs[schema.mlp(layer)] = cache[f"blocks.{layer}.hook_mlp_out"][0, -1]
    return {n: ((v / scale) @ model.W_U).cpu() for n, v in outs.items()}


@torch.no_grad()
def patterns_and_logit_effects(model, tokens: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One forward pass: (attention_patterns, direct_logit_effects) of a prompt."""
    keep = ("hook_pattern", "hook_z", "hook_mlp_out", "ln_final.hook_scale")
    _, cache = model.run_with_cache(tokens.reshape(1, -1).to(model.cfg.device), names_filter=lambda n: n.endswith(keep))
    return patterns_from_cache(model, cache), direct_logit_effects(model, cache)


def _upstream_heads(circuit: Circuit, node: str) -> list[list[str]]:
    """Paths (head, mlp, ..., node) by which circuit heads reach `node` through circuit MLPs only."""
    if node.startswith("a"):
        return [[node]]
    if not node.startswith("m"):
        return []
    paths = []
    for edge in circuit.edges:
        src, dst = edge.split("->")
        if dst == node:
            paths += [p + [node] for p in _upstream_heads(circuit, src)]
    return paths


def induction_evidence(model, circuit: Circuit, top: int = 3) -> dict:
    """Previous-token heads feeding the key of a later head in the circuit (directly or through circuit
    MLPs), with the attention evidence of both heads on the query."""
    tokens = torch.tensor(circuit.query["tokens"])
    str_toks = circuit.query.get("str_tokens") or [str(t) for t in tokens.tolist()]
    patterns = attention_patterns(model, tokens)
    scores = pattern_scores(patterns, tokens)
    g = circuit.graph
    pairs = []
    for edge, s in circuit.edge_scores().items():
        src, dst = edge.split("->")
        if not dst.endswith("<k>"):
            continue
        for path in _upstream_heads(circuit, src):
            for head in g.reader_node(dst):
                pairs.append(
                    {
                        "edge": edge,
                        "score": s,
                        "path": " -> ".join(path + [dst]),
                        "previous_token_head": path[0],
                        "key_reader": head,
                        "previous_token_score": scores[path[0]]["previous_token"],
                        "induction_score": scores[head]["induction"],
                    }
                )
    pairs.sort(key=lambda p: -(p["previous_token_score"] + p["induction_score"]))
    last = len(tokens) - 1

    def attends(head: str, p: int) -> list[tuple[str, float]]:
        layer, h = (int(x) for x in head[1:].split(".h"))
        row = patterns[layer, h, p]
        idx = row.topk(min(top, len(row))).indices.tolist()
        return [(f"{i}:{str_toks[i]}", float(row[i])) for i in idx]

    for pr in pairs:
        pr["key_reader_attends_from_last"] = attends(pr["key_reader"], last)
        pr["previous_token_head_attends_from_last"] = attends(pr["previous_token_head"], last)
    uniform = float(torch.tensor([1.0 / (p + 1) for p in range(1, len(tokens))]).mean())
    return {
        "pairs": pairs,
        "head_scores": scores,
        "induction_targets": induction_targets(tokens),
        "str_tokens": str_toks,
        "uniform_previous_token": uniform,
    }
