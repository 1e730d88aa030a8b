"""Run the producer of an iterator one or two items ahead on a thread: the harvest builds the next
corpus batches while the model runs (torch ops release the GIL)."""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor


def prefetched(items, depth: int = 2):
    """Yield the items of `items` (an iterator; None ends it) while producing the next `depth`."""
    with ThreadPoolExecutor(1) as ex:
        pending = deque(ex.submit(next, items, None) for _ in range(depth))
        while (item := pending.popleft().result()) is not None:
            pending.append(ex.submit(next, items, None))
            yield item
