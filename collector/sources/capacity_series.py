"""The capacity series: what each node's Node object registers of its cards, one batch per node.

Every ``interval`` the node directory's capacities (:class:`~collector.sources.nodes.NodeDirectory`)
become, per node, one :class:`~collector.normalise.batch.Batch` of
:data:`~collector.normalise.schema.CAPACITY_FAMILIES` from a source of kind
``registration``, which ranks below every monitor, agent and the pod watch.

Like the allocation source, this one reads the store: a card's series carry
the very labels its monitor's or agent's series have (matched by
``device_uuid``), so they join one to one whatever fed the card (a Volcano
monitor sends no ``device_type``; a 7-field HAMi record no index). Only where
no monitor or agent reports a card does it label the card itself, through
:func:`collector.normalise.labelsets.card`. Where none reports the card's
``hami_host_gpu_memory_total_bytes``, the registered memory stands in for it;
where one does (an agent reads NVML), that physical total is served, and the
registered memory over it is ``hami_host_gpu_memory_oversubscription_ratio``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass

from collector.exposition.parse import Labels
from collector.normalise import labelsets, schema
from collector.normalise.batch import Batch, Series, Source
from collector.normalise.registration import Capacity
from collector.normalise.schema import SourceKind
from collector.sources.nodes import NodeDirectory
from collector.sources.refreshed import Refreshed
from collector.store.latest import Held, NodeView, Store

log = logging.getLogger(__name__)

_CARD_KEYS = (
    (schema.MEMORY_TOTAL + "{").encode(),
    (schema.MEMORY_USED + "{").encode(),
)
"""Families whose series name every card a monitor or agent reports, the total first."""

_Found = tuple[Labels, bytes | None, int]
"""A card's labels in a batch, and the key and place of its total there (None: no total)."""
_Scanned = tuple[object, dict[str, _Found]]
"""What a batch's keys (the object they were read from) say of each card, by ``device_uuid``."""


@dataclass(frozen=True, slots=True)
class CapacityConfig:
    """How often the batches are remade, and the rank they get (below every other source)."""

    interval: float
    priority: int


@dataclass(frozen=True, slots=True)
class ReportedCard:
    """A card as the node's monitors and agents report it: its labels, its physical total."""

    labels: Labels
    total: float | None


class CapacitySource(Refreshed):
    """Puts each registering node's capacity batch into the store every interval."""

    def __init__(
        self,
        nodes: NodeDirectory,
        store: Store,
        config: CapacityConfig,
        malformed: Callable[[str], None],
        holds: Callable[[str], bool] = lambda node: True,
    ) -> None:
        self._nodes = nodes
        self._store = store
        self._config = config
        self._malformed = malformed
        self._holds = holds
        self._sources: dict[str, Source] = {}
        self._reported: set[tuple[str, str]] = set()
        self._cards = CardIndex()
        self._batches: dict[str, tuple[Capacity, Mapping[str, ReportedCard], Batch]] = {}

    @property
    def interval(self) -> float:
        """Seconds between two refreshes: the collector's interval."""
        return self._config.interval

    def refreshing(self, chunk: int = 100) -> Iterator[None]:
        """:meth:`refresh` in steps of ``chunk`` nodes (a big cluster's takes a while)."""
        now, received = time.time(), time.monotonic()
        found = {c.node: c for c in self._nodes.capacities() if c.node and self._holds(c.node)}
        self._report(found.values())
        for node in self._sources.keys() - found.keys():
            self._drop(node)
        for done, (node, capacity) in enumerate(found.items(), 1):
            source = self._source(node)
            batch = self._batch(capacity, self._cards.of(self._store.view(node), source.id))
            if batch.series:
                self._store.put(source, batch, received, now)
            else:
                self._drop(node)
            if done % chunk == 0:
                yield
        self._cards.sweep()

    def _batch(self, capacity: Capacity, cards: Mapping[str, ReportedCard]) -> Batch:
        """The node's batch, made again only when its record or its reported cards changed."""
        cached = self._batches.get(capacity.node)
        if cached is not None and cached[0] == capacity and cached[1] == cards:
            return cached[2]
        batch = node_batch(capacity, cards)
        self._batches[capacity.node] = (capacity, cards, batch)
        return batch

    def _source(self, node: str) -> Source:
        source = self._sources.get(node)
        if source is None:
            source = Source(
                f"registration/{node}",
                "node watch",
                node,
                SourceKind.REGISTRATION,
                self._config.priority,
            )
            self._sources[node] = source
        return source

    def _drop(self, node: str) -> None:
        source = self._sources.pop(node, None)
        self._batches.pop(node, None)
        if source is not None:
            self._store.remove(source.id)

    def _report(self, capacities: Collection[Capacity]) -> None:
        """Count and log each node's unreadable record once per reason while it stays so
        (the watch reads a node again at every status update)."""
        current: set[tuple[str, str]] = set()
        for capacity in capacities:
            for problem in capacity.problems:
                pair = (capacity.node, problem.reason)
                if pair not in self._reported and pair not in current:
                    self._malformed(problem.reason)
                    log.warning(
                        "node %s: its %s GPU record: %s; left out",
                        capacity.node,
                        capacity.record,
                        problem.detail,
                    )
                current.add(pair)
        self._reported = current


