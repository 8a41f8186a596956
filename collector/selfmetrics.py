"""The collector's own metrics, served on /metrics after the cluster's series.

Provenance lives here and not in data labels (a ``source`` data label would fork
every series when a node's source fails over).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import platform
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Concatenate, ParamSpec

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from collector import __version__
from collector.compiled import specialisations
from collector.exposition.render import format_value, render_header
from collector.normalise import labelsets
from collector.normalise.allocation import REASONS
from collector.normalise.batch import Batch, Source
from collector.normalise.registration import REASONS as REGISTRATION_REASONS
from collector.normalise.schema import Flavour
from collector.store.latest import Store
from collector.tsdb.history import History
from core.registry import WithoutCreated

P = ParamSpec("P")

_PREFIX = "hami_usage_collector_"
_SOURCE_FAMILIES = (
    ("source_up", "1 if the source's latest scrape or push succeeded."),
    (
        "source_last_success_timestamp_seconds",
        "When the source last delivered a good batch (Unix time).",
    ),
    ("source_scrape_duration_seconds", "How long the latest scrape took."),
    ("source_samples", "Samples in the source's latest good batch."),
)


def _records(
    method: Callable[Concatenate[SelfMetrics, P], None],
) -> Callable[Concatenate[SelfMetrics, P], None]:
    """Mark a method that changes our metrics: the one way ``version`` moves."""

    def record(self: SelfMetrics, /, *args: P.args, **kwargs: P.kwargs) -> None:
        method(self, *args, **kwargs)
        self._version += 1

    record.__name__, record.__doc__ = method.__name__, method.__doc__
    return record


class SelfMetrics:
    """Counters and per-source gauges; ``version`` changes whenever one of them does.

    Every change comes through a method marked :func:`_records`: a page that
    caches our lines rebuilds them when ``version`` moved.
    """

    @property
    def version(self) -> int:
        """Changes whenever a recording method ran."""
        return self._version

    def __init__(self, store: Store) -> None:
        self._version = 0
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.targets = Gauge(
            _PREFIX + "targets", "Scrape targets known, by flavour.", ["flavour"], registry=r
        )
        self._sources = _SourceTable()
        self._feeding = _Feeding(store)
        self.errors = Counter(
            _PREFIX + "scrape_errors", "Failed scrapes, by reason.", ["kind", "reason"], registry=r
        )
        self.conflicts = Counter(
            _PREFIX + "node_label_conflicts",
            "Samples whose node label named another node than their source's (corrected).",
            registry=r,
        )
        self.duplicates = Counter(
            _PREFIX + "duplicate_samples",
            "Samples repeating a series within one batch (last kept).",
            registry=r,
        )
        self.dropped = Counter(
            _PREFIX + "dropped_samples",
            "Samples of denied or unmappable families, and readings of pushed regions without a live owner.",
            registry=r,
        )
        self.refused = Counter(
            _PREFIX + "push_refused", "Pushes refused, by reason.", ["reason"], registry=r
        )
        self.read_refusals = Counter(
            _PREFIX + "read_refused",
            "Reads refused by read authorization, by reason.",
            ["reason"],
            registry=r,
        )
        self.unowned = Counter(
            _PREFIX + "push_unowned_regions",
            "Pushed regions whose pod or claim is gone, or on another node (dropped).",
            registry=r,
        )
        self.restarts = Counter(
            _PREFIX + "task_restarts",
            "Restarts of crashed long-lived tasks, by kind of task.",
            ["task"],
            registry=r,
        )
        self.shard = Gauge(
            _PREFIX + "shard",
            "This collector's shard: 1, labelled with its index and the shard count.",
            ["index", "count"],
            registry=r,
        )
        self.other_shards = Gauge(
            _PREFIX + "other_shard_targets",
            "Discovered targets skipped because another shard holds their node.",
            registry=r,
        )
        self.allocation_errors = Counter(
            _PREFIX + "allocation_errors",
            "Parts of pods' GPU allocations that could not be read (left out), by reason.",
            ["reason"],
            registry=r,
        )
        for reason in REASONS:  # every reason at 0 from the start, so rate() sees the first
            self.allocation_errors.labels(reason)
        self.registration_errors = Counter(
            _PREFIX + "registration_errors",
            "Nodes whose GPU record (register annotation or GPU Feature Discovery labels) could"
            " not be read in part (left out), by reason; once per node while it stays so.",
            ["reason"],
            registry=r,
        )
        for reason in REGISTRATION_REASONS:
            self.registration_errors.labels(reason)
        self.warmup = Gauge(
            _PREFIX + "warmup_seconds",
            "Seconds the query engine took after start to compile its loops (0 until done).",
            registry=r,
        )
        info = Gauge(
            _PREFIX + "build_info",
            "Build of this collector.",
            ["version", "python_version"],
            registry=r,
        )
        info.labels(__version__, platform.python_version()).set(1)
        for flavour in Flavour:
            self.targets.labels(flavour).set(0)
        r.register(_StoreCollector(store))
        r.register(_TaskCollector())
        r.register(_CompiledCollector())

    @_records
    def scraped(self, source: Source, duration: float, batch: Batch, wall: float) -> None:
        """Record a good scrape."""
        self._sources.set(
            source,
            source_up=1,
            source_last_success_timestamp_seconds=wall,
            source_scrape_duration_seconds=duration,
            source_samples=batch.samples,
        )
        self._accepted(batch)

    @_records
    def pushed(self, source: Source, batch: Batch, unowned: int, wall: float) -> None:
        """Record an accepted push; ``unowned`` regions had no live pod or claim."""
        self._sources.set(
            source,
            source_up=1,
            source_last_success_timestamp_seconds=wall,
            source_samples=batch.samples,
        )
        self.unowned.inc(unowned)
        self._accepted(batch)

    @_records
    def discovered(self, counts: Mapping[Flavour, int]) -> None:
        """Record how many scrape targets of each flavour are known."""
        for flavour, count in counts.items():
            self.targets.labels(flavour).set(count)

    @_records
    def skipped(self, count: int) -> None:
        """Record how many discovered targets belong to other shards."""
        self.other_shards.set(count)

    @_records
    def push_refused(self, reason: str) -> None:
        """Record a refused push."""
        self.refused.labels(reason).inc()

    @_records
    def warmed(self, seconds: float) -> None:
        """Record how long the query engine's warm-up took."""
        self.warmup.set(seconds)

    @_records
    def read_refused(self, reason: str) -> None:
        """Record a read refused by read authorization."""
        self.read_refusals.labels(reason).inc()

    @_records
    def failed(self, source: Source, duration: float, reason: str) -> None:
        """Record a failed scrape; ``reason`` is a short fixed word (timeout, http, parse, ...)."""
        self._sources.set(source, source_up=0, source_scrape_duration_seconds=duration)
        self.errors.labels(source.kind, reason).inc()

    @_records
    def restarted(self, task: str) -> None:
        """Count a restart of a crashed task; ``task`` names its kind, not the one task.

        The label is the kind (``scrape``, ``kubernetes discovery``, ``store
        expiry``, ...), never one target's name: every scrape loop shares the
        label ``scrape``, so the counter has a handful of series however many
        targets come and go. Logs and ``/healthz`` name the task itself.
        """
        self.restarts.labels(task).inc()

    @_records
    def allocation_malformed(self, reason: str) -> None:
        """Count a part of a pod's allocation left out; ``reason`` is one of ``REASONS``."""
        self.allocation_errors.labels(reason).inc()

    @_records
    def registration_malformed(self, reason: str) -> None:
        """Count a node's GPU record read in part; ``reason`` is one of the registration's."""
        self.registration_errors.labels(reason).inc()

    def _accepted(self, batch: Batch) -> None:
        # most batches have none of these: an increment takes the counter's lock
        if batch.conflicts:
            self.conflicts.inc(batch.conflicts)
        if batch.duplicates:
            self.duplicates.inc(batch.duplicates)
        if batch.dropped:
            self.dropped.inc(batch.dropped)

    @_records
    def changed(self) -> None:
        """Note that a family registered from outside (remote write's) changed: rebuild the page."""

    @_records
    def forget(self, source: Source) -> None:
        """Drop a removed source's series: ours forget what is gone too."""
        self._sources.forget(source)

    def render(self, openmetrics: bool) -> list[bytes]:
        """Render our own metrics; the OpenMetrics form without its ``# EOF``.

        The per-source families (thousands of series) come from our own cached
        lines; prometheus_client renders the few others.
        """
        registry = WithoutCreated(self.registry)
        if openmetrics:
            page: bytes = generate_openmetrics(registry)  # type: ignore[no-untyped-call]
            page = page.removesuffix(b"# EOF\n")
        else:
            page = generate_latest(registry)
        return [page, *self._feeding.render(openmetrics), *self._sources.render(openmetrics)]

    def series(self) -> dict[str, dict[bytes, float]]:
        """Our own series by the node their ``node`` label names ("" for none), keys without it.

        The page's series, taken as they are held, never rendered and parsed
        back (parsing 20,000 per-source lines at 5,000 agents took ~0.5 s).
        """
        by_node: dict[str, dict[bytes, float]] = {}
        for metric in WithoutCreated(self.registry).collect():
            for sample in metric.samples:
                node = sample.labels.get("node", "")
                labels = [(name, value) for name, value in sample.labels.items() if name != "node"]
                by_node.setdefault(node, {})[labelsets.key(sample.name, labels)] = sample.value
        for node, key, value in itertools.chain(self._feeding.series(), self._sources.series()):
            by_node.setdefault(node, {})[key] = value
        return by_node


