"""The synthetic corpus: short stories plus task families with known answers.

Every token carries ground-truth labels (task, role, entity), which is what makes probing,
absorption and circuit metrics exact on the embedded model. Documents are produced as lists of
(word, role, entity) triples, so labels stay aligned with tokens by construction (the tokenizer is
word-level: one word, one token).

Task families (each prompt has a same-length counterfactual and correct/wrong answer tokens):
  ioi           "When Mary and John went to the park , John gave a ball to" -> Mary (wrong: John)
  induction     a random span, then its repeat cut short                     -> the next span word
  greater_than  "the count went from 34 to"                                  -> a number above 34
  addition      "23 plus 45 equals"                                          -> 68
  facts         "Zorvan lives in"                                            -> Kelmor (a fixed fact)
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

NAMES = (
    "Mary John Alice Bob Tom Anna James Sarah David Emma Paul Laura Mark Julia Peter Kate Daniel "
    "Lucy Chris Rose Adam Grace Ben Clara Sam Nora Leo Ella Max Ruth"
).split()
ENTITIES = "Zorvan Quilla Brannik Tesmo Velka Orrin Pashet Mirel Dunvar Isolde Kasimir Yeva".split()
CITIES = "Kelmor Ostrava Tiberon Valen Marrow Quessa".split()
COLORS = "red blue green yellow purple orange".split()
JOBS = "baker pilot farmer doctor painter sailor".split()
PLACES = "store park school garden market library station beach river castle".split()
OBJECTS = "ball book drink letter key flower apple coin hat ring cake lamp".split()
ADJECTIVES = "small big old new happy quiet bright dark warm cold".split()
NOUNS = (
    "tree cat dog bird house road cloud stone window door table chair river hill boat fish "
    "moon star rain snow wind fire leaf song bell clock"
).split()
STORY_VERBS = "saw found liked made took wanted".split()
NUMBERS = [str(i) for i in range(100)]
FUNCTION_WORDS = (
    "When and went to the , gave a Then had long argument . Afterwards said While were working at "
    "decided give After lunch handed it count from lasted year plus equals lives in likes color "
    "works as favorite is One day walked home was very met who"
).split()

# Facts are fixed by construction (not by the seed): they are what the model memorises.
FACTS = {
    e: {"city": CITIES[i % len(CITIES)], "color": COLORS[(i * 5 + 1) % len(COLORS)], "job": JOBS[(i * 7 + 2) % len(JOBS)]}
    for i, e in enumerate(ENTITIES)
}

TASKS = ("story", "ioi", "induction", "greater_than", "addition", "facts")
LABEL_NAMES = {
    "task": ["special", *TASKS],
    # word classes; the 'entity' label refines name/entity/number/city/color/job into the specific value,
    # which gives probing and absorption metrics a two-level (parent role -> child entity) hierarchy.
    "role": ["special", "word", "name", "entity", "number", "city", "color", "job", "place", "object"],
}
ROLE_ENTITY_VALUES = {"name": NAMES, "entity": ENTITIES, "number": NUMBERS, "city": CITIES, "color": COLORS, "job": JOBS}
# Induction spans draw from nouns, adjectives and objects so the repeated tokens carry no task structure.
INDUCTION_POOL = NOUNS + ADJECTIVES + OBJECTS


def vocabulary() -> list[str]:
    """All words the generator can emit, in a fixed order (the tokenizer's vocabulary)."""
    words: list[str] = []
    for group in (FUNCTION_WORDS, NAMES, ENTITIES, CITIES, COLORS, JOBS, PLACES, OBJECTS, ADJECTIVES,
                  NOUNS, STORY_VERBS, NUMBERS):
        words += [w for w in group if w not in words]
    return words


Triple = tuple[str, str, int]  # (word, role, entity id)


def _w(word: str) -> Triple:
    for role in ("name", "entity", "city", "color", "job"):
        values = ROLE_ENTITY_VALUES[role]
        if word in values:
            return (word, role, values.index(word))
    if word in NUMBERS:
        return (word, "number", int(word))
    if word in PLACES:
        return (word, "place", -1)
    if word in OBJECTS:
        return (word, "object", -1)
    return (word, "word", -1)


def _words(text: str) -> list[Triple]:
    return [_w(w) for w in text.split()]


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
)
GT_TEMPLATES = ("the count went from {x} to", "the {noun} lasted from year {x} to year")
ADD_TEMPLATE = "{a} plus {b} equals"
FACT_TEMPLATES = {"city": "{e} lives in", "color": "{e} likes the color", "job": "{e} works as a"}


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
    p = dict(p or {})
    if "a" not in p:
        a, b = rng.randint(10, 49), rng.randint(10, 49)
        p.update(a=a, b=b, wrong=rng.choice([s for s in range(20, 99) if s != a + b]))
    p.setdefault("b_cf", rng.choice([v for v in range(10, 50) if v != p["b"]]))
    prompt = ADD_TEMPLATE.format(a=p["a"], b=p["b"])
    cf = ADD_TEMPLATE.format(a=p["a"], b=p["b_cf"])
    return Query("addition", prompt, str(p["a"] + p["b"]), str(p["wrong"]), cf, p)


def _facts(rng: random.Random, p: dict | None = None) -> Query:
    p = dict(p or {})
    if "e" not in p:
        attr = rng.choice(sorted(FACT_TEMPLATES))
        e = rng.choice(ENTITIES)
        p.update(attr=attr, e=e)
    p.setdefault("e_cf", rng.choice([o for o in ENTITIES if FACTS[o][p["attr"]] != FACTS[p["e"]][p["attr"]]]))
    t = FACT_TEMPLATES[p["attr"]]
    return Query("facts", t.format(e=p["e"]), FACTS[p["e"]][p["attr"]], FACTS[p["e_cf"]][p["attr"]],
                 t.format(e=p["e_cf"]), p)


