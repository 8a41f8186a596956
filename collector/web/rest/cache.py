"""Every node's :class:`Presented` form, kept while the node's view is current, and kept warm.

A request rebuilds only the nodes whose view changed since it was last
presented; between requests, :meth:`NodeCache.keep_warm` does that work in
short slices so a request finds little left to rebuild.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from collector.store import Store
from collector.web.rest.presented import Presented
from collector.web.usage import UsageIndex

log = logging.getLogger(__name__)

WARM_PERIOD_S = 0.25
WARM_BUDGET_S = 0.01


class NodeCache:
    """The presented form of each node with data, valid while that node's view is current."""

    def __init__(self) -> None:
        self._index = UsageIndex()
        self._presented: dict[str, Presented] = {}

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
        for node in nodes:
            view = store.view(node)
            cached = self._presented.get(node)
            if view is None or (cached is not None and cached.usage.view is view):
                continue
            if time.perf_counter() > deadline:
                return False
            self.one(store, node)
        self._prune(nodes)
        return True

    async def keep_warm(self, store: Store) -> None:
        """Forever: a slice of at most ``WARM_BUDGET_S`` of :meth:`refresh` every ``WARM_PERIOD_S``.

        The event loop is never held for long, and a failed slice is logged, not fatal.
        """
        while True:
            await asyncio.sleep(WARM_PERIOD_S)
            try:
                self.refresh(store, WARM_BUDGET_S)
            except Exception:
                log.exception("refreshing the REST read model failed")

    def _prune(self, nodes: Iterable[str]) -> None:
        live = set(nodes)
        for gone in self._presented.keys() - live:
            del self._presented[gone]
        self._index.prune(live)