class _SourceTable:
    """Per-source gauges, each source's lines rendered once per change, when a page is built.

    Why not prometheus_client: rendering thousands of labelled children on
    every page build took longer than the whole cluster's own lines. Why at
    the build, not at the scrape: a collector whose page is read less often
    than it scrapes (or never) renders less.
    """

    def __init__(self) -> None:
        # Keyed by the source's id, not the Source: an agent restarted under a new
        # instance name is the same source renamed, so its old lines must go, not linger.
        self._values: dict[str, dict[str, float]] = {}
        self._keys: dict[str, _SourceKeys] = {}
        # per family, each source's line: a page build copies each family's lines in one go
        self._lines: dict[str, dict[str, bytes]] = {name: {} for name, _ in _SOURCE_FAMILIES}
        # values set since the last render, by source id, in the order they were first set
        self._unrendered: dict[str, dict[str, float]] = {}

    def set(self, source: Source, **values: float) -> None:
        known = self._keys.get(source.id)
        if known is None or known.source != source:
            if known is not None:  # renamed or moved: its old labels describe nothing now
                self.forget(source)
            labels = labelsets.source(source.kind, source.name)
            keys, bare = {}, {}
            for name, _ in _SOURCE_FAMILIES:
                keys[name] = labelsets.key(_PREFIX + name, (*labels, ("node", source.node)))
                bare[name] = labelsets.key(_PREFIX + name, labels)
            self._keys[source.id] = _SourceKeys(source, keys, bare)
        self._values.setdefault(source.id, {}).update(values)
        self._unrendered.setdefault(source.id, {}).update(values)

    def forget(self, source: Source) -> None:
        self._values.pop(source.id, None)
        self._keys.pop(source.id, None)
        self._unrendered.pop(source.id, None)
        for lines in self._lines.values():
            lines.pop(source.id, None)

    def _render_new(self) -> None:
        for source_id, values in self._unrendered.items():
            keys = self._keys[source_id].keys
            for name, value in values.items():
                self._lines[name][source_id] = b"%s %s\n" % (keys[name], format_value(value))
        self._unrendered.clear()

    def series(self) -> Iterator[tuple[str, bytes, float]]:
        """Each source's series: its node, the key without ``node``, the value."""
        for source_id, values in self._values.items():
            known = self._keys[source_id]
            for name, value in values.items():
                yield known.source.node, known.bare[name], value

    def __len__(self) -> int:
        return len(self._values)

    def render(self, openmetrics: bool) -> list[bytes]:
        self._render_new()
        parts = []
        for name, help_text in _SOURCE_FAMILIES:
            parts.append(render_header(_PREFIX + name, "gauge", help_text, openmetrics))
            parts += self._lines[name].values()
        return parts


