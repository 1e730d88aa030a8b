"""The template explainer: a checkable predicate and a short sentence per latent, from what its store holds.

Deterministic and offline. The evidence is the latent's top activating examples (the store's `n_top` group: the
scorers hold out its quantile examples), the context before them, its decoder x unembedding (promoted and
suppressed tokens) and, where the corpus plants labels, the labels of its top examples. A predicate is evaluated on
rows of the pass (`predicate_scores`), so it is its own simulator: the scorers need no model to read it.

Predicates (JSON):
  {"kind": "label", "labels": [[K, NAME], ...]}: the row's planted label of each kind K is its NAME.
  {"kind": "tokens", "tokens": [ids], "weights": [w], "after": [ids], "within": k}: the row's token is one of
  `tokens` (score: its weight, the share of top examples on it) and, when `after` is not empty, one of `after`
  occurs among the k tokens before it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from workbench.config import Config
from workbench.errors import BadValueError

EXPLAINERS = ("template", "openai")
SCORERS = ("detection", "fuzz", "intervention")
TEMPLATE_MARK = "[template]"  # begins every template sentence, wherever it is shown
LLM_MARK = "[openai]"  # begins every explanation a language model wrote (workbench.features.llm_explain)


@dataclass(frozen=True)
class ExplainConfig(Config):
    error = BadValueError
    drop_unknown = True

    explainer: str = field(default="template", metadata={"choices": EXPLAINERS, "help": "how explanations are made"})
    n_tokens: int = field(default=5, metadata={"min": 1, "help": "most tokens a token predicate lists"})
    min_share: float = field(
        default=0.1, metadata={"min": 0.0, "max": 1.0, "help": "share of top examples a listed token must hold"}
    )
    within: int = field(default=3, metadata={"min": 1, "help": "tokens before the example searched for a cue"})
    cue_share: float = field(
        default=0.8, metadata={"min": 0.0, "max": 1.0, "help": "share of top examples a preceding cue must occur in"}
    )
    label_share: float = field(
        default=0.8,
        metadata={
            "min": 0.0,
            "max": 1.0,
            "help": "share of top examples a planted label must hold to be the predicate",
        },
    )
    label_base: float = field(
        default=0.9,
        metadata={
            "min": 0.0,
            "max": 1.0,
            "help": "a planted label is used only when it covers at most this share of the pass (a text file's one "
            "role, 'word', says nothing)",
        },
    )
    n_promoted: int = field(default=3, metadata={"min": 0, "help": "promoted and suppressed tokens named"})
    n_random: int = field(default=20, metadata={"min": 1, "help": "random non-activating contexts per latent"})
    n_near: int = field(
        default=20, metadata={"min": 0, "help": "near-neighbour non-activating contexts per latent (detection)"}
    )
    neighbours: int = field(default=3, metadata={"min": 1, "help": "decoder neighbours whose top rows give those"})
    pool: int = field(default=4096, metadata={"min": 16, "help": "random rows encoded once for random negatives"})
    chunk: int = field(default=256, metadata={"min": 1, "help": "latents per resumable chunk"})
    steer_prompts: int = field(default=8, metadata={"min": 1, "help": "held-out sequences steered (intervention)"})
    steer_scale: float = field(
        default=1.0, metadata={"min": 0.0, "help": "steering added: scale x the latent's max activation x its decoder"}
    )
    seed: int = field(default=0, metadata={"help": "seed of the negative and false-highlight draws"})
    llm_examples: int = field(
        default=10, metadata={"min": 1, "help": "top examples shown to the language model (--explainer openai)"}
    )
    llm_batch: int = field(default=10, metadata={"min": 1, "help": "contexts per simulation prompt (openai)"})
    llm_logprobs: bool = field(
        default=True, metadata={"help": "ask for log-probabilities of the simulation answers (where offered)"}
    )
    llm_timeout: float = field(default=60.0, metadata={"min": 0.0, "open": "min", "help": "seconds per request"})
    llm_retries: int = field(default=3, metadata={"help": "retries of a failed request (openai)"})


def predicate_scores(pred: dict | None, rows: np.ndarray, meta: dict) -> np.ndarray:
    """The predicate's score on each row of the pass (> 0: it holds); rows < 0 and a missing predicate score 0."""
    rows = np.asarray(rows, np.int64)
    ok = rows >= 0
    r = np.where(ok, rows, 0)
    if pred is None:
        return np.zeros(len(rows))
    if pred["kind"] == "label":
        holds = ok.copy()
        for kind, name in pred["labels"]:
            lab, names = meta["labels"].get(kind, (None, []))
            if lab is None or name not in names:
                return np.zeros(len(rows))
            holds &= lab[r] == names.index(name)
        return holds.astype(np.float64)
    weight = dict(zip(pred["tokens"], pred["weights"]))
    tok = meta["tokens"][r]
    score = np.array([weight.get(int(t), 0.0) for t in tok]) * ok
    if pred["after"]:
        seq, pos = meta["seq"][r], meta["pos"][r]
        cue = np.zeros(len(rows), bool)
        for j in range(1, pred["within"] + 1):
            p = pos - j
            before = meta["sequences"][seq, np.maximum(p, 0)]
            cue |= (p >= 0) & np.isin(before, pred["after"])
        score = score * cue
    return score


