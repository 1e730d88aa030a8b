"""The synthetic corpus's words, word classes and per-token labels.

The tokenizer of the embedded model is word-level (one word, one token), so these lists are its
vocabulary and every generated word carries exact labels: the task it belongs to, its role (word
class) and, for names/entities/numbers/digits/cities/colours/jobs, which specific value it is.
"""

from __future__ import annotations

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
NUMBERS = [str(i) for i in range(100)]  # two-digit numbers are single tokens (greater-than)
DIGITS = [str(i) for i in range(10)]  # addition writes numbers digit by digit (the same tokens as 0-9)
FUNCTION_WORDS = (
    "When and went to the , gave a Then had long argument . Afterwards said While were working at "
    "decided give After lunch handed it count from lasted year plus equals lives in likes color "
    "works as favorite is One day walked home was very met who Later threw Once sent price rose "
    "has house of always wears by trade earns living sum At"
).split()

ATTRIBUTES = ("city", "color", "job")
# Facts are fixed by construction (not by the seed): they are what the model memorises.
FACTS = {
    e: {
        "city": CITIES[i % len(CITIES)],
        "color": COLORS[(i * 5 + 1) % len(COLORS)],
        "job": JOBS[(i * 7 + 2) % len(JOBS)],
    }
    for i, e in enumerate(ENTITIES)
}

TASKS = ("story", "ioi", "induction", "greater_than", "addition", "facts", "repeat")
LABEL_NAMES = {
    "task": ["special", *TASKS],
    # word classes; the 'entity' label refines name/entity/number/digit/city/color/job into the specific
    # value, which gives probing and absorption a two-level (parent role -> child entity) hierarchy.
    "role": ["special", "word", "name", "entity", "number", "city", "color", "job", "place", "object", "digit"],
}
ROLE_ENTITY_VALUES = {
    "name": NAMES,
    "entity": ENTITIES,
    "number": NUMBERS,
    "city": CITIES,
    "color": COLORS,
    "job": JOBS,
    "digit": DIGITS,
}


def vocabulary() -> list[str]:
    """All words the generator can emit, in a fixed order (the tokenizer's vocabulary)."""
    words: list[str] = []
    for group in (
        FUNCTION_WORDS,
        NAMES,
        ENTITIES,
        CITIES,
        COLORS,
        JOBS,
        PLACES,
        OBJECTS,
        ADJECTIVES,
        NOUNS,
        STORY_VERBS,
        NUMBERS,
    ):
        words += [w for w in group if w not in words]
    return words


Triple = tuple[str, str, int]  # (word, role, entity id)


def triple(word: str) -> Triple:
    """A word with its role and entity labels (numbers 0-99 are 'number'; addition digits use `digits`)."""
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


def triples(text: str) -> list[Triple]:
    return [triple(w) for w in text.split()]


def digits(n: int) -> str:
    """A number written digit by digit, as addition prompts and answers spell it: 68 -> '6 8'."""
    return " ".join(str(n))


# Induction spans draw from nouns, adjectives and objects so the repeated tokens carry no task structure.
INDUCTION_POOL = NOUNS + ADJECTIVES + OBJECTS