@dataclass(frozen=True, slots=True)
class _SourceKeys:
    """A source's keys per family: with ``node`` (its lines) and without (its series)."""

    source: Source
    keys: dict[str, bytes]
    bare: dict[str, bytes]


@dataclass(frozen=True, slots=True)
class _WinnerLine:
    """A node's winning source, its ``node_source_info`` line and its key without ``node``."""

    source: Source
    line: bytes
    bare: bytes


class _Feeding:
    """``node_source_info``: the source whose series win for each node, a line kept per node.

    Why not prometheus_client: one labelled sample per node, made again on
    every page build, took ~20 ms of each build at 1,000 nodes. Only the nodes
    the store changed since the last look are looked at again.
    """

    _NAME = _PREFIX + "node_source_info"

    def __init__(self, store: Store) -> None:
        self._store = store
        self._synced = -1
        self._lines: dict[str, _WinnerLine] = {}

    def series(self) -> Iterator[tuple[str, bytes, float]]:
        """Each node's series: the node, the key without ``node``, 1."""
        self._sync()
        for node, known in self._lines.items():
            yield node, known.bare, 1.0

    def render(self, openmetrics: bool) -> list[bytes]:
        self._sync()
        help_text = "The source whose series win for each node (value 1)."
        parts = [render_header(self._NAME, "gauge", help_text, openmetrics)]
        parts += (known.line for known in self._lines.values())
        return parts

    def _sync(self) -> None:
        store = self._store
        changed = store.to_revisit(self._synced, self._lines)
        self._synced = store.generation
        for node in changed:
            view = store.view(node)
            if view is None:
                self._lines.pop(node, None)
                continue
            winner = view.sources[0].source
            known = self._lines.get(node)
            if known is None or known.source != winner:
                labels = labelsets.source(winner.kind, winner.name)
                line = labelsets.key(self._NAME, (*labels, ("node", node))) + b" 1.0\n"
                self._lines[node] = _WinnerLine(winner, line, labelsets.key(self._NAME, labels))