def label_rates(meta: dict) -> dict[str, np.ndarray]:
    """Each label kind's share of the pass's rows per value (computed once per pass, kept in meta)."""
    if "label_rates" not in meta:
        meta["label_rates"] = {
            k: np.bincount(lab[lab >= 0], minlength=len(names)) / max(len(lab), 1)
            for k, (lab, names) in meta["labels"].items()
        }
    return meta["label_rates"]


def _label_predicate(top: np.ndarray, meta: dict, cfg: ExplainConfig) -> tuple[dict | None, list[float]]:
    """Every informative planted label (rate <= label_base) that at least label_share of the top rows share, one
    per kind, as a conjunction (kinds in the corpus's order): (predicate or None, each label's share)."""
    labels, shares = [], []
    rates = label_rates(meta)
    for kind, (lab, names) in meta["labels"].items():
        vals = lab[top]
        vals = vals[vals >= 0]
        if not len(vals):
            continue
        v, n = Counter(vals.tolist()).most_common(1)[0]
        if n / len(top) >= cfg.label_share and rates[kind][v] <= cfg.label_base:
            labels.append([kind, names[v]])
            shares.append(n / len(top))
    return ({"kind": "label", "labels": labels} if labels else None), shares


def _token_predicate(top: np.ndarray, meta: dict, cfg: ExplainConfig) -> dict:
    """The top rows' own tokens (by share, at least min_share each), and a cue most of them follow."""
    counts = Counter(meta["tokens"][top].tolist()).most_common(cfg.n_tokens)
    keep = [(t, n / len(top)) for t, n in counts if n / len(top) >= cfg.min_share] or [(counts[0][0], 1 / len(top))]
    seq, pos = meta["seq"][top], meta["pos"][top]
    seen = Counter()
    for s, p in zip(seq, pos):
        seen.update(set(meta["sequences"][s, max(p - cfg.within, 0) : p].tolist()))
    after = [t for t, n in seen.most_common(1) if n / len(top) >= cfg.cue_share]
    return {
        "kind": "tokens",
        "tokens": [int(t) for t, _ in keep],
        "weights": [round(w, 4) for _, w in keep],
        "after": [int(t) for t in after],
        "within": cfg.within,
    }


def _quoted(ids, vocab: list[str]) -> str:
    return ", ".join(repr(vocab[i]) if 0 <= i < len(vocab) else repr(str(i)) for i in ids)


def template_explanation(u: int, store, meta: dict, cfg: ExplainConfig) -> dict:
    """One latent's template explanation: {"predicate", "promoted", "suppressed", "text"} (predicate None when
    the latent never fired in the pass)."""
    top = np.asarray(store.array("ex_rows")[u, : store.config.n_top])
    top = top[top >= 0]
    promoted, suppressed = [], []
    if store.has("logit_ids") and cfg.n_promoted:
        ids = np.asarray(store.array("logit_ids")[u])
        half = len(ids) // 2
        promoted, suppressed = ids[: min(cfg.n_promoted, half)].tolist(), ids[half : half + cfg.n_promoted].tolist()
    out_text = (f"; promotes {_quoted(promoted, store.vocab)}" if promoted else "") + (
        f"; suppresses {_quoted(suppressed, store.vocab)}" if suppressed else ""
    )
    if not len(top):
        pred, text = None, f"{TEMPLATE_MARK} never fired in the pass{out_text}"
    else:
        pred, shares = _label_predicate(top, meta, cfg)
        if pred is not None:
            said = " and ".join(f"{k} {v!r} ({s:.0%})" for (k, v), s in zip(pred["labels"], shares))
            text = f"{TEMPLATE_MARK} fires on {said} of its top examples"
        else:
            pred = _token_predicate(top, meta, cfg)
            cue = f" after {_quoted(pred['after'], store.vocab)}" if pred["after"] else ""
            text = f"{TEMPLATE_MARK} fires on {_quoted(pred['tokens'], store.vocab)}{cue}"
        text += out_text
    return {"predicate": pred, "promoted": promoted, "suppressed": suppressed, "text": text}
