"""Every node's :class:`Presented` form, kept while the node's view is current, and kept warm.

A request rebuilds only the nodes whose view changed since it was last
presented; between requests, :meth:`NodeCache.keep_warm` does that work in
slices of :data:`WARM_SLICE_S` so a request finds little left to rebuild. In
steady state every node's view changes every scrape or push interval, so the
warmer must keep pace with the whole cluster: while nodes are stale it pauses
only :data:`WARM_PAUSE_S` between slices, and once all are current it looks
again every :data:`WARM_PERIOD_S`. It works only while the API is being read:
:data:`WARM_AFTER_READ_S` after the last read it stops and waits for the next
one, so a collector whose API nobody reads spends nothing on it (the first
read after a quiet spell rebuilds what it needs).

The warmer is the one task here, a long-lived one under the app's supervisor.
Rebuilds run on the event loop without a pause, a request's as the warmer's: no
two ever run at once, so nothing is in flight for requests to share, and none of
this is a :class:`~core.tasks.Flights`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from collector.store.latest import NodeView, Store
from collector.views.presented import Presented
from collector.views.usage import UsageIndex
from core.durations import duration

log = logging.getLogger(__name__)

WARM_SLICE_S = 0.01
"""The longest the warmer holds the event loop at a time."""
WARM_PAUSE_S = 0.01
"""The pause between two slices while nodes are stale: at most half a core.

At 5,000 nodes changing every 15 s, rebuilding every node's summary costs
0.3-0.6 s of CPU an interval (``python -m bench ui``), and with the containers
and rows the views and REST's pod list read, the overview's sums and a sort's
runs (the cache's followers) about 2.5-3 s. The work is the same whether the
warmer or a request does it; the share decides how far behind the cluster a
request finds the cache: at a quarter of a core (30 ms pauses) the first
request after a round found 1,170 of 5,000 nodes stale and rebuilt them
(0.5-1 s), at half a core 35-170.
"""
VIEW_REBUILDS = 16
"""Nodes whose view changed a page for people presents again at most, per request
(:meth:`NodeCache.all`): at 5,000 nodes changing every 15 s, each request found 40-70 such
nodes in steady state and 270-460 right after the overview chart's top-up had held the GIL,
at ~0.7 ms a node (its summary, containers, rows and the views' followers), which set the
views' p99 (130-200 ms). Past the bound a node shows its previous figures, at most a warming
pass old; REST, which a push is read back through, presents every one."""
WARM_PERIOD_S = 0.25
"""How often the warmer looks for stale nodes once all are current."""
WARM_AFTER_READ_S = 300.0
"""How long after the last read the cache is kept warm."""


class Follower(Protocol):
    """What keeps figures of its own per node (a view's sums, its sorted rows): told of each
    node as it is presented again and of the nodes kept when others were dropped, so its
    figures follow the read model as warming rebuilds it, not a request later."""

    def presented(self, presented: Presented) -> None:
        """``presented`` is its node's form from now on."""

    def pruned(self, live: set[str]) -> None:
        """Only the nodes ``live`` are held from now on."""


class NodeCache:
    """The presented form of each node with data, valid while that node's view is current.

    ``clock`` (monotonic seconds) dates the reads; ``pause`` is the pause
    between two warming slices while nodes are stale, ``period`` the one once
    all are current.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        period: float = WARM_PERIOD_S,
        pause: float = WARM_PAUSE_S,
    ) -> None:
        self._index = UsageIndex()
        self._presented: dict[str, Presented] = {}
        self._clock = clock
        self._period = period
        self._pause = pause
        self._current = -1
        """The store's generation when the last warming pass began: every node changed
        before it has been presented since."""
        self._pass: Iterator[str] | None = None
        self._pass_generation = -1
        self._gone = False
        """Whether the pass met a node the store no longer holds."""
        self._last_read = -WARM_AFTER_READ_S
        self._read = asyncio.Event()
        self._followers: list[Follower] = []

    def follow(self, follower: Follower) -> None:
        """Tell ``follower`` of every node presented from now on (each once, by identity)."""
        if all(f is not follower for f in self._followers):
            self._followers.append(follower)

    def read(self) -> None:
        """Note a read of the API: keep the cache warm for :data:`WARM_AFTER_READ_S` from now."""
        self._last_read = self._clock()
        self._read.set()

    @property
    def idle(self) -> bool:
        """Whether warming waits for a read (no read within :data:`WARM_AFTER_READ_S`)."""
        return not self._read.is_set()

    def all(self, store: Store, rebuilds: int | None = None) -> list[Presented]:
        """Every node of the store that has a view, in the store's order.

        ``rebuilds``: at most that many nodes whose view changed are presented
        again; the others that have a presented form are served from it (warming
        presents them again soon). A node never presented is presented whatever
        the bound. None: every one, as REST reads (a push then a read sees the push).
        """
        out = []
        left = math.inf if rebuilds is None else rebuilds
        for node in store.nodes():
            view = store.view(node)
            if view is None:
                continue
            presented = self._presented.get(node)
            if presented is None or (presented.usage.view is not view and left > 0):
                presented = self._present(node, view)
                left -= 1
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
            presented = self._present(node, view)
        return presented

    def _present(self, node: str, view: NodeView) -> Presented:
        earlier = self._presented.get(node)
        wanted = frozenset() if earlier is None else earlier.wanted
        presented = Presented(self._index.usage(view), wanted)
        self._presented[node] = presented
        for follower in self._followers:
            follower.presented(presented)
        return presented

    def refresh(self, store: Store, budget: float) -> bool:
        """Rebuild stale nodes' presented forms for about ``budget`` seconds (one node at
        least); True once all are current.

        A pass looks only at the nodes the store changed since the last pass ended,
        and the next slice goes on where this one stopped: a slice with nothing to do
        costs little, and a pass over a cluster that all changed is linear.
        """
        deadline = time.perf_counter() + budget
        if self._pass is None:
            self._pass = iter(store.to_revisit(self._current, list(self._presented)))
            self._pass_generation = store.generation
        for node in self._pass:
            view = store.view(node)
            if view is None:
                self._gone = self._gone or node in self._presented
                continue
            cached = self._presented.get(node)
            if cached is not None and cached.usage.view is view:
                continue
            self._present(node, view).build_wanted()
            if time.perf_counter() > deadline:
                return False
        if self._gone:
            self._prune(store.nodes())
        self._current, self._pass, self._gone = self._pass_generation, None, False
        return True

    def stale(self, store: Store) -> int:
        """How many nodes with a view have no presented form of that view."""
        return sum(1 for _ in self._stale(store, store.nodes()))

    async def keep_warm(self, store: Store) -> None:
        """Forever: while the API is read, slices of :meth:`refresh`, ``pause`` apart while
        nodes are stale, ``period`` apart once all are current.

        A slice takes about :data:`WARM_SLICE_S`, so the event loop is never held
        for long. A failed slice ends the task (its supervisor restarts it).
        """
        wait = self._period
        while True:
            await self._read.wait()
            await asyncio.sleep(wait)
            if self._clock() - self._last_read > WARM_AFTER_READ_S:
                self._read.clear()
                log.debug(
                    "the REST API was not read for %s: warming stops", duration(WARM_AFTER_READ_S)
                )
                continue
            wait = self._period if self.refresh(store, WARM_SLICE_S) else self._pause

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
        for follower in self._followers:
            follower.pruned(live)
