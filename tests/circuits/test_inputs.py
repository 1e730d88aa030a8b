import pytest

from workbench.circuits import find_circuit
from workbench.circuits.inputs import QueryError, prepare
from workbench.circuits.search import ZeroGapError

PROMPT = "When Mary and John went to the park , John gave a ball to"
CF = "When Mary and John went to the park , Anna gave a ball to"


def test_multi_token_answer_names_its_tokens(small):
    with pytest.raises(QueryError, match=r"splits into 2 tokens \['Mary', 'John'\]"):
        prepare(small, PROMPT, "Mary John")


def test_unknown_word_answer(small):
    with pytest.raises(
        QueryError, match="answer has 1 word.* outside the model's vocabulary.*'Marie' \\(did you mean 'Mary'"
    ):
        prepare(small, PROMPT, "Marie")


@pytest.mark.parametrize(
    "text, named",
    [(PROMPT.replace("John", "Jhon", 1), "'Jhon' (did you mean 'John'"), ("Élodie went to the café", "'Élodie'")],
)
def test_unknown_words_in_prompts_are_named_not_turned_into_unk(small, text, named):
    with pytest.raises(QueryError, match="outside the model's vocabulary, which would silently become <unk>") as e:
        prepare(small, text, "Mary")
    assert named in str(e.value)
    with pytest.raises(QueryError, match="counterfactual has 1 word"):
        prepare(small, PROMPT, "Mary", CF.replace("Anna", "Anya"))


def test_default_wrong_is_the_counterfactuals_best_other_token(small):
    """When the counterfactual keeps the answer on top, the wrong answer is what it ranks next."""
    from workbench.circuits.component.api import resolve_wrong

    cf_logits = small(small.to_tokens(CF))[0, -1]
    answer = int(cf_logits.argmax())
    q = resolve_wrong(small, prepare(small, PROMPT, answer, CF), "logit_diff")
    assert q.wrong == int(cf_logits.topk(2).indices[1]) and q.wrong != answer


def test_prompt_longer_than_context(small):
    with pytest.raises(QueryError, match="context is 64 tokens"):
        prepare(small, " ".join(["the"] * 80), "Mary")


def test_token_ids_without_tokenizer(gqa):
    q = prepare(gqa, [1, 2, 3], 4)
    assert q.tokens.tolist() == [1, 2, 3] and q.answer == 4
    with pytest.raises(QueryError, match="no tokenizer"):
        prepare(gqa, "some text", 4)
    with pytest.raises(QueryError, match="outside the vocabulary"):
        prepare(gqa, [1, 2, 3], 99)


def test_wrong_equal_to_answer(small):
    with pytest.raises(QueryError, match="same token"):
        prepare(small, PROMPT, "Mary", CF, "Mary")


def test_counterfactual_with_the_same_answer_is_refused_with_numbers(small):
    with pytest.raises(ZeroGapError, match=r"L\(M\(q\)\) = -?\d+\.\d+, L\(M\(q'\)\) = .* gap 0\.0000"):
        find_circuit(small, PROMPT, "Mary", PROMPT, wrong="John", curve=False)
    top = int(small(small.to_tokens(PROMPT))[0, -1].argmax())  # no wrong given and nothing changed: no gap either
    with pytest.raises(ZeroGapError, match=r"gap 0\.0000"):
        find_circuit(small, PROMPT, top, PROMPT, curve=False)


@pytest.mark.parametrize("budget", [0, 0.0, 1.5, -0.02])
def test_bad_budget(small, budget):
    with pytest.raises(ValueError, match=r"budget must be a fraction in \(0, 1\]"):
        find_circuit(small, PROMPT, "Mary", CF, wrong="John", budget=budget)


def test_budget_below_one_edge_is_refused_like_zero(small):
    from workbench.circuits import Graph

    n = Graph.from_model(small).n_edges
    with pytest.raises(ValueError, match=f"below one edge: this model's graph has {n} edges"):
        find_circuit(small, PROMPT, "Mary", CF, wrong="John", budget=1e-9)
    with pytest.raises(ValueError, match=r"target_ndf=1.5 is outside \(0, 1\]"):
        find_circuit(small, PROMPT, "Mary", CF, wrong="John", target_ndf=1.5)


def test_budget_and_target_are_exclusive(small):
    with pytest.raises(ValueError, match="either a budget or a target NDF, not both"):
        find_circuit(small, PROMPT, "Mary", CF, wrong="John", budget=0.1, target_ndf=0.8)


def test_counterfactual_ablation_needs_a_counterfactual(small):
    with pytest.raises(ValueError, match="needs a counterfactual"):
        find_circuit(small, PROMPT, "Mary", wrong="John", curve=False)
