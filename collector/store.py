"""The latest good batch of every source, grouped by node, deduplicated on read.

Sources (scrape targets, agents) put whole batches; outputs read per-node views.
The store never reaches back into a source. Time here is ``time.monotonic()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from collector import schema
from collector.batch import Batch, Source
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


class Store:
    """Keeps per node, per source, the latest good batch; forgets what is gone."""

    def __init__(self, stale_after: float, history: History | None = None) -> None:
        self.stale_after = stale_after
        self.history = history or History()
        self.generation = 0
        self._nodes: dict[str, dict[str, Held]] = {}
        self._node_of: dict[str, str] = {}
        self._views: dict[str, NodeView] = {}

    def put(
        self, source: Source, batch: Batch, received: float, sampled: float | None = None
    ) -> None:
        """Replace ``source``'s batch: series absent from it vanish at once.

        ``received`` is the monotonic arrival time (for staleness); ``sampled`` the
        wall time the readings were taken, for the history (default: now).
        """
        if self._node_of.get(source.id, source.node) != source.node:
            self._forget(source.id)
        self._nodes.setdefault(source.node, {})[source.id] = Held(source, batch, received)
        self._node_of[source.id] = source.node
        self._changed(source.node, sampled)

    def remove(self, source_id: str) -> None:
        """Forget a source that is gone (pod deleted, not Ready); its series vanish."""
        self._forget(source_id)

    def expire(self, now: float) -> list[Source]:
        """Forget sources whose latest good batch is older than ``stale_after``."""
        old = [
            held.source
            for held_by_id in self._nodes.values()
            for held in held_by_id.values()
            if now - held.received >= self.stale_after
        ]
        for source in old:
            self._forget(source.id)
        return old

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
                merged.update(held.batch.series)
                merged_families.update(held.batch.families)
            series, families = merged, merged_families
        view = NodeView(node, self.generation, series, families, tuple(ranked))
        self._views[node] = view
        return view

    def _forget(self, source_id: str) -> None:
        node = self._node_of.pop(source_id, None)
        if node is None:
            return
        held_by_id = self._nodes[node]
        del held_by_id[source_id]
        if not held_by_id:
            del self._nodes[node]
        self._changed(node)

    def _changed(self, node: str, sampled: float | None = None) -> None:
        self.generation += 1
        self._views.pop(node, None)
        view = self.view(node)
        self.history.record(node, view.series if view else {}, sampled)
