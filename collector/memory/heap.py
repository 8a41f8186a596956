"""Keep Python's cyclic garbage collector off the long-lived heap.

Why: a collector holds hundreds of thousands of long-lived container objects
(label sets, keys, caches, the store's batches). A full collection walks every
one of them, and CPython starts one whenever enough new objects have survived
two younger collections: a range query's answer, a burst of pushes or a page
build is enough. Measured at 1,000 nodes: building one range query's answer
took 15 ms, or 200 ms when a full collection fell into it, which set the p99
of every surface. Objects that have lived a while are moved to the permanent
generation (``gc.freeze``), which collections skip; reference counting still
frees them as usual. A reference cycle that was alive at a freeze and dies
later (a connection closed after minutes of use, an exception still held by a
request in flight) is freed only when the permanent generation is given back
and one full collection runs: a sweep. With a sweep every 15 minutes, a
12-minute soak under churn and faults (``make soak``) saw RSS climb 7-9 MiB
in 2-5 minutes: every target dropped stayed frozen with its scrape loop,
normaliser and connection (a cancelled task's cycle, which core/tasks.py now
breaks), and every connection closed after a fault with its parser.

So sweeps come as often as a fixed share of the time allows
(:data:`SWEEP_SHARE`): each sweep's CPU time sets the wait for the next one,
at least :data:`SETTLE`, at most :data:`SWEEP`. A sweep walks every object
once: 0.11 s at 1,000 nodes (216k tracked objects; ``python -m bench heap``),
so one every ~2 minutes there, every minute or two in the soak. A request
meets one with a chance of about its length plus 0.11 s in 110 s (0.1% for a
15 ms query): too rare to move a p99, where full collections every few
seconds set it.

Collections are also run less often than Python's defaults: a minute is long
enough to freeze most of the heap, but pushes replace every node's batch every
few seconds, so at 5,000 agents most of the store is always younger than that.
A full collection then walked it all, 200-440 ms every ~5 s while the store
filled (``bench/push/run.py``), and nearly always found nothing to free.

And the young generations are collected every :data:`YOUNG` seconds, not only
when CPython counts enough new objects. Why: its count is objects made less
objects freed, whatever their age, so a collector in steady state (each
scrape, push or read model replacing its predecessor) keeps the count near
zero while every new object stays young. At 5,000 nodes the REST read model's
846,000 objects were found in generation 0 when a page's few allocations
finally tipped the count: that collection took 0.41 s, the next of generation
1 (687,000 objects) 0.42 s, and the views' p99 was theirs (``python -m bench
ui``). Collected every :data:`YOUNG` seconds, they hold that long's objects:
at 5,000 nodes, collected each second a young collection took 20-50 ms, every
quarter of a second under 15 ms.
For the same reason a freeze collects only the young generations: what is
older survived a young collection since the last freeze, and a full
collection of it walked the whole read model again; a cycle among it waits
for the next sweep.
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
"""The longest wait between two sweeps, however long a sweep took."""
SWEEP_SHARE = 0.001
"""The share of the time sweeps may take: one that took 0.1 s of CPU waits 100 s for the next."""


YOUNG = 0.25
"""Seconds between two collections of the young generations (0 and 1): the shorter, the
shorter each collection (the same objects are walked once either way)."""

THRESHOLDS = (10_000, 10, 10_000)
"""The cyclic collector's thresholds while the program runs (Python's: 700, 10, 10): young
objects are still collected often; a full collection comes only with a sweep (the third
threshold counts collections of generation 1, one every :data:`YOUNG` seconds at least, and
10,000 of them take longer than :data:`SWEEP`)."""


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Run the cyclic collector at :data:`THRESHOLDS` for the block, then as before."""
    before = gc.get_threshold()
    gc.set_threshold(*THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def collect_young() -> int:
    """Collect generations 0 and 1; how many unreachable objects were found."""
    return gc.collect(1)


def freeze() -> int:
    """Collect the young generations, then move every object left to the permanent
    generation; how many objects that generation holds.

    The collection walks only the young generations, and it keeps garbage that
    is still waiting there (a request's exception and traceback, say) from
    being frozen with the rest.
    """
    collect_young()
    gc.freeze()
    return gc.get_freeze_count()


def sweep() -> int:
    """Give the permanent generation back, collect everything once, and freeze what is left."""
    gc.unfreeze()
    found = gc.collect()
    gc.freeze()
    return found


def sweep_interval(cost: float) -> float:
    """Seconds from a sweep that took ``cost`` s of CPU to the next one (:data:`SWEEP_SHARE`)."""
    return min(SWEEP, max(SETTLE, cost / SWEEP_SHARE))


DEFER = 10.0
"""Longest a freeze or sweep waits for the queries being evaluated to finish."""


async def keep_frozen(
    settle: float = SETTLE, idle: asyncio.Event | None = None, young: float = YOUNG
) -> None:
    """Every ``young`` seconds collect the young generations; every ``settle`` seconds, once
    ``idle`` is set (no query is being evaluated), sweep the heap if the last sweep's wait
    is over, else freeze it.

    Why wait: a freeze or a sweep holds the interpreter for 20-200 ms at 1,000
    nodes, and one that falls inside a query adds that to its answer's time.
    Measured with the query bench at 1,000 nodes: one instant query in ten took
    100-115 ms over HTTP against a p50 of 73-83 ms; without the task, 78-87 ms.
    A young collection walks only the objects made since the last one, and does not wait.
    """
    settled = time.monotonic()
    # The first tick sweeps where nothing is frozen yet: it costs what a freeze would. Where
    # something is (the task restarted, or its process froze a heap it made before starting
    # it), a sweep walks all of it (225 ms for 200 nodes' history): it waits its longest.
    wait, swept = (SWEEP, settled) if gc.get_freeze_count() else (0.0, 0.0)
    while True:
        await asyncio.sleep(min(young, settle))
        if time.monotonic() - settled < settle:
            collect_young()
            continue
        if idle is not None and not idle.is_set():
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancel that
            # meets the event being set, and the task would outlive its owner's shutdown
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(DEFER):
                    await idle.wait()
        if time.monotonic() - swept >= wait:
            began = time.thread_time()
            sweep()
            wait = sweep_interval(time.thread_time() - began)
            swept = time.monotonic()
        else:
            freeze()
        settled = time.monotonic()
