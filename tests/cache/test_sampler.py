import numpy as np
import pytest

from workbench.cache.sampler import RowSampler


def take(it, n):
    return [b for _, b in zip(range(n), it)]


def test_batches_are_sorted_unique_in_range_and_shuffled():
    batches = take(RowSampler(10_000, 500, seed=0).batches(), 40)
    for b in batches:
        assert len(b) == 500 and (np.diff(b) > 0).all() and 0 <= b[0] and b[-1] < 10_000
    assert np.ptp(batches[0]) > 5_000  # a batch spans the whole range, not one neighbourhood
    assert not np.array_equal(batches[0], take(RowSampler(10_000, 500, seed=1).batches(), 1)[0])


def test_an_epoch_reads_every_row_once_but_a_few_at_the_ends():
    s = RowSampler(10_000, 100, seed=0, window_rows=1000)
    rows = np.concatenate(take(s.batches(), s.batches_per_epoch()))
    n_windows = -(-s.per_rank // s.window)  # each may leave < chunk rows, the last < a batch
    assert len(np.unique(rows)) == len(rows) > 10_000 - 2 * s.chunk - n_windows * s.chunk - 100


def test_start_batch_resumes_exactly_across_epochs():
    for exclude in (None, np.arange(0, 10_000, 7)):
        s = RowSampler(10_000, 300, seed=5, exclude=exclude, window_rows=2000)
        full = take(s.batches(), 100)  # ~30 batches per epoch: three epoch boundaries
        for k in (1, 29, 33, 64, 97):
            assert all(np.array_equal(a, b) for a, b in zip(full[k : k + 3], take(s.batches(start_batch=k), 3)))


def test_ranks_are_disjoint_within_an_epoch():
    world, n = 4, 9_999
    per_rank = []
    for r in range(world):
        s = RowSampler(n, 64, seed=2, rank=r, world_size=world)
        per_rank.append(np.concatenate(take(s.batches(), s.batches_per_epoch())))
    all_rows = np.concatenate(per_rank)
    assert len(np.unique(all_rows)) == len(all_rows) > n - 2 * s.chunk - world * (s.chunk + 64)


def test_excluded_rows_never_appear():
    exclude = np.sort(np.random.default_rng(0).choice(5_000, 400, replace=False))
    rows = np.concatenate(take(RowSampler(5_000, 128, seed=0, exclude=exclude).batches(), 60))
    assert not np.isin(rows, exclude).any()


def test_bad_arguments():
    with pytest.raises(ValueError, match="rank must be in"):
        RowSampler(100, 10, rank=2, world_size=2)
    with pytest.raises(ValueError, match="batch_size=80 is too large: rank 0 of 2 gets 50 of the 100 rows"):
        RowSampler(100, 80, world_size=2)
    with pytest.raises(ValueError, match="rank 1 of 4 gets 0 of the 3 rows"):
        RowSampler(3, 1, rank=1, world_size=4)
