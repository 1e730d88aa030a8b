import numpy as np
import pytest

from workbench.cache.format import NpyAppender, NpyReader, checksum
from workbench.errors import DamagedFileError


def test_appended_npy_is_a_plain_npy(tmp_path):
    path = tmp_path / "a.npy"
    w = NpyAppender(path, np.float16, (3,))
    blocks = [np.random.default_rng(i).normal(size=(n, 3)).astype(np.float16) for i, n in enumerate([0, 5, 100_000])]
    for b in blocks:
        w.append(b)
    w.close()
    np.testing.assert_array_equal(np.load(path), np.concatenate(blocks))  # header patched to 100005 rows
    r = NpyReader(path)
    out = np.empty((3, 3), np.float16)
    r.read_into(99_999, memoryview(out[:2].reshape(-1).view(np.uint8)))
    np.testing.assert_array_equal(out[:2], blocks[2][-6:-4])
    with pytest.raises(DamagedFileError, match="ends before row 100005"):
        r.read_into(100_003, memoryview(out.reshape(-1).view(np.uint8)))
    r.close()


def test_checksum_changes_with_one_byte(tmp_path):
    path = tmp_path / "x"
    path.write_bytes(bytes(10_000))
    before = checksum(path)
    path.write_bytes(bytes(9_999) + b"\x01")
    assert checksum(path) != before
