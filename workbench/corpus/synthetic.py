"""The synthetic corpus: short stories, task documents and repeated random-token sequences.

Documents are lists of (word, role, entity) triples, so labels stay aligned with tokens by
construction (the tokenizer is word-level). Task documents are a query from `tasks` followed by
its answer; the train split only ever contains train-split queries, so the held-out combinations
of every task family (see `tasks`) never occur in training text. Repeated random-token sequences
(a span of uniformly random vocabulary words, then the same span again) are the standard way
general induction heads form: copying is the only way to predict their second half.
"""

from __future__ import annotations

import random

import numpy as np

from workbench.corpus.base import TokenSequence, check_split
from workbench.corpus.tasks import make_query
from workbench.corpus.vocab import (
    ADJECTIVES,
    ENTITIES,
    FACTS,
    LABEL_NAMES,
    NAMES,
    NOUNS,
    OBJECTS,
    PLACES,
    STORY_VERBS,
    Triple,
    digits,
    triples,
    vocabulary,
)
from workbench.errors import BadValueError

REPEAT_LENGTH = (4, 60)  # span lengths of repeated random-token documents (2 x 60 + EOS fits n_ctx 128)


def _story(rng: random.Random) -> list[Triple]:
    name, other = rng.sample(NAMES, 2)
    sents = [f"One day {name} walked to the {rng.choice(PLACES)} ."]
    for _ in range(rng.randint(1, 3)):
        who = rng.choice([name, other])
        sents.append(f"{who} {rng.choice(STORY_VERBS)} a {rng.choice(ADJECTIVES)} {rng.choice(NOUNS + OBJECTS)} .")
    if rng.random() < 0.5:
        e = rng.choice(ENTITIES)
        sents.append(f"{name} met {e} who was a {FACTS[e]['job']} .")
    return triples(" ".join(sents))


def _digit_triples(text: str) -> list[Triple]:
    """Addition text: its numerals are digits (role 'digit'), not the two-digit number tokens."""
    return [(w, "digit", int(w)) if w.isdigit() else t for w, t in zip(text.split(), triples(text))]


def _task_document(task: str, rng: random.Random, split: str) -> list[Triple]:
    q = make_query(task, rng, split)
    if task == "greater_than":
        answer = str(rng.randint(q.params["x"] + 1, 99))  # any larger number is right: teach the whole range
    elif task == "addition":
        return _digit_triples(f"{q.prompt} {digits(q.params['a'] + q.params['b'])} .")
    else:
        answer = q.answer
    return triples(f"{q.prompt} {answer} .")


def repeat_words() -> list[str]:
    """The words of repeated random-token documents: the vocabulary without the facts' entity names, so
    no held-out facts prompt ("Isolde lives in" is three tokens) can occur in them by chance."""
    return [w for w in vocabulary() if w not in ENTITIES]


def _repeat(rng: random.Random, words: list[str]) -> list[Triple]:
    span = rng.choices(words, k=rng.randint(*REPEAT_LENGTH))
    return triples(" ".join(span + span))


_DOC_WEIGHTS = {"story": 1, "ioi": 4, "induction": 3, "greater_than": 1, "addition": 3, "facts": 2, "repeat": 2}


def document(rng: random.Random, split: str = "train", words: list[str] | None = None) -> tuple[str, list[Triple]]:
    task = rng.choices(list(_DOC_WEIGHTS), weights=list(_DOC_WEIGHTS.values()))[0]
    if task == "story":
        return task, _story(rng)
    if task == "repeat":
        return task, _repeat(rng, words or repeat_words())
    return task, _task_document(task, rng, split)


class SyntheticCorpus:
    """Infinite, deterministic stream of packed sequences: sequence i depends only on (seed, split, i)."""

    label_names = LABEL_NAMES

    def __init__(self, tokenizer, seed: int = 0):
        self.tokenizer = tokenizer
        self.seed = seed
        self.spec = f"synthetic:seed={seed}"
        vocab = tokenizer.get_vocab()
        self._words = repeat_words()
        missing = [w for w in vocabulary() if w not in vocab]
        if missing:
            raise BadValueError(
                f"tokenizer lacks {len(missing)} synthetic-corpus words, e.g. {missing[:5]}; "
                "use the embedded model's tokenizer (workbench.models.tokenizer)"
            )
        self._ids = {w: vocab[w] for w in vocabulary()}
        self._bos, self._eos = tokenizer.bos_token_id, tokenizer.eos_token_id
        self._task_ids = {t: i for i, t in enumerate(LABEL_NAMES["task"])}
        self._role_ids = {r: i for i, r in enumerate(LABEL_NAMES["role"])}

    def sequence(self, i: int, ctx_len: int, split: str = "train") -> TokenSequence:
        check_split(split)
        rng = random.Random(f"{self.seed}/{split}/{i}")
        toks, docs, task, role, ent = [self._bos], [-1], [0], [0], [-1]
        j = 0
        while len(toks) < ctx_len:
            name, doc = document(rng, split, self._words)
            doc_id = i * 64 + j if split == "train" else -(i * 64 + j) - 1  # held-out docs get negative ids
            for w, r, e in doc + [("<eos>", "special", -1)]:
                toks.append(self._eos if w == "<eos>" else self._ids[w])
                docs.append(doc_id)
                task.append(0 if w == "<eos>" else self._task_ids[name])
                role.append(self._role_ids[r])
                ent.append(e)
            j += 1
        s = slice(0, ctx_len)
        return TokenSequence(
            np.asarray(toks[s], dtype=np.int64),
            np.asarray(docs[s], dtype=np.int64),
            {
                "task": np.asarray(task[s], np.int16),
                "role": np.asarray(role[s], np.int16),
                "entity": np.asarray(ent[s], np.int32),
            },
        )

    def sequences(self, ctx_len: int, start: int = 0, split: str = "train"):
        i = start
        while True:
            yield self.sequence(i, ctx_len, split)
            i += 1
