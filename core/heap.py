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
"""

from __future__ import annotations

import asyncio
import gc
import time

SETTLE = 60.0
"""Seconds between two freezes: what has lived that long is long-lived."""
SWEEP = 900.0
"""Seconds between two full collections, which free any cycle frozen meanwhile."""


def freeze() -> int:
    """Move every object tracked now to the permanent generation; how many it holds."""
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
