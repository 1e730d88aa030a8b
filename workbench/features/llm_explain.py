"""`--explainer openai`: a language model explains each latent, and its explanation is scored by simulation through
the same client, with the template path's score definitions (workbench.features.scoring).

Explaining: the model reads the latent's top `llm_examples` examples, the tokens where it fires marked <<like
this>>, and answers one short phrase. Scoring (delphi's simulations): *detection*: the model is shown the scorer's
contexts (held-out activating rows, random and near-neighbour non-activating ones, in a seeded random order,
`llm_batch` to a prompt), each the window around its row, and says which the feature fires on; *fuzzing*: it is
shown each drawn window with its highlights (true or false, scoring.fuzz_draws) and says whether they are tokens
the feature fires on (every highlight of a window gets that one judgement). An answer is a list of 0/1; where the
server offers log-probabilities, each item's score is P("1"), else the 0/1 itself, and "holds" is P("1") > 0.5. A
list of the wrong length is one more failure, counted (`unanswered`) and scored 0.
"""

from __future__ import annotations

import math
import re

import numpy as np

from workbench.features import compute
from workbench.features.explain import LLM_MARK, ExplainConfig
from workbench.features.llm import Answer, Client
from workbench.features.scoring import Contexts, detection_metrics, fuzz_draws, fuzz_result

SYSTEM = "You are studying the latents of a sparse autoencoder trained on a language model's activations."
EXPLAIN = (
    "Below are text examples where one latent is active; the tokens where it fires are marked <<like this>>.\n\n"
    "{examples}\n\nIn one short phrase, say what the latent fires on. Answer with the phrase only."
)
DETECT = (
    'A latent is explained as: "{explanation}".\n\n{examples}\n\nFor each example, answer 1 if the latent fires on '
    "it and 0 if not. Answer with a list of {n} numbers only, e.g. [{e}]."
)
FUZZ = (
    'A latent is explained as: "{explanation}".\nIn each example below some tokens are marked <<like this>>.\n\n'
    "{examples}\n\nFor each example, answer 1 if the marked tokens are ones this latent fires on and 0 if not. "
    "Answer with a list of {n} numbers only, e.g. [{e}]."
)


def _say(toks, vocab: list[str], marked=()) -> str:
    """A window's text (positions outside the sequence dropped), the `marked` positions wrapped in << >>."""
    out = []
    for i, t in enumerate(toks):
        if t < 0:
            continue
        word = vocab[t] if t < len(vocab) else str(t)
        out.append(f"<<{word}>>" if i in marked else word)
    return "".join(out)


def _windows(ctx: Contexts, rows: np.ndarray) -> np.ndarray:
    m, c = ctx.meta, ctx.store.config
    return compute.windows(np.asarray(rows), m["seq"], m["pos"], m["sequences"], m["seqpos_row"], c.left, c.right)[0]


def _numbered(texts: list[str]) -> str:
    return "\n".join(f"Example {i + 1}: {t}" for i, t in enumerate(texts))


def _ask(client: Client, prompt: str, cfg: ExplainConfig, max_tokens: int = 128) -> Answer:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
    return client.chat(messages, max_tokens=max_tokens, logprobs=cfg.llm_logprobs)


def llm_explanation(u: int, ctx: Contexts, client: Client, cfg: ExplainConfig) -> str:
    """The model's phrase for latent u, marked as a model's words ([openai])."""
    store = ctx.store
    top = np.asarray(store.array("ex_rows")[u, : min(store.config.n_top, cfg.llm_examples)])
    if not (top >= 0).any():
        return f"{LLM_MARK} never fired in the pass"
    toks = _windows(ctx, top[top >= 0])
    acts = np.asarray(store.array("ctx_acts")[u, : len(top)])[top >= 0]
    texts = [_say(t, store.vocab, set(np.flatnonzero(a > 0).tolist())) for t, a in zip(toks, acts)]
    answer = _ask(client, EXPLAIN.format(examples=_numbered(texts)), cfg, 64).text.strip()
    line = answer.splitlines()[0].strip().strip('"') if answer else ""
    return f"{LLM_MARK} {line or '(no answer)'}"


def answers(ans: Answer, n: int) -> np.ndarray | None:
    """The n items of a 0/1 list answer as P("1") (from log-probabilities where given, else 0/1); None when the
    answer does not hold n of them."""
    said = re.findall(r"[01]", ans.text.split("[", 1)[-1].split("]", 1)[0])
    if len(said) != n:
        return None
    digits = [x for x in (ans.logprobs or []) if x.get("token", "").strip() in ("0", "1")]
    if len(digits) != n:
        return np.array([float(x) for x in said])
    out = []
    for x in digits:
        tops = {t["token"].strip(): math.exp(t["logprob"]) for t in x.get("top_logprobs") or []}
        tops.setdefault(x["token"].strip(), math.exp(x["logprob"]))
        p1, p0 = tops.get("1", 0.0), tops.get("0", 0.0)
        out.append(p1 / (p1 + p0) if p1 + p0 > 0 else float(x["token"].strip() == "1"))
    return np.array(out)


def simulate(texts: list[str], template: str, explanation: str, client: Client, cfg: ExplainConfig, failed: list):
    """P("1") of each text under the explanation, `llm_batch` to a prompt; a batch answered badly scores 0."""
    out = np.zeros(len(texts))
    for a in range(0, len(texts), cfg.llm_batch):
        part = texts[a : a + cfg.llm_batch]
        n = len(part)
        prompt = template.format(
            explanation=explanation, examples=_numbered(part), n=n, e=", ".join("01" * n)[: 3 * n - 2]
        )
        got = answers(_ask(client, prompt, cfg, 8 + 4 * n), n)
        if got is None:
            failed.append(n)
        else:
            out[a : a + n] = got
    return out


def llm_scores(u: int, text: str, ctx: Contexts, near: np.ndarray, client: Client, cfg, scorers, rng) -> dict:
    """{scorer: metrics} of a model's explanation, by simulation; each has `unanswered` (items answered badly)."""
    out, idx = {}, ctx.heldout(u)
    vocab, text = ctx.store.vocab, text.removeprefix(LLM_MARK).strip()  # the model reads the phrase, not the mark
    if "detection" in scorers:
        groups = [np.asarray(ctx.store.array("ex_rows")[u])[idx], ctx.random_negatives(u), near]
        rows = np.concatenate(groups)
        order = rng.permutation(len(rows))
        failed: list = []
        texts = [_say(t, vocab) for t in _windows(ctx, rows[order])] if len(rows) else []
        p = np.empty(len(rows))
        p[order] = simulate(texts, DETECT, text, client, cfg, failed) - 0.5
        cut = np.cumsum([len(g) for g in groups])[:-1]
        out["detection"] = {**detection_metrics(*np.split(p, cut)), "unanswered": sum(failed)}
    if "fuzz" in scorers:
        draws = fuzz_draws(*ctx.windows(u, idx), rng)
        failed = []
        texts = []
        for _, r, pick in draws:
            toks = np.where(r >= 0, ctx.meta["tokens"][np.maximum(r, 0)], -1)
            texts.append(_say(toks, vocab, set(pick.tolist())))
        p = simulate(texts, FUZZ, text, client, cfg, failed) if texts else np.zeros(0)
        judged = [(t, np.full(len(pick), q > 0.5)) for (t, _, pick), q in zip(draws, p)]
        out["fuzz"] = {**fuzz_result(judged), "unanswered": sum(failed)}
    return out