_MAKERS = {"ioi": _ioi, "induction": _induction, "greater_than": _greater_than, "addition": _addition, "facts": _facts}
QUERY_TASKS = tuple(_MAKERS)
# what a paraphrase keeps: the variables that decide the answer; everything else is resampled
# (counterfactual-only variables such as the third IOI name are resampled too; a facts
# counterfactual decides the wrong answer, so it is kept)
_KEEP = {"ioi": ("A", "B", "s_first"), "induction": ("span", "cut", "other"), "greater_than": ("x", "above", "below"),
         "addition": ("a", "b", "wrong"), "facts": ("attr", "e", "e_cf")}


def _check_task(task: str) -> None:
    if task not in _MAKERS:
        raise ValueError(f"unknown task {task!r}; valid tasks: {', '.join(QUERY_TASKS)}")


def _held_out_addition(a: int, b: int) -> bool:
    """Addition pairs reserved for evaluation, so the model card's addition accuracy is not recall."""
    return (a * 7 + b * 3) % 10 == 0


def make_query(task: str, rng: random.Random, split: str = "train") -> Query:
    _check_task(task)
    while True:
        q = _MAKERS[task](rng)
        if task != "addition" or _held_out_addition(q.params["a"], q.params["b"]) == (split == "heldout"):
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
        cf = _MAKERS[q.task](rng, keep).counterfactual
        if cf not in out and cf != q.counterfactual:
            out.append(cf)
        if len(out) == n:
            break
    return out


# ---------------------------------------------------------------- documents (training text)

def _story(rng: random.Random) -> list[Triple]:
    name, other = rng.sample(NAMES, 2)
    sents = [f"One day {name} walked to the {rng.choice(PLACES)} ."]
    for _ in range(rng.randint(1, 3)):
        who = rng.choice([name, other])
        sents.append(f"{who} {rng.choice(STORY_VERBS)} a {rng.choice(ADJECTIVES)} {rng.choice(NOUNS + OBJECTS)} .")
    if rng.random() < 0.5:
        e = rng.choice(ENTITIES)
        sents.append(f"{name} met {e} who was a {FACTS[e]['job']} .")
    return _words(" ".join(sents))


def _task_document(task: str, rng: random.Random, split: str) -> list[Triple]:
    q = make_query(task, rng, split)
    if task == "greater_than":
        answer = str(rng.randint(q.params["x"] + 1, 99))  # any larger number is right: teach the whole range
    else:
        answer = q.answer
    return _words(f"{q.prompt} {answer} .")


_DOC_WEIGHTS = {"story": 2, "ioi": 3, "induction": 3, "greater_than": 2, "addition": 2, "facts": 2}


def document(rng: random.Random, split: str = "train") -> tuple[str, list[Triple]]:
    task = rng.choices(list(_DOC_WEIGHTS), weights=list(_DOC_WEIGHTS.values()))[0]
    triples = _story(rng) if task == "story" else _task_document(task, rng, split)
    return task, triples


@dataclass
class TokenSequence:
    tokens: np.ndarray  # int64 [ctx]
    doc_ids: np.ndarray  # int64 [ctx]
    labels: dict[str, np.ndarray]


class SyntheticCorpus:
    """Infinite, deterministic stream of packed sequences: sequence i depends only on (seed, split, i)."""

    label_names = LABEL_NAMES

    def __init__(self, tokenizer, seed: int = 0):
        self.tokenizer = tokenizer
        self.seed = seed
        self.spec = f"synthetic:seed={seed}"
        vocab = tokenizer.get_vocab()
        self._ids = {w: vocab[w] for w in vocabulary() if w in vocab}
        missing = [w for w in vocabulary() if w not in vocab]
        if missing:
            raise ValueError(f"tokenizer lacks {len(missing)} synthetic-corpus words, e.g. {missing[:5]}")
        self._bos, self._eos = tokenizer.bos_token_id, tokenizer.eos_token_id
        self._task_ids = {t: i for i, t in enumerate(LABEL_NAMES["task"])}
        self._role_ids = {r: i for i, r in enumerate(LABEL_NAMES["role"])}

    def sequence(self, i: int, ctx_len: int, split: str = "train") -> TokenSequence:
        if split not in ("train", "heldout"):
            raise ValueError(f"unknown split {split!r}; valid: 'train', 'heldout'")
        rng = random.Random(f"{self.seed}/{split}/{i}")
        toks, docs, task, role, ent = [self._bos], [-1], [0], [0], [-1]
        j = 0
        while len(toks) < ctx_len:
            name, triples = document(rng, split)
            doc_id = i * 64 + j if split == "train" else -(i * 64 + j) - 1  # held-out docs get negative ids
            for w, r, e in triples + [("<eos>", "special", -1)]:
                toks.append(self._eos if w == "<eos>" else self._ids[w])
                docs.append(doc_id)
                task.append(0 if w == "<eos>" else self._task_ids[name])
                role.append(self._role_ids[r])
                ent.append(e)
            j += 1
        s = slice(0, ctx_len)
        return TokenSequence(
            np.asarray(toks[s], dtype=np.int64), np.asarray(docs[s], dtype=np.int64),
            {"task": np.asarray(task[s], np.int16), "role": np.asarray(role[s], np.int16), "entity": np.asarray(ent[s], np.int32)},
        )

    def sequences(self, ctx_len: int, start: int = 0, split: str = "train"):
        i = start
        while True:
            yield self.sequence(i, ctx_len, split)
            i += 1
