"""The induction mechanism of a base model and its sparse-attention version, read as single-key patterns.

The heads are found the standard way: TransformerLens `detect_head` previous-token and induction scores on
random vocabulary words repeated twice (the model card's sequences, `workbench.models.card.head_scores`).
A head is a previous-token (induction) head of the pair when its score is at least `relative_threshold`
times the top score of that kind in the base or in the sparse model.

For each such head, on the rows of the repeated half (query q = half + 1 .. 2 half, BOS at 0): the share
of rows with exactly one open key and where that key points: the previous token (q - 1), the induction
target (q - half + 1, the token after the same token in the first copy, detect_head's target; a word that
also occurs elsewhere in the span does not move it), or elsewhere; and, for every row, where the key with
the largest attention weight points. "Open" is the gate (blocks.L.attn.hook_gate)
of a gated model; in an ungated model every causal key is open, so none of these rows has a single key.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from workbench.config import Config

KINDS = ("previous_token_head", "induction_head")
WHERE = ("previous", "induction", "other")  # where a key points, relative to the query


@dataclass
class MechanismConfig(Config):
    """How the heads are found and how many sequences are read (saved with the result)."""

    sequences: int = field(default=20, metadata={"min": 1})  # repeated random sequences (the model card's 20)
    seed: int = 0
    # a head of a kind: score >= this x the top score of the kind in either model
    relative_threshold: float = field(default=0.5, metadata={"min": 0, "max": 1, "open": "min"})


def key_destinations(open_: torch.Tensor, weights: torch.Tensor, targets: dict[int, int]) -> dict[str, torch.Tensor]:
    """Counts per head [L, H] over the rows with an induction target (query position -> target position).

    open_ [L, H, q, k] bool: the open keys; weights [L, H, q, k]: the attention pattern. Keys: rows,
    empty (no open key), single (exactly one), single_<where> (where that one key points), top_<where>
    (where the largest weight of a non-empty row points), open_keys (summed open keys).
    """
    q = torch.tensor(sorted(targets), dtype=torch.long)
    where = {"previous": q - 1, "induction": torch.tensor([targets[int(i)] for i in q], dtype=torch.long)}
    rows_open, rows_w = open_[:, :, q].bool(), weights[:, :, q]
    keys = rows_open.sum(-1)
    single, top = keys == 1, rows_w.argmax(-1)
    first_open = rows_open.int().argmax(-1)
    written = rows_w.sum(-1) > 0
    out = {
        "rows": torch.full(keys.shape[:2], float(len(q))),
        "empty": (keys == 0).sum(-1).double(),
        "single": single.sum(-1).double(),
        "open_keys": keys.sum(-1).double(),
    }
    single_left, top_left = single.clone(), written.clone()
    for name, pos in where.items():
        out[f"single_{name}"] = (single & (first_open == pos)).sum(-1).double()
        out[f"top_{name}"] = (written & (top == pos)).sum(-1).double()
        single_left &= first_open != pos
        top_left &= top != pos
    out["single_other"], out["top_other"] = single_left.sum(-1).double(), top_left.sum(-1).double()
    out["written"] = written.sum(-1).double()
    return out


@torch.no_grad()
def head_rows(model, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """key_destinations summed over repeated sequences [n, 1 + 2 half] (BOS, span, span) of one model."""
    from workbench.attention.gates import is_gated

    L, gated = model.cfg.n_layers, is_gated(model)
    half = (tokens.shape[1] - 1) // 2
    targets = {q: q - half + 1 for q in range(half + 1, 2 * half + 1)}
    names = [f"blocks.{i}.attn.hook_pattern" for i in range(L)] + [f"blocks.{i}.attn.hook_gate" for i in range(L)]
    was_training = model.training
    model.eval()
    total: dict[str, torch.Tensor] = {}
    try:
        for seq in tokens:
            _, cache = model.run_with_cache(seq[None].to(model.cfg.device), names_filter=names)
            weights = torch.stack([cache[f"blocks.{i}.attn.hook_pattern"][0] for i in range(L)]).cpu()
            if gated:
                open_ = torch.stack([cache[f"blocks.{i}.attn.hook_gate"][0] for i in range(L)]).cpu() > 0
            else:
                n = seq.shape[-1]
                open_ = torch.ones(n, n, dtype=torch.bool).tril().expand_as(weights)
            for k, v in key_destinations(open_, weights, targets).items():
                total[k] = total.get(k, 0) + v
    finally:
        model.train(was_training)
    return total


def chosen_heads(scores: dict[str, dict[str, list[list[float]]]], relative: float) -> dict[str, list[str]]:
    """Per kind, the heads 'aL.hH' whose score in either model is >= relative x that model's top score."""
    out = {}
    for kind in KINDS:
        picked = set()
        for side in scores.values():
            s = torch.tensor(side[kind])
            for layer, h in (s >= relative * s.max()).nonzero().tolist():
                picked.add((layer, h))
        out[kind] = [f"a{layer}.h{h}" for layer, h in sorted(picked)]
    return out


