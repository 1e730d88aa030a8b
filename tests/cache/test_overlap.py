"""Whether a prompt occurs in a cache's training tokens (overlap.py): a run of the train split's own tokens is
found, a token the split never holds is not, and ids match whole (23 is not found inside 123)."""

from workbench.cache.overlap import seen_in_training


def test_seen_in_training_finds_runs_of_train_tokens_and_matches_ids_whole(clean):
    ids = clean.token_ids("train").tolist()
    seen = seen_in_training(str(clean.path))
    assert seen(ids[100:120]) and seen(ids[-5:])
    present = set(ids)
    assert not seen([max(present) + 1])
    inside = next((t, int(str(t)[1:])) for t in present if t >= 10 and int(str(t)[1:]) not in present)
    assert not seen([inside[1]]), inside  # the digits of a present id are not a match of another id
    assert seen_in_training(None)(ids[:5]) is None  # no cache to check against
