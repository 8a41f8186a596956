"""The latest good batch of every source, grouped by node, deduplicated on read.

Sources (scrape targets, agents) put whole batches; outputs read per-node views.
The store never reaches back into a source. Time here is ``time.monotonic()``.

The history is fed per source: each put records, on that source's own time
axis, the series the source wins in the node's view, so a series is recorded
once however many sources offer it. With each put or removal the history gets
the node's view too: a series that leaves the node (gone from its source's
batch, or its source removed or expired, and offered by no other source) is
marked stale; one that passes to another source is not.

Observers (remote write) are told the same, synchronously and in order: the
series a put records, at its time, and the series that leave a node. They must
only enqueue: a put never waits on an output.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from collector.normalise import schema
from collector.normalise.batch import Batch, Source
from collector.tsdb.history import History


@dataclass(frozen=True, slots=True)
class Held:
    """A source's latest good batch and when it arrived (``received``, monotonic seconds)."""

    source: Source
    batch: Batch
    received: float


@dataclass(frozen=True, slots=True)
class NodeView:
    """One node's deduplicated series; ``generation`` changes whenever they may have."""

    node: str
    generation: int
    series: Mapping[bytes, float]
    families: Mapping[str, schema.Family]
    sources: tuple[Held, ...]


class Observer(Protocol):
    """Told of every change the history records; must return at once (enqueue only).

    The mappings and collections it is handed are never changed afterwards; it
    may keep them.
    """

    def accepted(self, node: str, series: Mapping[bytes, float], sampled: float) -> None:
        """``series`` of ``node`` were read at ``sampled`` (wall time)."""

    def vanished(self, node: str, keys: Collection[bytes], when: float) -> None:
        """``keys`` left ``node`` at ``when`` (wall time): no source offers them now."""


