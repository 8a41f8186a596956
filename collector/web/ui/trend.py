"""The overview's last hour, from the history: a few cluster-wide sums, kept and topped up.

Why kept: a range query over the last hour reads every card's and vGPU's
points (about 2 s at 5,000 nodes), far over a page's 100 ms. So each reader's
series (the cluster's, or one tenant's: its namespaces restrict every
selector, as its queries are) are kept. The page adds the point of now from
the read model its totals come from, so the chart ends at the totals shown.
Steps are aligned to multiples of the step, as chargeback's are, and points
older than the hour are dropped.

A reader's page that comes in the step after the last one kept records that
point of now as the step's (a page refreshing every interval never queries);
one that finds whole steps missing (its first, or after a pause) starts a
top-up in the background, at most once an interval: a range query over the
steps not charted yet, through the collector's one engine and its limits, as
``/prometheus``'s queries (:mod:`collector.promql.engine`). Why not a query every
step: at 5,000 nodes one step's three sums took 0.9-1.9 s of CPU every 30 s,
and a view served meanwhile took up to three times its time. A request never
waits for a top-up, but the very first one of a reader waits
:data:`FIRST_WAIT` seconds for it, so a small cluster's page has its chart at
once.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import cast

from aiohttp import web

from collector.normalise import schema
from collector.promql.engine import Engine, Queries
from collector.promql.values import QueryError, RangeSeries
from collector.views.chargeback import MEMORY_USED
from collector.web.ui.charts import Series
from core.tasks import Flights

log = logging.getLogger(__name__)

SPAN = 3600.0
"""Seconds of history the overview charts."""
POINTS = 120
"""Most steps charted over :data:`SPAN`; the step is the interval or coarser."""
FIRST_WAIT = 0.05
"""Seconds a reader's first request waits for its first top-up."""
READERS = 64
"""Readers (the cluster, tenants' namespace sets) whose series are kept at most."""
WORKS = "overview chart"
"""The engine's identity of the top-ups, which readers of the same namespaces share."""

CLUSTER: Mapping[str, str] = {
    "memory used": "sum(hami_host_gpu_memory_used_bytes)",
    "memory allocated": f"sum({schema.MEMORY_ALLOCATED})",
    "utilisation": "avg(hami_host_gpu_utilization_ratio)",
}
"""A cluster reader's measures: the cards' memory and utilisation (0-100), vGPU allocations."""
TENANT: Mapping[str, str] = {
    "memory used": f"sum({MEMORY_USED})",
    "memory allocated": f"sum({schema.MEMORY_ALLOCATED})",
    "utilisation": "avg(hami_container_device_utilization_ratio)",
}
"""A tenant's: its own vGPUs' (a card's series have no namespace, so a tenant sees none), their
memory used counted as chargeback and the read model count it (:data:`MEMORY_USED`)."""


def measures(namespaces: frozenset[str] | None) -> Mapping[str, str]:
    """The PromQL of each charted measure for a reader of ``namespaces`` (None: the cluster)."""
    return CLUSTER if namespaces is None else TENANT


@dataclass
class _Kept:
    """One reader's points per measure, up to the step ``last``."""

    points: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    last: float = -math.inf
    checked: float = -math.inf


class Trend:
    """Keeps each reader's last hour of :func:`measures` (``interval``: the scrape interval)."""

    def __init__(
        self,
        engine: Engine,
        interval: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._engine = engine
        self._interval = interval
        self._step = max(interval, SPAN / POINTS)
        self._clock = clock
        self._kept: dict[frozenset[str] | None, _Kept] = {}
        self._top_ups: Flights[frozenset[str] | None, None] = Flights("the overview's chart")

    async def series(
        self, namespaces: frozenset[str] | None, now: Mapping[str, float | None]
    ) -> dict[str, Series]:
        """The reader's series by measure, as kept, each ending at ``now``'s value of it
        (None: no point now); a top-up starts when a step is due."""
        kept = self._kept.get(namespaces)
        if kept is None:
            kept = self._kept[namespaces] = _Kept()
            while len(self._kept) > READERS:
                self._forget(next(iter(self._kept)))
        at = self._clock()
        due = math.floor(at / self._step) * self._step
        top_up = self._top_ups.flight(namespaces)
        if top_up is None and kept.last == due - self._step:
            self._record(kept, at, due, now)
        elif (
            top_up is None and due > kept.last and time.monotonic() - kept.checked >= self._interval
        ):
            top_up = self._top_ups.start(namespaces, partial(self._top_up, kept, namespaces))
        if kept.last == -math.inf and top_up is not None:
            await asyncio.wait({top_up}, timeout=FIRST_WAIT)
        found = {}
        for name in measures(namespaces):
            held = kept.points.get(name, [])
            value = now.get(name)
            if value is None or not math.isfinite(value) or (held and held[-1][0] >= at):
                found[name] = Series(name, held[:])  # no point now, or recorded just now
            else:
                found[name] = Series(name, [*held, (at, value)])
        return found

    def _record(self, kept: _Kept, at: float, step: float, now: Mapping[str, float | None]) -> None:
        """The page's point of now (at ``at``) as the step ``step``'s, the one after the last
        kept; a measure without one has no point, as a sum over no series has none."""
        for name, value in now.items():
            if value is not None and math.isfinite(value):
                kept.points.setdefault(name, []).append((at, value))
        _drop_before(kept, at - SPAN)
        kept.last = step

    async def refresh(self, namespaces: frozenset[str] | None) -> None:
        """Top up the reader's series now and wait for it (a bench times one top-up)."""
        kept = self._kept.setdefault(namespaces, _Kept())
        await self._top_ups.join(namespaces, partial(self._top_up, kept, namespaces))

    async def running(self, app: web.Application) -> AsyncIterator[None]:
        """A cleanup context: once the app stops, every top-up in flight is cancelled and
        awaited."""
        yield
        await self._top_ups.stop()
        self._kept.clear()

    def _forget(self, namespaces: frozenset[str] | None) -> None:
        del self._kept[namespaces]
        self._top_ups.cancel(namespaces)

    async def _top_up(self, kept: _Kept, namespaces: frozenset[str] | None) -> None:
        now, step = self._clock(), self._step
        last = math.floor(now / step) * step
        first = max(kept.last + step, (math.floor((now - SPAN) / step) + 1) * step)
        try:
            found = await self._query(namespaces, first, last) if first <= last else {}
        except QueryError as exc:
            log.warning("the overview's chart could not read the history: %s", exc)
            return
        finally:
            kept.checked = time.monotonic()
        for name, points in found.items():
            held = kept.points.setdefault(name, [])
            held.extend(points)
        _drop_before(kept, now - SPAN)
        kept.last = max(kept.last, last)

    async def _query(
        self, namespaces: frozenset[str] | None, first: float, last: float
    ) -> dict[str, list[tuple[float, float]]]:
        """Each measure's points from step ``first`` to step ``last``, in one work of the engine."""
        chosen = measures(namespaces)

        def run(queries: Queries) -> dict[str, list[tuple[float, float]]]:
            found = {}
            for name, expr in chosen.items():
                answer = cast(list[RangeSeries], queries.range(expr, first, last, self._step).run())
                # a sum: one series or none
                found[name] = [(t, v) for one in answer for t, v in one.points if math.isfinite(v)]
            return found

        return await self._engine.run(run, identity=WORKS, namespaces=namespaces)


def _drop_before(kept: _Kept, oldest: float) -> None:
    """Forget the points at or before ``oldest``."""
    for held in kept.points.values():
        del held[: sum(1 for t, _ in held if t <= oldest)]
