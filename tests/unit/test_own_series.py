"""The collector's own series are queryable through ``/prometheus``, with ``node`` where one is meant."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from helpers import eventually, scraping_collector

from collector.exposition.parse import parse
from collector.normalise.batch import Batch, Source
from collector.normalise.bodies import Normaliser
from collector.normalise.labelsets import series_key
from collector.normalise.schema import SourceKind
from collector.selfmetrics import SelfHistory, SelfMetrics
from collector.store.latest import Store
from simulator.cluster import build_cluster
from simulator.monitors import MonitorFarm


async def test_own_series_are_in_the_query_api(tmp_path: Path) -> None:
    nodes = build_cluster(2, seed=5, flavours=("hami", "volcano"))
    answer: dict[str, Any] = {}
    async with (
        MonitorFarm(nodes) as farm,
        scraping_collector(farm, tmp_path, interval=0.5, timeout=0.4) as (base, _),
        aiohttp.ClientSession() as http,
    ):

        async def query(text: str) -> list[dict[str, Any]]:
            url = f"{base}/prometheus/api/v1/query"
            async with http.get(url, params={"query": text}) as resp:
                answer.update(await resp.json())
            return list(answer["data"]["result"])

        async def both_up() -> bool:
            found = await query("hami_usage_collector_source_up == 1")
            return {s["metric"].get("node") for s in found} == {n.name for n in nodes}

        await eventually(both_up, 15, "source_up of both nodes through /prometheus")
        (info,) = await query("hami_usage_collector_build_info")
        assert "node" not in info["metric"], "a collector-wide series names no node"
        by_node = await query("sum by (node) (hami_usage_collector_node_source_info)")
        assert {s["metric"]["node"] for s in by_node} == {n.name for n in nodes}
        async with http.get(f"{base}/prometheus/api/v1/label/node/values") as resp:
            assert "" not in (await resp.json())["data"]


def test_what_the_history_gets_is_what_the_page_shows() -> None:
    """The per-source values go to the history as they are; the page says the same."""
    store = Store(stale_after=60)
    metrics = SelfMetrics(store)
    scraped = Source("uid-1", "gpu/monitor-a", "n1", SourceKind.HAMI, 0)
    failing = Source("uid-2", "gpu/monitor-b", "n2", SourceKind.VOLCANO, 1)
    metrics.scraped(scraped, 0.012, Batch({b"a": 1.0}, samples=7), 1_700_000_000.5)
    metrics.scraped(failing, 0.25, Batch({}, samples=3), 1_700_000_001.0)
    metrics.failed(failing, 0.8, "timeout")
    agent = Source("agent/n3", "agent n3-1", "n3", SourceKind.AGENT, 0)
    metrics.pushed(agent, Batch({}, samples=2), 0, 1_700_000_002.0)
    renamed = Source("agent/n3", "agent n3-2", "n3", SourceKind.AGENT, 0)
    metrics.pushed(renamed, Batch({}, samples=4), 0, 1_700_000_003.0)
    gone = Source("uid-9", "gpu/monitor-z", "n9", SourceKind.KAI, 0)
    metrics.scraped(gone, 0.1, Batch({}), 1.0)
    metrics.forget(gone)

    page = b"".join(metrics.render(openmetrics=False))
    expected: dict[str, dict[bytes, float]] = {}
    for sample in parse(page).samples:
        node = dict(sample.labels).get("node", "")
        labels = [(k, v) for k, v in sample.labels if k != "node"]
        expected.setdefault(node, {})[series_key(sample.name, labels)] = sample.value
    got = metrics.series()
    assert got == expected
    assert set(got) == {"", "n1", "n2", "n3"}
    up = b'hami_usage_collector_source_up{kind="volcano",source="gpu/monitor-b"}'
    assert got["n2"][up] == 0.0
    assert not any(b"n3-1" in key for key in got["n3"]), "a renamed source's old series are gone"


def test_own_series_are_the_page_s_own_lines_by_node() -> None:
    """What the history records of our own metrics is what the page shows, ``node`` taken out."""
    store = Store(stale_after=60)
    metrics = SelfMetrics(store)
    for node, kind in (("n1", SourceKind.HAMI), ("n2", SourceKind.AGENT)):
        source = Source(f"id-{node}", f"{node}-monitor", node, kind, 1)
        batch = Normaliser(node).normalise(
            b'hami_vgpu_memory_used_bytes{container="c",pod="p"} 5\n'
        )
        store.put(source, batch, 0)
        metrics.scraped(source, 0.25, batch, 1.7e9)
    metrics.failed(Source("id-n3", "n3-monitor", "n3", SourceKind.HAMI, 1), 1.5, "timeout")
    expected: dict[str, dict[bytes, float]] = {}
    for sample in parse(b"".join(metrics.render(openmetrics=False))).samples:
        node = dict(sample.labels).get("node", "")
        labels = [(name, value) for name, value in sample.labels if name != "node"]
        expected.setdefault(node, {})[series_key(sample.name, labels)] = sample.value
    assert metrics.series() == expected
    assert {"", "n1", "n2", "n3"} <= expected.keys()


async def test_recording_many_nodes_own_series_lets_other_tasks_run() -> None:
    """Thousands of nodes' own series are recorded in turns: a push arriving meanwhile is not held up."""
    store = Store(stale_after=60)
    metrics = SelfMetrics(store)
    nodes = [f"n{i:04d}" for i in range(1200)]
    for node in nodes:
        metrics.pushed(Source(f"agent/{node}", node, node, SourceKind.AGENT, 0), Batch({}), 0, 1.0)
    own = SelfHistory(metrics, store.history)
    seen_by_other_task: list[int] = []

    async def other_task() -> None:
        while True:
            seen_by_other_task.append(store.history.series)
            await asyncio.sleep(0)

    task = asyncio.create_task(other_task())
    await asyncio.sleep(0)
    await own.record(1_700_000_000.0)
    task.cancel()
    every = store.history.series
    assert every >= len(nodes), "every node's own series recorded"
    during = sorted({n for n in seen_by_other_task if 0 < n < every})
    assert len(during) >= 3, (
        f"the other task ran only with {seen_by_other_task[:10]} series recorded"
    )


def test_every_recording_moves_the_version_the_page_caches_on() -> None:
    """A cached page of our own lines is rebuilt after any change, whatever recorded it."""
    metrics = SelfMetrics(Store(stale_after=60))
    source = Source("n1/hami", "pod hami-1", "n1", SourceKind.HAMI, 0)
    batch = Batch({}, samples=0)
    recordings: list[Callable[[], None]] = [
        lambda: metrics.scraped(source, 0.1, batch, 1.0),
        lambda: metrics.pushed(source, batch, 0, 1.0),
        lambda: metrics.discovered({}),
        lambda: metrics.skipped(3),
        lambda: metrics.push_refused("invalid"),
        lambda: metrics.failed(source, 0.1, "timeout"),
        lambda: metrics.restarted("scrape"),
        lambda: metrics.allocation_malformed("number"),
        lambda: metrics.changed(),
        lambda: metrics.forget(source),
    ]
    for record in recordings:
        before = metrics.version
        record()
        assert metrics.version > before
