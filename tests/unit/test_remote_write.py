"""Remote write: refusals, retries, the queue's bound, external labels, metadata.

Into real receivers: tests/integration/test_remote_write_receivers.py.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from helpers import (
    eventually,
    holds,
    reserved_port,
    running_collector,
    serving,
)
from prometheus_client import CollectorRegistry
from receivers import Recorder

from collector.app import REMOTE
from collector.cli import ENV_PREFIX, parser
from collector.exposition.parse import parse
from collector.normalise.batch import Batch, Source
from collector.normalise.bodies import Normaliser
from collector.normalise.schema import SourceKind
from collector.remote import encode
from collector.remote.queue import Destination, QueueConfig, retry_after
from collector.remote.stats import DestinationStats, RemoteStats
from collector.remote.writer import RemoteWriter
from collector.selfmetrics import SelfMetrics
from collector.settings import CollectorSettings
from collector.store.latest import Store
from collector.web.metrics import MetricsPage
from core.settings import load_settings
from core.tasks import owned


def _stats(app: web.Application) -> DestinationStats:
    return app[REMOTE].destinations[0].stats


async def test_a_refused_batch_is_dropped_and_the_rest_goes_on(tmp_path: Path) -> None:
    recorder = Recorder(400)
    receiver = web.Application()
    receiver.router.add_post("/api/v1/write", recorder.handle)
    async with serving(receiver) as url, aiohttp.ClientSession() as session:
        destination = _destination(f"{url}/api/v1/write", session, QueueConfig(shards=1, batch=3))
        async with owned(destination.run(0), "shard"):
            destination.enqueue("n1", _series("first", 3), 1_700_000_000_000)
            destination.enqueue("n1", _series("second", 3), 1_700_000_001_000)
            await eventually(lambda: holds(len(recorder.answered) == 2), 10, "two requests")
            assert recorder.answered == [400, 204]
            assert destination.stats.totals["failed"] == 3
            assert destination.stats.totals["sent"] == 3
            assert b"second_0" in recorder.bodies[0]
            assert b"first_0" not in recorder.bodies[0]


async def test_a_sample_s_time_is_rounded_to_the_millisecond_as_queries_round_it() -> None:
    """Truncated, a sample read 0.7 ms past a millisecond would reach the receiver a
    millisecond before the time our own API gives it, and a query whose edge falls
    between the two would count it at the receiver and not here."""
    recorder = Recorder()
    receiver = web.Application()
    receiver.router.add_post("/api/v1/write", recorder.handle)
    async with serving(receiver) as url, aiohttp.ClientSession() as session:
        destination = _destination(f"{url}/api/v1/write", session, QueueConfig(shards=1, batch=1))
        async with owned(destination.run(0), "shard"):
            RemoteWriter([destination]).accepted("n1", {b'm{a="b"}': 1.0}, 1_700_000_000.0007)
            await eventually(lambda: holds(len(recorder.bodies) == 1), 10, "the sample")
    rounded = encode.timestamp_tail(1_700_000_000_001)
    assert rounded is not None
    assert rounded in recorder.bodies[0]


async def test_a_full_queue_drops_the_oldest_and_counts(tmp_path: Path) -> None:
    recorder = Recorder()
    with reserved_port() as port:
        url = f"http://127.0.0.1:{port}/api/v1/write"
        async with aiohttp.ClientSession() as session:
            config = QueueConfig(max_samples=6, batch=3, shards=1, max_backoff=0.05)
            destination = _destination(url, session, config)
            async with owned(destination.run(0), "shard"):
                destination.enqueue("n1", _series("a", 3), 1_700_000_000_000)
                stats = destination.stats
                await eventually(lambda: holds(stats.totals["retried"] > 0), 10, "a retry")
                for name, second in (("b", 1), ("c", 2), ("d", 3)):
                    destination.enqueue("n1", _series(name, 3), 1_700_000_000_000 + second)
                assert stats.totals["dropped"] == 3
                receiver = web.Application()
                receiver.router.add_post("/api/v1/write", recorder.handle)
                runner = web.AppRunner(receiver, handle_signals=False, access_log=None)
                await runner.setup()
                await web.TCPSite(runner, "127.0.0.1", port, reuse_address=True).start()
                try:
                    await eventually(lambda: holds(stats.totals["sent"] == 9), 10, "sent")
                finally:
                    await runner.cleanup()
                received = b"".join(recorder.bodies)
                assert [n in received for n in (b"a_0", b"b_0", b"c_0", b"d_0")] == [
                    True,
                    False,
                    True,
                    True,
                ]
                assert stats.totals["pending"] == 0


def _series(name: str, count: int) -> dict[bytes, float]:
    return {f'{name}_{i}{{pod="p"}}'.encode(): float(i) for i in range(count)}


def _destination(url: str, session: aiohttp.ClientSession, config: QueueConfig) -> Destination:
    stats = RemoteStats(CollectorRegistry(), lambda: None)
    heads = encode.Heads([("cluster", "test")])
    return Destination(url, session, heads, stats.destination(url), config)


def test_list_flags_repeat_and_the_replica_is_an_external_label() -> None:
    args = vars(
        parser().parse_args(
            [
                "serve",
                "--remote-write-url",
                "http://127.0.0.1:1/a,http://127.0.0.1:2/b",
                "--remote-write-url",
                "http://127.0.0.1:3/c",
                "--external-label",
                "cluster=prod",
                "--external-label",
                "region=eu",
                "--replica",
                "huc-0",
            ]
        )
    )
    args.pop("command")
    settings = load_settings(CollectorSettings, args, ENV_PREFIX)
    assert len(settings.remote_write_url) == 3
    assert settings.external_labels() == [
        ("cluster", "prod"),
        ("region", "eu"),
        ("replica", "huc-0"),
    ]


async def test_metadata_names_every_family_with_its_type_and_help() -> None:
    recorder = Recorder()
    receiver = web.Application()
    receiver.router.add_post("/api/v1/write", recorder.handle)
    async with serving(receiver) as url, aiohttp.ClientSession() as session:
        destination = _destination(f"{url}/api/v1/write", session, QueueConfig(shards=1))
        await destination.send_metadata([("hami_x_bytes", "gauge", "Bytes of x.")])
    (body,) = recorder.bodies
    # field 3 of WriteRequest, 29 bytes: MetricMetadata{type: GAUGE (2), name (2+12), help (2+11)}
    assert body == b"\x1a\x1d\x08\x02\x12\x0chami_x_bytes\x22\x0bBytes of x."


async def test_external_labels_on_metrics_never_replace_a_series_own_label() -> None:
    store = Store(stale_after=60)
    body = b'hami_vgpu_memory_used_bytes{pod="p"} 5\nhami_build_info{cluster="own"} 1\n'
    store.put(Source("s", "s", "n1", SourceKind.HAMI, 1), Normaliser("n1").normalise(body), 0)
    page = MetricsPage(store, SelfMetrics(store), [("cluster", "prod"), ("replica", "a")])
    text = parse(b"".join(await page.body(openmetrics=False, compressed=False)))
    labels = {s.name: dict(s.labels) for s in text.samples}
    assert labels["hami_vgpu_memory_used_bytes"] == {
        "pod": "p",
        "cluster": "prod",
        "replica": "a",
        "node": "n1",
    }
    assert labels["hami_build_info"] == {"cluster": "own", "replica": "a", "node": "n1"}


class Seen:
    """A store observer that keeps what it is told."""

    def __init__(self) -> None:
        self.told: list[tuple[str, str, set[bytes], float]] = []

    def accepted(self, node: str, series: Mapping[bytes, float], sampled: float) -> None:
        self.told.append(("accepted", node, set(series), sampled))

    def vanished(self, node: str, keys: Collection[bytes], when: float) -> None:
        self.told.append(("vanished", node, set(keys), when))


def test_the_store_tells_observers_what_it_records_and_what_leaves() -> None:
    store, seen = Store(stale_after=60), Seen()
    store.observe(seen)
    a, b = b'x{pod="a"}', b'x{pod="b"}'
    monitor = Source("m", "m", "n1", SourceKind.HAMI, 2)
    agent = Source("g", "g", "n1", SourceKind.AGENT, 1)
    store.put(monitor, Batch({a: 1.0, b: 2.0}), 0, sampled=100.0)
    store.put(monitor, Batch({a: 1.5}), 0, sampled=115.0)
    store.put(agent, Batch({a: 9.0}), 0, sampled=116.0)
    store.remove("g")  # a passes back to the monitor: it does not vanish
    before = time.time()
    store.remove("m")
    assert seen.told[:4] == [
        ("accepted", "n1", {a, b}, 100.0),
        ("accepted", "n1", {a}, 115.0),
        ("vanished", "n1", {b}, 115.0),
        ("accepted", "n1", {a}, 116.0),
    ]
    (last,) = seen.told[4:]
    assert last[:3] == ("vanished", "n1", {a})
    assert last[3] >= before


async def test_the_shutdown_flush_is_bounded_when_the_receiver_is_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with reserved_port() as port:
        settings = {
            "kubernetes": False,
            "remote_write_url": [f"http://127.0.0.1:{port}/api/v1/write"],
            "remote_write_flush_timeout": 0.2,
        }
        async with running_collector(**settings) as (_, app):
            stats = _stats(app)
            await eventually(lambda: holds(stats.totals["retried"] > 0), 10, "a retried request")
    assert "samples not sent at shutdown" in caplog.text


async def test_a_batch_at_an_unsendable_time_is_dropped_and_the_rest_goes_on() -> None:
    recorder = Recorder()
    receiver = web.Application()
    receiver.router.add_post("/api/v1/write", recorder.handle)
    async with serving(receiver) as url, aiohttp.ClientSession() as session:
        destination = _destination(f"{url}/api/v1/write", session, QueueConfig(shards=1))
        async with owned(destination.run(0), "shard"):
            destination.enqueue("n1", _series("ancient", 2), 1000)
            destination.enqueue("n1", _series("recent", 2), 1_700_000_000_000)
            await eventually(lambda: holds(destination.stats.totals["sent"] == 2), 10, "sent")
    assert destination.stats.totals["failed"] == 2
    assert b"recent_0" in b"".join(recorder.bodies)
    assert b"ancient_0" not in b"".join(recorder.bodies)


async def test_a_5xx_or_429_is_retried_until_accepted() -> None:
    recorder = Recorder(503, 429)
    receiver = web.Application()
    receiver.router.add_post("/api/v1/write", recorder.handle)
    async with serving(receiver) as url, aiohttp.ClientSession() as session:
        config = QueueConfig(shards=1, max_backoff=0.05)
        destination = _destination(f"{url}/api/v1/write", session, config)
        async with owned(destination.run(0), "shard"):
            destination.enqueue("n1", _series("kept", 3), 1_700_000_000_000)
            await eventually(lambda: holds(destination.stats.totals["sent"] == 3), 10, "sent")
    assert recorder.answered == [503, 429, 204]
    assert destination.stats.totals["retried"] == 6
    assert destination.stats.totals["failed"] == 0
    assert b"kept_2" in recorder.bodies[0]


@pytest.mark.parametrize(
    ("header", "seconds"), [(None, 0.0), ("2", 2.0), ("1e9", 300.0), ("-5", 0.0), ("soon", 0.0)]
)
def test_retry_after_is_read_as_seconds_and_capped(header: str | None, seconds: float) -> None:
    assert retry_after(header) == seconds
