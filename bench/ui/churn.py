"""Steady state for the views' bench: every node's source sends a new batch each interval.

A collector scrapes its targets spread over the interval (each from an offset
hashed from its key, ``collector.sources.scrape``) and agents push on their
own clocks, so in steady state a few nodes' views change at every moment and
all of them once an interval. :class:`Churn` does that to a filled store: it
puts each node's batch again (same keys, a new value array, so a new view of
the same shape, as a scrape brings), the nodes in turn, evenly over the
interval, with the arrival time of now for staleness and the history.
"""

from __future__ import annotations

import asyncio
import time
from array import array

from collector.normalise.batch import Batch, Series
from collector.store.latest import Store

TICK_S = 0.05
"""How often the batches due since the last tick are put (a scrape loop's wake-ups)."""


class Churn:
    """Puts every node of ``store`` again once every ``interval``, spread evenly over it."""

    def __init__(self, store: Store, interval: float) -> None:
        self._store = store
        self._interval = interval
        self._nodes = store.nodes()
        self.puts = 0
        self.put_s = 0.0
        """Wall seconds spent putting (the collector's ingest, not the views' work)."""
        self._moved = asyncio.Condition()

    async def run(self) -> None:
        """Forever: every :data:`TICK_S`, the puts due by now."""
        began = time.perf_counter()
        while True:
            due = int((time.perf_counter() - began) / self._interval * len(self._nodes))
            t0 = time.perf_counter()
            while self.puts < due:
                self._put(self._nodes[self.puts % len(self._nodes)])
                self.puts += 1
            self.put_s += time.perf_counter() - t0
            async with self._moved:
                self._moved.notify_all()
            await asyncio.sleep(TICK_S)

    async def rounds(self, count: int) -> None:
        """Wait until every node has been put ``count`` more times."""
        target = self.puts + count * len(self._nodes)
        async with self._moved:
            await self._moved.wait_for(lambda: self.puts >= target)

    def _put(self, node: str) -> None:
        view = self._store.view(node)
        if view is None:
            raise RuntimeError(f"{node} left the store")
        held = view.sources[0]
        series = held.batch.series
        if not isinstance(series, Series):
            raise RuntimeError(f"{node}'s batch is not a normaliser's")
        keys, values = series.packed()
        self._store.put(held.source, Batch(Series(keys, array("d", values))), time.monotonic())