def _shares(c: dict[str, torch.Tensor], layer: int, h: int) -> dict[str, float]:
    rows, single, written = (float(c[k][layer, h]) for k in ("rows", "single", "written"))
    res = {
        "rows": int(rows),
        "open_keys": float(c["open_keys"][layer, h]) / rows,
        "empty": float(c["empty"][layer, h]) / rows,
        "single": single / rows,
    }
    for w in WHERE:  # where the single key points, as a share of the single-key rows
        res[f"single_{w}"] = float(c[f"single_{w}"][layer, h]) / single if single else None
        res[f"top_{w}"] = float(c[f"top_{w}"][layer, h]) / written if written else None
    return res


def induction_mechanism(base, sparse, cfg: MechanismConfig | None = None) -> dict:
    """Scores of both models, the chosen heads, and each chosen head's row figures in both (module doc)."""
    from workbench.models.card import head_scores, repeated_random_text
    from workbench.provenance import model_id

    cfg = cfg or MechanismConfig()
    models = {"base": base, "sparse": sparse}
    scores = {side: head_scores(m, cfg.sequences, cfg.seed) for side, m in models.items()}
    heads = chosen_heads(scores, cfg.relative_threshold)
    tokens = base.to_tokens(repeated_random_text(base.cfg.n_ctx, cfg.sequences, cfg.seed))
    counts = {side: head_rows(m, tokens) for side, m in models.items()}
    per_head = {}
    for name in sorted({n for names in heads.values() for n in names}):
        layer, h = (int(x) for x in name[1:].split(".h"))
        per_head[name] = {
            "kinds": [k for k in KINDS if name in heads[k]],
            "scores": {side: {k: scores[side][k][layer][h] for k in KINDS} for side in models},
            **{side: _shares(counts[side], layer, h) for side in models},
        }
    return {
        "config": cfg.to_dict(),
        "base_model": model_id(base),
        "sparse_model": model_id(sparse),
        "ctx_len": int(tokens.shape[1]),
        "scores": scores,
        "heads": heads,
        "per_head": per_head,
    }


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def format_mechanism(res: dict) -> list[str]:
    """Markdown table lines: one row per chosen head, base -> sparse."""
    kind_name = {"previous_token_head": "previous-token", "induction_head": "induction"}
    head = (
        "| head | kind | detect_head score (prev / ind), base -> sparse | open keys / row | rows with 0 / 1 open key | "
        "that key on: previous / induction target / other (sparse) | largest weight on: previous / induction / other |"
    )
    lines = [head, "|" + "---|" * 7]
    for name, r in res["per_head"].items():
        b, s = r["base"], r["sparse"]
        sc = " -> ".join(
            f"{r['scores'][x]['previous_token_head']:.2f} / {r['scores'][x]['induction_head']:.2f}"
            for x in ("base", "sparse")
        )
        where = " / ".join(_pct(s[f"single_{w}"]) for w in WHERE)
        top = " -> ".join(" / ".join(_pct(x[f"top_{w}"]) for w in WHERE) for x in (b, s))
        kinds = ", ".join(kind_name[k] for k in r["kinds"])
        lines.append(
            f"| {name} | {kinds} | {sc} | {b['open_keys']:.1f} -> {s['open_keys']:.2f} | {_pct(b['empty'])} / "
            f"{_pct(b['single'])} -> {_pct(s['empty'])} / {_pct(s['single'])} | {where} | {top} |"
        )
    return lines
