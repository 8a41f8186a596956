"""Keep Python's cyclic garbage collector off the long-lived heap.

Why: a collector holds hundreds of thousands of long-lived container objects
(label sets, keys, caches, the store's batches). A full collection walks every
one of them, and CPython starts one whenever enough new objects have survived
two younger collections: a range query's answer, a burst of pushes or a page
build is enough. Measured at 1,000 nodes: building one range query's answer
took 15 ms, or 200 ms when a full collection fell into it, which set the p99
of every surface. Objects that have lived a while are moved to the permanent
generation (``gc.freeze``), which collections skip; reference counting still
frees them as usual. Only a reference cycle among frozen objects would never
be freed, so every :data:`SWEEP` seconds the permanent generation is given
back and one full collection runs.

Collections are also run less often than Python's defaults: a minute is long
enough to freeze most of the heap, but pushes replace every node's batch every
few seconds, so at 5,000 agents most of the store is always younger than that.
A full collection then walked it all, 200-440 ms every ~5 s while the store
filled (``bench/push.py``), and nearly always found nothing to free.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Iterator

SETTLE = 60.0
"""Seconds between two freezes: what has lived that long is long-lived."""
SWEEP = 900.0
"""Seconds between two full collections, which free any cycle frozen meanwhile."""


THRESHOLDS = (10_000, 10, 50)
"""The cyclic collector's thresholds while the program runs (Python's: 700, 10, 10): young
objects are still collected often, a full collection comes about 70 times less often."""


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Run the cyclic collector at :data:`THRESHOLDS` for the block, then as before."""
    before = gc.get_threshold()
    gc.set_threshold(*THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def freeze() -> int:
    """Collect what is not frozen yet, then move what is left to the permanent generation;
    how many objects that generation holds.

    The collection walks only the objects made since the last freeze, and it
    keeps garbage that is still waiting in a young generation (a request's
    exception and traceback, say) from being frozen with the rest.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def sweep() -> int:
    """Give the permanent generation back, collect everything once, and freeze what is left."""
    gc.unfreeze()
    found = gc.collect()
    gc.freeze()
    return found


async def keep_frozen(settle: float = SETTLE, every: float = SWEEP) -> None:
    """Freeze the heap every ``settle`` seconds and sweep it every ``every`` seconds, forever."""
    swept = time.monotonic()
    while True:
        await asyncio.sleep(settle)
        if time.monotonic() - swept >= every:
            sweep()
            swept = time.monotonic()
        else:
            freeze()
