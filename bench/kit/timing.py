"""Small timing helpers shared by the benchmarks: medians and percentiles of repeats, wall clock.

The stopwatch does not collect garbage first: with the store's history held, a
full collection walks ~600k tracked objects (~0.4 s), so benchmarks call
:func:`settle` once after their setup instead, and a collection that the
interpreter starts on its own inside a timed block is part of what is measured.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager


def median(values: list[float]) -> float:
    """The median of ``values`` (which must not be empty)."""
    return statistics.median(values)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank) of ``values``; 0 if empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[rank]


def settle() -> None:
    """Collect garbage now, outside any timed block."""
    gc.collect()


@contextmanager
def stopwatch(into: list[float]) -> Iterator[None]:
    """Append the block's wall-clock seconds to ``into``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        into.append(time.perf_counter() - start)