_HISTORY_SIZE_EVERY_S = 60.0
"""Seconds the history's byte and series counts are reused: each walks every node's
history (~90 ms at 5,000 nodes), far too slow for every page build, and at 10 s
it was 3% of the collector's CPU while it scraped 5,000 targets."""


class _StoreCollector:
    """Reads the store at render time: live series, and the history's size."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._sized = -math.inf
        self._size = (0, 0)

    def collect(self) -> Iterator[Metric]:
        live = GaugeMetricFamily(_PREFIX + "live_series", "Series served on /metrics, all nodes.")
        total = 0
        for node in self._store.nodes():
            view = self._store.view(node)
            if view is not None:
                total += len(view.series)
        live.add_metric([], total)
        yield live
        history = self._store.history
        if time.monotonic() - self._sized >= _HISTORY_SIZE_EVERY_S:
            self._size, self._sized = (history.bytes, history.series), time.monotonic()
        size, series = self._size
        for name, help_text, value in (
            ("history_bytes", "Bytes the range-query history holds, keys included.", size),
            ("history_points", "Points the history keeps, markers included.", history.points),
            ("history_series", "Series the history holds points of.", series),
        ):
            yield GaugeMetricFamily(_PREFIX + name, help_text, value=value)


SELF_SOURCE = "collector"
"""The history axis the collector's own series are recorded on, in every node they name."""


_NODES_PER_TURN = 250
"""Nodes whose own series are recorded before other tasks get a turn."""


class SelfHistory:
    """Records the collector's own series in the history, so ``/prometheus`` serves them too.

    Each series goes to the node its ``node`` label names (``source_up`` of a
    node's monitor is that node's series, so Grafana can chart which node's
    monitor fails); a collector-wide series (counters, ``targets``) has no node.
    Once per interval, like a scrape of the collector itself.
    """

    def __init__(self, metrics: SelfMetrics, history: History) -> None:
        self._metrics = metrics
        self._history = history
        self._nodes: set[str] = set()

    async def record(self, now: float) -> None:
        """Record every own series at ``now`` (wall time); a node no longer named gets markers.

        Other tasks run every :data:`_NODES_PER_TURN` nodes: at 5,000 nodes a
        record takes 40-60 ms, and its first one (every series new) ~300 ms,
        which would hold up the pushes and scrapes that arrive meanwhile.
        """
        by_node = self._metrics.series()
        for node in self._nodes - by_node.keys():
            self._history.forget(node, SELF_SOURCE, ())
        for turn, (node, series) in enumerate(by_node.items(), 1):
            self._history.record(node, series, now, SELF_SOURCE)
            if turn % _NODES_PER_TURN == 0:
                await asyncio.sleep(0)
        self._nodes = set(by_node)


class _CompiledCollector:
    """The compiled loops' compilations at render time: one that grows after the warm-up
    means a query paid for a compilation (the warm-up missed its argument types)."""

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            _PREFIX + "compiled_loops",
            "Compilations of the query engine's compiled loops in this process.",
            value=specialisations(),
        )


class _TaskCollector:
    """The event loop's live asyncio tasks at render time: a leak shows as a count that grows."""

    def collect(self) -> Iterator[Metric]:
        try:
            tasks = len(asyncio.all_tasks())
        except RuntimeError:  # rendered outside the event loop (a test, a tool): nothing to count
            return
        yield GaugeMetricFamily(
            _PREFIX + "asyncio_tasks",
            "Asyncio tasks alive in the collector's event loop.",
            value=tasks,
        )
