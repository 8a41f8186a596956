"""Every node's :class:`Presented` form, kept while the node's view is current, and kept warm.

A request rebuilds only the nodes whose view changed since it was last
presented; between requests, :meth:`NodeCache.keep_warm` does that work in
short slices so a request finds little left to rebuild. It does so only while
the API is being read: :data:`WARM_AFTER_READ_S` after the last read it stops
and waits for the next one, so a collector whose REST API nobody reads spends
nothing on it (the first read after a quiet spell rebuilds what it needs).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Iterator

from collector.store import Store
from collector.web.rest.presented import Presented
from collector.web.usage import UsageIndex
from core.durations import duration

log = logging.getLogger(__name__)

WARM_PERIOD_S = 0.25
WARM_BUDGET_S = 0.01
WARM_AFTER_READ_S = 300.0
"""How long after the last read the cache is kept warm."""


class NodeCache:
    """The presented form of each node with data, valid while that node's view is current.

    ``clock`` (monotonic seconds) dates the reads; ``period`` is the pause
    between two warming slices.
    """

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, period: float = WARM_PERIOD_S
    ) -> None:
        self._index = UsageIndex()
        self._presented: dict[str, Presented] = {}
        self._clock = clock
        self._period = period
        self._last_read = -WARM_AFTER_READ_S
        self._read = asyncio.Event()

    def read(self) -> None:
        """Note a read of the API: keep the cache warm for :data:`WARM_AFTER_READ_S` from now."""
        self._last_read = self._clock()
        self._read.set()

    @property
    def idle(self) -> bool:
        """Whether warming waits for a read (no read within :data:`WARM_AFTER_READ_S`)."""
        return not self._read.is_set()

    def all(self, store: Store) -> list[Presented]:
        """Every node of the store that has a view, in the store's order."""
        out = []
        for node in store.nodes():
            presented = self.one(store, node)
            if presented is not None:
                out.append(presented)
        if len(self._presented) > len(out):
            self._prune(p.usage.node for p in out)
        return out

    def one(self, store: Store, node: str) -> Presented | None:
        """One node's presented form, rebuilt if its view changed; None if it has no view."""
        view = store.view(node)
        if view is None:
            return None
        presented = self._presented.get(node)
        if presented is None or presented.usage.view is not view:
            presented = Presented(self._index.usage(view))
            self._presented[node] = presented
        return presented

    def refresh(self, store: Store, budget: float) -> bool:
        """Rebuild stale node summaries for about ``budget`` seconds; True once all are current."""
        deadline = time.perf_counter() + budget
        nodes = store.nodes()
        for node in self._stale(store, nodes):
            if time.perf_counter() > deadline:
                return False
            self.one(store, node)
        self._prune(nodes)
        return True

    def stale(self, store: Store) -> int:
        """How many nodes with a view have no presented form of that view."""
        return sum(1 for _ in self._stale(store, store.nodes()))

    async def keep_warm(self, store: Store) -> None:
        """Forever: while the API is read, a slice of :meth:`refresh` every ``period``.

        A slice takes at most ``WARM_BUDGET_S``, so the event loop is never held
        for long. A failed slice ends the task (its supervisor restarts it).
        """
        while True:
            await self._read.wait()
            await asyncio.sleep(self._period)
            if self._clock() - self._last_read > WARM_AFTER_READ_S:
                self._read.clear()
                log.debug(
                    "the REST API was not read for %s: warming stops", duration(WARM_AFTER_READ_S)
                )
                continue
            self.refresh(store, WARM_BUDGET_S)

    def _stale(self, store: Store, nodes: Iterable[str]) -> Iterator[str]:
        for node in nodes:
            view = store.view(node)
            cached = self._presented.get(node)
            if view is not None and (cached is None or cached.usage.view is not view):
                yield node

    def _prune(self, nodes: Iterable[str]) -> None:
        live = set(nodes)
        for gone in self._presented.keys() - live:
            del self._presented[gone]
        self._index.prune(live)