class Store:
    """Keeps per node, per source, the latest good batch; forgets what is gone."""

    def __init__(self, stale_after: float, history: History | None = None) -> None:
        self.stale_after = stale_after
        self.history = history or History()
        self.generation = 0
        self._nodes: dict[str, dict[str, Held]] = {}
        self._node_of: dict[str, str] = {}
        self._views: dict[str, NodeView] = {}
        self._observers: list[Observer] = []
        # node -> generation of its last change, oldest first: readers that keep
        # something per node (the /metrics page) find what changed without a walk
        self._touched: dict[str, int] = {}
        self._touched_floor = 0
        # at most the oldest held batch's arrival: expire() walks every source only once
        # one may be stale (a walk a second was ~3% of the CPU at 5,000 targets, py-spy)
        self._oldest = math.inf

    def observe(self, observer: Observer) -> None:
        """Tell ``observer`` of every later change (see :class:`Observer`)."""
        self._observers.append(observer)

    def unobserve(self, observer: Observer) -> None:
        """Stop telling ``observer``."""
        self._observers.remove(observer)

    def put(
        self, source: Source, batch: Batch, received: float, sampled: float | None = None
    ) -> None:
        """Replace ``source``'s batch: series absent from it vanish at once.

        ``received`` is the monotonic arrival time (for staleness); ``sampled`` the
        wall time the readings were taken, for the history (default: now).
        """
        if self._node_of.get(source.id, source.node) != source.node:
            self._forget(source.id)
        before = self.view(source.node) if self._observers else None
        self._nodes.setdefault(source.node, {})[source.id] = Held(source, batch, received)
        if received < self._oldest:
            self._oldest = received
        self._node_of[source.id] = source.node
        view = self._changed(source.node)
        assert view is not None
        won = _won(view, source.id)
        self.history.record(view.node, won, sampled, source.id, view.series)
        if self._observers:
            when = time.time() if sampled is None else sampled
            self._tell(view.node, before, view, won, when)

    def remove(self, source_id: str) -> None:
        """Forget a source that is gone (pod deleted, not Ready); its series vanish."""
        self._forget(source_id)

    def expire(self, now: float) -> list[Source]:
        """Forget sources whose latest good batch is older than ``stale_after``."""
        if now - self._oldest < self.stale_after:
            return []
        old, oldest = [], math.inf
        for held_by_id in self._nodes.values():
            for held in held_by_id.values():
                if now - held.received >= self.stale_after:
                    old.append(held.source)
                elif held.received < oldest:
                    oldest = held.received
        self._oldest = oldest
        for source in old:
            self._forget(source.id)
        return old

    def changed_since(self, generation: int) -> list[str] | None:
        """Nodes changed after ``generation``, the removed included, newest first.

        None if changes that old are no longer known (the reader must look at
        every node): the log forgets removed nodes once they outnumber the live.
        """
        if generation < self._touched_floor:
            return None
        changed = []
        for node in reversed(self._touched):
            if self._touched[node] <= generation:
                break
            changed.append(node)
        return changed

    def to_revisit(self, generation: int, known: Iterable[str]) -> list[str]:
        """What a reader up to ``generation`` that keeps something per node must look at
        again: the nodes changed since, or, where the log does not reach back, every node
        and every one in ``known``."""
        changed = self.changed_since(generation)
        return [*self.nodes(), *known] if changed is None else changed

    def nodes(self) -> list[str]:
        """Return the nodes that have data, sorted."""
        return sorted(self._nodes)

    def view(self, node: str) -> NodeView | None:
        """Return ``node``'s series, deduplicated: priority first, then freshness."""
        view = self._views.get(node)
        if view is not None:
            return view
        held_by_id = self._nodes.get(node)
        if not held_by_id:
            return None
        ranked = sorted(held_by_id.values(), key=lambda h: (h.source.priority, -h.received))
        if len(ranked) == 1:
            series: Mapping[bytes, float] = ranked[0].batch.series
            families = ranked[0].batch.families
        else:
            merged: dict[bytes, float] = {}
            merged_families: dict[str, schema.Family] = {}
            for held in reversed(ranked):
                merged.update(held.batch.series.items())  # pairs: no key index built
                merged_families.update(held.batch.families)
            series, families = merged, merged_families
        view = NodeView(node, self.generation, series, families, tuple(ranked))
        self._views[node] = view
        return view

    def _forget(self, source_id: str) -> None:
        node = self._node_of.pop(source_id, None)
        if node is None:
            return
        before = self.view(node) if self._observers else None
        held_by_id = self._nodes[node]
        del held_by_id[source_id]
        if not held_by_id:
            del self._nodes[node]
        view = self._changed(node)
        self.history.forget(node, source_id, view.series if view is not None else {})
        if self._observers:
            self._tell(node, before, view, {}, time.time())

    def _tell(
        self,
        node: str,
        before: NodeView | None,
        after: NodeView | None,
        won: Mapping[bytes, float],
        when: float,
    ) -> None:
        gone: set[bytes] = set()
        if before is not None:
            gone = before.series.keys() - (after.series.keys() if after is not None else set())
        for observer in self._observers:
            if won:
                observer.accepted(node, won, when)
            if gone:
                observer.vanished(node, gone, when)

    def _changed(self, node: str) -> NodeView | None:
        self.generation += 1
        self._views.pop(node, None)
        self._touched.pop(node, None)
        self._touched[node] = self.generation
        if len(self._touched) > 2 * len(self._nodes) + 1024:
            for gone in [n for n in self._touched if n not in self._nodes]:
                self._touched_floor = max(self._touched_floor, self._touched.pop(gone))
        return self.view(node)


def _won(view: NodeView, source_id: str) -> Mapping[bytes, float]:
    """The series of ``source_id``'s batch that it wins in ``view`` (the history records those)."""
    above: list[Mapping[bytes, float]] = []
    for held in view.sources:
        mine = held.batch.series
        if held.source.id == source_id:
            if not above:
                return mine
            return {key: value for key, value in mine.items() if not any(key in s for s in above)}
        above.append(mine)
    return {}
