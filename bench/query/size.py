"""The history's size: bytes per kept point by tracemalloc and by walking its objects."""

from __future__ import annotations

import gc
import math
import sys
import tracemalloc
from collections.abc import Mapping
from typing import Any

from bench.query.setup import (
    HISTORY_MAX_POINTS,
    SPAN,
)
from collector.tsdb.history import History


def traced_bytes_per_point(
    traced: list[list[Mapping[bytes, float]]], start: float, step: float
) -> dict[str, Any]:
    """Feed a fresh History the kept batches under tracemalloc: its bytes per kept point."""
    names = [f"trace-{i}" for i in range(len(traced[0]) if traced else 0)]
    history = History(retention=SPAN, max_points=HISTORY_MAX_POINTS)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for k, batches in enumerate(traced):
            t = start + k * step
            for name, series in zip(names, batches, strict=True):
                history.record(name, series, t)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return {
        "nodes": len(names),
        "points": history.points,
        "bytes": held,
        "bytes_per_point": held / history.points if history.points else math.inf,
    }


_OPAQUE = (type, type(sys), type(len), type(lambda: 0))


def walked_bytes(root: object) -> dict[str, int]:
    """``sys.getsizeof`` of every object reachable from ``root`` (not types, modules, functions).

    ``bytes`` objects (the series keys) are summed apart as well.
    """
    seen: set[int] = set()
    stack = [root]
    total = keys = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _OPAQUE):
            continue
        seen.add(id(obj))
        size = sys.getsizeof(obj)
        total += size
        if isinstance(obj, bytes):
            keys += size
        stack.extend(gc.get_referents(obj))
    return {"bytes": total, "key_bytes": keys, "objects": len(seen)}
