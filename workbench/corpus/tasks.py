"""Task queries: prompts with known answers and same-length counterfactuals.

Task families (each prompt has a same-length counterfactual and single-token correct/wrong answers):
  ioi           "When Mary and John went to the park , John gave a ball to" -> Mary (wrong: John)
  induction     a random span, then its repeat cut short                     -> the next span word
  greater_than  "the count went from 34 to"                                  -> a number above 34
  addition      "2 3 plus 4 5 equals"                                        -> 6 (the sum's first digit)
  facts         "Zorvan lives in"                                            -> Kelmor (a fixed fact)

Held-out split: every family reserves combinations that training text never contains, decided by
a fixed rule on the query's variables (`is_heldout`), so evaluation on split="heldout" measures
generalisation, not recall:
  ioi           one whole template, and in the others 1 in 6 (template, name pair) combinations
  induction     1 in 8 spans (by a hash of the span's words)
  greater_than  a third of the start numbers in each template (a different third per template)
  addition      1 in 10 operand pairs: the model must add digits it has never seen together
  facts         one of the three templates of every (entity, attribute): the fact is seen in training
                only in the other two phrasings
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field, replace

from workbench.corpus.base import check_split
from workbench.corpus.vocab import ATTRIBUTES, ENTITIES, FACTS, INDUCTION_POOL, NAMES, NOUNS, OBJECTS, PLACES, digits
from workbench.errors import BadValueError


@dataclass(frozen=True)
class Query:
    """One task prompt with its counterfactual: the unit of circuit discovery and task accuracy."""

    task: str
    prompt: str
    answer: str
    wrong: str
    counterfactual: str
    # the sampled variables, so paraphrases can keep what defines the answer and resample the rest
    params: dict = field(default_factory=dict, compare=False)


IOI_TEMPLATES = (
    "When {A} and {B} went to the {place} , {S} gave a {obj} to",
    "Then , {A} and {B} had a long argument . Afterwards {S} said to",
    "While {A} and {B} were working at the {place} , {S} decided to give a {obj} to",
    "After lunch , {A} and {B} went to the {place} . {S} handed the {obj} to",
    "Later , {A} and {B} walked to the {place} . {S} threw the {obj} to",
    "{A} and {B} went to the {place} . Then {S} gave the {obj} to",
    "At the {place} , {A} and {B} found a {obj} . {S} gave it to",
    "{A} met {B} at the {place} , and {S} handed a {obj} to",
    "When {A} and {B} were at the {place} , {S} threw a {obj} to",
    "One day {A} and {B} walked home . {S} said to",
    "After {A} and {B} had lunch at the {place} , {S} sent the {obj} to",
    "Once {A} and {B} met at the {place} , {S} sent a {obj} to",  # held out entirely
)
GT_TEMPLATES = ("the count went from {x} to", "the {noun} lasted from year {x} to year", "the price rose from {x} to")
ADD_TEMPLATES = ("{a} plus {b} equals", "the sum of {a} and {b} is")
FACT_TEMPLATES = {
    "city": ("{e} lives in", "{e} has a house in", "the home of {e} is in"),
    "color": ("{e} likes the color", "the favorite color of {e} is", "{e} always wears"),
    "job": ("{e} works as a", "by trade {e} is a", "{e} earns a living as a"),
}


def _ioi(rng: random.Random, p: dict | None = None) -> Query:
    p = dict(p or {})
    if "A" not in p:
        a, b = rng.sample(NAMES, 2)
        p.update(A=a, B=b, s_first=rng.random() < 0.5)
    p.setdefault("C", rng.choice([n for n in NAMES if n not in (p["A"], p["B"])]))
    p.setdefault("template", rng.randrange(len(IOI_TEMPLATES)))
    p.setdefault("place", rng.choice(PLACES))
    p.setdefault("obj", rng.choice(OBJECTS))
    s, io = (p["A"], p["B"]) if p["s_first"] else (p["B"], p["A"])
    t = IOI_TEMPLATES[p["template"]]
    fill = dict(A=p["A"], B=p["B"], place=p["place"], obj=p["obj"])
    return Query("ioi", t.format(S=s, **fill), io, s, t.format(S=p["C"], **fill), p)


def _induction(rng: random.Random, p: dict | None = None) -> Query:
    p = dict(p or {})
    if "span" not in p:
        n = rng.randint(6, 10)
        words = rng.sample(INDUCTION_POOL, n + 1)
        p.update(span=words[:n], cut=rng.randint(2, n - 1), other=words[n])
    span, cut = p["span"], p["cut"]
    if "fresh" not in p:
        # counterfactual: same length, but the first occurrence is replaced by unrelated words
        pool = [w for w in INDUCTION_POOL if w not in span]
        p["fresh"] = rng.sample(pool, len(span))
    prompt = " ".join(span + span[:cut])
    cf = " ".join(p["fresh"] + span[:cut])
    return Query("induction", prompt, span[cut], p["other"], cf, p)


def _greater_than(rng: random.Random, p: dict | None = None) -> Query:
    p = dict(p or {})
    if "x" not in p:
        x = rng.randint(10, 89)
        p.update(x=x, above=rng.randint(x + 1, 99), below=rng.randint(0, x - 1))
    p.setdefault("cf_x", rng.randint(1, 9))
    p.setdefault("template", rng.randrange(len(GT_TEMPLATES)))
    p.setdefault("noun", rng.choice(NOUNS))
    t = GT_TEMPLATES[p["template"]]
    prompt = t.format(x=p["x"], noun=p["noun"])
    # counterfactual start 0..9 makes 'below' also valid, so the logit difference collapses
    cf = t.format(x=p["cf_x"], noun=p["noun"])
    return Query("greater_than", prompt, str(p["above"]), str(p["below"]), cf, p)


def _addition(rng: random.Random, p: dict | None = None) -> Query:
    """Two-digit operands written digit by digit; the answer is the sum's first digit (which needs the
    carry from the ones digits), the wrong answer the first digit of the counterfactual's sum."""
    p = dict(p or {})
    if "a" not in p:
        p.update(a=rng.randint(10, 49), b=rng.randint(10, 49))
    p.setdefault("b_cf", rng.choice([v for v in range(10, 50) if (p["a"] + v) // 10 != (p["a"] + p["b"]) // 10]))
    p.setdefault("template", rng.randrange(len(ADD_TEMPLATES)))
    t = ADD_TEMPLATES[p["template"]]
    prompt, cf = t.format(a=digits(p["a"]), b=digits(p["b"])), t.format(a=digits(p["a"]), b=digits(p["b_cf"]))
    return Query("addition", prompt, str((p["a"] + p["b"]) // 10), str((p["a"] + p["b_cf"]) // 10), cf, p)


def _facts(rng: random.Random, p: dict | None = None) -> Query:
    p = dict(p or {})
    if "e" not in p:
        p.update(attr=rng.choice(ATTRIBUTES), e=rng.choice(ENTITIES))
    p.setdefault("template", rng.randrange(len(FACT_TEMPLATES[p["attr"]])))
    p.setdefault("e_cf", rng.choice([o for o in ENTITIES if FACTS[o][p["attr"]] != FACTS[p["e"]][p["attr"]]]))
    t = FACT_TEMPLATES[p["attr"]][p["template"]]
    return Query(
        "facts", t.format(e=p["e"]), FACTS[p["e"]][p["attr"]], FACTS[p["e_cf"]][p["attr"]], t.format(e=p["e_cf"]), p
    )


_MAKERS = {"ioi": _ioi, "induction": _induction, "greater_than": _greater_than, "addition": _addition, "facts": _facts}
QUERY_TASKS = tuple(_MAKERS)


def _stable(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


def is_heldout(q: Query) -> bool:
    """Whether q's defining combination is reserved from training (see the module docstring)."""
    p = q.params
    if q.task == "ioi":
        pair = tuple(sorted((p["A"], p["B"])))
        return p["template"] == len(IOI_TEMPLATES) - 1 or _stable("ioi", p["template"], pair) % 6 == 0
    if q.task == "induction":
        return _stable("induction", tuple(p["span"])) % 8 == 0
    if q.task == "greater_than":
        return (p["x"] + p["template"]) % 3 == 0
    if q.task == "addition":
        return (p["a"] * 7 + p["b"] * 3) % 10 == 0
    return p["template"] == (ENTITIES.index(p["e"]) + ATTRIBUTES.index(p["attr"])) % 3  # facts


def accepts(q: Query, word: str) -> bool:
    """Whether `word` is a correct answer to q: greater-than accepts any larger number, the rest only q.answer."""
    if q.task == "greater_than":
        return word.isdigit() and int(word) > q.params["x"]
    return word == q.answer


def with_answer(q: Query, word: str) -> Query:
    """q re-targeted at another correct answer (greater-than has many: a circuit should explain the one
    the model gives, not a randomly drawn larger number). Paraphrases keep the new answer."""
    if not accepts(q, word):
        raise BadValueError(f"{word!r} is not a correct answer to {q.prompt!r}")
    params = {**q.params, "above": int(word)} if q.task == "greater_than" else q.params
    return replace(q, answer=word, params=params)


def _check_task(task: str) -> None:
    if task not in _MAKERS:
        raise BadValueError(f"unknown task {task!r}; valid tasks: {', '.join(QUERY_TASKS)}")


def make_query(task: str, rng: random.Random, split: str = "train") -> Query:
    """A query of `task` from `split`: held-out combinations never appear in the train split."""
    _check_task(task)
    check_split(split)
    while True:
        q = _MAKERS[task](rng)
        if is_heldout(q) == (split == "heldout"):
            return q


def queries(task: str, n: int, seed: int = 0, tokenizer=None, split: str = "heldout") -> list[Query]:
    """n deterministic queries of one task family (held-out by default: what evaluation should use).

    With a tokenizer, checks that prompt and counterfactual have the same number of tokens and that
    the answers are single tokens — the guarantees circuit discovery relies on.
    """
    rng = random.Random(f"queries/{task}/{seed}/{split}")
    out = [make_query(task, rng, split) for _ in range(n)]
    if tokenizer is not None:
        for q in out:
            lp, lc = (len(tokenizer(s, add_special_tokens=False)["input_ids"]) for s in (q.prompt, q.counterfactual))
            if lp != lc:
                raise AssertionError(f"counterfactual length {lc} != prompt length {lp} for {q}")
    return out


# what a paraphrase keeps: the variables that decide the answer; everything else is resampled
# (counterfactual-only variables such as the third IOI name are resampled too; a facts or addition
# counterfactual decides the wrong answer, so it is kept)
_KEEP = {
    "ioi": ("A", "B", "s_first"),
    "induction": ("span", "cut", "other"),
    "greater_than": ("x", "above", "below"),
    "addition": ("a", "b", "b_cf"),
    "facts": ("attr", "e", "e_cf"),
}


def paraphrases(q: Query, n: int, seed: int = 0) -> list[Query]:
    """n resampled versions of q that keep its answer-defining variables (names, span, operands...)."""
    _check_task(q.task)
    rng = random.Random(f"paraphrase/{seed}/{q.prompt}")
    keep = {k: q.params[k] for k in _KEEP[q.task]}
    return [_MAKERS[q.task](rng, keep) for _ in range(n)]


# the variable that alone decides each task's counterfactual
_CF_VARIABLE = {"ioi": "C", "induction": "fresh", "greater_than": "cf_x", "addition": "b_cf", "facts": "e_cf"}


def counterfactuals(q: Query, n: int, seed: int = 0) -> list[str]:
    """Up to n other counterfactual prompts for q itself (same prompt, answer and wrong answer)."""
    _check_task(q.task)
    rng = random.Random(f"resample-cf/{seed}/{q.prompt}")
    keep = {k: v for k, v in q.params.items() if k != _CF_VARIABLE[q.task]}
    out: list[str] = []
    for _ in range(4 * n):
        r = _MAKERS[q.task](rng, keep)
        if r.counterfactual not in out and r.counterfactual != q.counterfactual:
            out.append(r.counterfactual)
        if len(out) == n:
            break
    return out