class CardIndex:
    """The cards each monitor's and agent's latest batch reports, by ``device_uuid``.

    A batch's cards are found by reading its keys; the key set of a scraped
    node stays the same from one scrape to the next (the very same keys tuple),
    so it is read once, and only the totals' values again.
    """

    def __init__(self) -> None:
        self._known: dict[str, _Scanned] = {}
        self._used: dict[str, _Scanned] = {}

    def of(self, view: NodeView | None, own: str) -> dict[str, ReportedCard]:
        """The node's reported cards: the first ranked source's labels of each, preferring
        a source that reports the card's total."""
        cards: dict[str, ReportedCard] = {}
        for held in view.sources if view is not None else ():
            if held.source.id == own or held.source.kind in schema.WATCH_KINDS:
                continue
            for uuid, card in self._read(held).items():
                known = cards.get(uuid)
                if known is None or (known.total is None and card.total is not None):
                    cards[uuid] = card
        return cards

    def sweep(self) -> None:
        """Forget the batches of sources not read since the last sweep."""
        self._known, self._used = self._used, {}

    def _read(self, held: Held) -> dict[str, ReportedCard]:
        series = held.batch.series
        token: object = series.packed()[0] if isinstance(series, Series) else series
        cached = self._used.get(held.source.id) or self._known.get(held.source.id)
        if cached is None or cached[0] is not token:
            cached = (token, _scan(series))
        self._used[held.source.id] = cached
        values = series.packed()[1] if isinstance(series, Series) else None
        return {
            uuid: ReportedCard(
                labels,
                None if key is None else values[place] if values is not None else series[key],
            )
            for uuid, (labels, key, place) in cached[1].items()
        }


def _scan(series: Mapping[bytes, float]) -> dict[str, _Found]:
    """Each card's labels, and the key and place of its total if it has one."""
    found: dict[str, _Found] = {}
    for place, key in enumerate(series):
        total = key.startswith(_CARD_KEYS[0])
        if not total and not key.startswith(_CARD_KEYS[1]):
            continue
        labels = labelsets.key_labels(key)[1]
        uuid = dict(labels).get("device_uuid")
        if not uuid:
            continue
        if total:
            found[uuid] = (labels, key, place)
        else:
            found.setdefault(uuid, (labels, None, place))
    return found


def node_batch(capacity: Capacity, cards: Mapping[str, ReportedCard]) -> Batch:
    """The capacity series of one node, given the cards its monitors and agents report."""
    series: dict[bytes, float] = {}
    if capacity.count is not None:
        series[labelsets.key(schema.NODE_GPU_COUNT, ())] = float(capacity.count)
    for card in capacity.cards:
        reported = cards.get(labelsets.device_uuid(card.uuid))
        labels = (
            reported.labels
            if reported is not None
            else labelsets.card(card.index, card.model, card.uuid)
        )
        registered, split, healthy, total, ratio = labelsets.keys(
            (
                schema.MEMORY_REGISTERED,
                schema.SPLIT_COUNT,
                schema.HEALTHY,
                schema.MEMORY_TOTAL,
                schema.MEMORY_OVERSUBSCRIPTION,
            ),
            labels,
        )
        series[registered] = float(card.memory)
        series[split] = float(card.split)
        series[healthy] = 1.0 if capacity.healthy(card) else 0.0
        info = labelsets.registered_card(labels, card.mode, card.model)
        series[labelsets.key(schema.REGISTRATION_INFO, info)] = 1.0
        physical = None if reported is None else reported.total
        if physical is None:
            series[total] = float(card.memory)
        elif physical > 0:
            series[ratio] = card.memory / physical
    if capacity.card_memory is not None:  # GPU Feature Discovery: one size for the node's cards
        for reported in cards.values():
            if reported.total is None:
                series[labelsets.key(schema.MEMORY_TOTAL, reported.labels)] = float(
                    capacity.card_memory
                )
    return Batch(series, samples=len(series), families=schema.CAPACITY_FAMILIES)
