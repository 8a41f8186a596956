"""What is sent: the store's changes as samples, staleness markers, our own series, metadata.

The writer observes the store (:class:`collector.store.latest.Observer`): each put's
series become one set of samples at the put's time, and each series that leaves
a node a staleness marker at that time, so the receiver ends it at once as
Prometheus does for a vanished scrape series. Both only enqueue. Our own series
(``hami_usage_collector_*``) are read from the self-metrics registry every
``own_interval`` seconds, with markers for those that went; HELP and TYPE of
every family are sent every ``metadata_interval`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import aiohttp

from collector.exposition.parse import parse
from collector.normalise import labelsets, schema
from collector.remote.encode import Heads, Labels
from collector.remote.queue import Destination, QueueConfig
from collector.remote.stats import RemoteStats
from collector.selfmetrics import SelfMetrics
from collector.store.latest import Store
from core.tasks import Supervisor

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RemoteConfig:
    """Where to send and how; ``headers`` carry the authorisation, if any."""

    urls: Sequence[str]
    external: Labels
    queue: QueueConfig
    headers: Mapping[str, str]
    own_interval: float = 15.0
    metadata_interval: float = 60.0
    flush_timeout: float = 5.0


class RemoteWriter:
    """Fans the store's changes out to every destination; see the module docstring."""

    def __init__(self, destinations: Sequence[Destination]) -> None:
        self.destinations = tuple(destinations)
        self._own: set[bytes] = set()

    def accepted(self, node: str, series: Mapping[bytes, float], sampled: float) -> None:
        """Queue a put's series at its time (a :class:`collector.store.latest.Observer` call)."""
        millis = _millis(sampled)
        for destination in self.destinations:
            destination.enqueue(node, series, millis)

    def vanished(self, node: str, keys: Collection[bytes], when: float) -> None:
        """Queue staleness markers of series that left ``node``."""
        millis = _millis(when)
        for destination in self.destinations:
            destination.mark_stale(node, keys, millis)

    def own(self, metrics: SelfMetrics, now: float) -> None:
        """Queue our own series as they are now, and markers for those that went."""
        series = {
            labelsets.key(sample.name, sample.labels): sample.value
            for sample in parse(b"".join(metrics.render(False))).samples
        }
        gone = self._own - series.keys()
        self._own = set(series)
        millis = _millis(now)
        for destination in self.destinations:
            destination.enqueue(None, series, millis)
            if gone:
                destination.mark_stale(None, gone, millis)

    async def drained(self) -> None:
        """Return once every destination has sent all it holds."""
        for destination in self.destinations:
            await destination.drained()


def families(store: Store, metrics: SelfMetrics) -> list[tuple[str, str, str]]:
    """(name, type, HELP) of every family the store and our registry hold now."""
    found: dict[str, schema.Family] = dict(schema.FAMILIES)
    for node in store.nodes():
        view = store.view(node)
        if view is not None:
            for name, family in view.families.items():
                found.setdefault(name, family)
    body = parse(b"".join(metrics.render(False)))
    for name, kind in body.types.items():
        found.setdefault(name, schema.Family(name, body.helps.get(name, ""), kind))
    return [(f.name, f.type, f.help) for f in found.values()]


@contextlib.asynccontextmanager
async def remote_writing(
    config: RemoteConfig,
    store: Store,
    metrics: SelfMetrics,
    tasks: Supervisor,
    connector: aiohttp.BaseConnector,
) -> AsyncIterator[RemoteWriter]:
    """Send the store's changes for the block; at its end, flush for at most ``flush_timeout``.

    The caller stops every producer (scrapes, pushes) before the block ends, so
    the flush sends what was accepted until then. The session made here owns
    ``connector`` (TLS settings) and closes it.
    """
    stats = RemoteStats(metrics.registry, metrics.changed)
    heads = Heads(config.external)
    async with aiohttp.ClientSession(connector=connector) as session:
        destinations = [
            Destination(url, session, heads, stats.destination(url), config.queue, config.headers)
            for url in config.urls
        ]
        writer = RemoteWriter(destinations)
        store.observe(writer)
        async with contextlib.AsyncExitStack() as stack:
            stack.callback(store.unobserve, writer)
            for destination in destinations:
                for index in range(config.queue.shards):
                    name = f"remote write {destination.stats.name} shard {index}"
                    await stack.enter_async_context(
                        tasks.running("remote write", partial(destination.run, index), name)
                    )
            own = partial(_own_loop, writer, metrics, config.own_interval)
            await stack.enter_async_context(tasks.running("remote write own series", own))
            meta = partial(_metadata_loop, destinations, store, metrics, config.metadata_interval)
            await stack.enter_async_context(tasks.running("remote write metadata", meta))
            yield writer
            writer.own(metrics, time.time())
            try:  # asyncio.timeout: 3.11 wait_for can swallow a cancel
                async with asyncio.timeout(config.flush_timeout):
                    await writer.drained()
            except TimeoutError:
                left = sum(d.pending() for d in destinations)
                log.warning("remote write: %d samples not sent at shutdown", left)


async def _own_loop(writer: RemoteWriter, metrics: SelfMetrics, interval: float) -> None:
    while True:
        writer.own(metrics, time.time())
        await asyncio.sleep(interval)


async def _metadata_loop(
    destinations: Sequence[Destination], store: Store, metrics: SelfMetrics, interval: float
) -> None:
    while True:
        found = families(store, metrics)
        for destination in destinations:
            await destination.send_metadata(found)
        await asyncio.sleep(interval)


def _millis(seconds: float) -> int:
    """A wall time in milliseconds, rounded as the history's readers and Prometheus' API
    round times: truncated, a sample could be a millisecond earlier at the receiver than
    in our own answers, and fall on the other side of a query's edge."""
    return round(seconds * 1000)
