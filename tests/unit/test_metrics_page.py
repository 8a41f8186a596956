"""GET /metrics: one valid exposition, each series once, families contiguous, cached builds."""

from __future__ import annotations

import asyncio
import gzip
import threading
import zlib
from typing import cast

import aiohttp
import pytest
from aiohttp import web
from helpers import running_collector, until_ready
from prometheus_client.parser import text_string_to_metric_families

from collector.exposition.parse import parse
from collector.normalise.batch import Source
from collector.normalise.bodies import Normaliser
from collector.normalise.schema import SourceKind
from collector.selfmetrics import SelfMetrics
from collector.store.latest import Store
from collector.web import metrics as metrics_module
from collector.web.metrics import MetricsPage

WEIRD = 'q"uote \\ back\nnew {br,ace}=ü中'


def filled_store() -> Store:
    return fill(Store(stale_after=60))


def fill(store: Store, received: float = 0) -> Store:
    bodies = {
        "n2": b'hami_vgpu_memory_used_bytes{container="c",pod="p"} 5\nhami_build_info{version="1"} 1\n',
        "n1": b'HostCoreUtilization{deviceidx="0",deviceuuid="G"} 50\nhami_vgpu_memory_used_bytes{container="c",pod="p"} 7\n',
        WEIRD: b'hami_vgpu_memory_used_bytes{container="c",pod="'
        + WEIRD.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").encode()
        + b'"} NaN\n',
    }
    for node, body in bodies.items():
        store.put(
            Source(node, node, node, SourceKind.HAMI, 1),
            Normaliser(node).normalise(body),
            received=received,
        )
    return store


def test_page_is_valid_and_labels_every_series_with_its_node() -> None:
    store = filled_store()
    page = MetricsPage(store, SelfMetrics(store))
    body = b"".join(asyncio.run(page.body(openmetrics=False, compressed=False)))
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    used = families["hami_vgpu_memory_used_bytes"]
    assert used.type == "gauge"
    assert used.documentation == "vGPU device memory usage in bytes"
    by_node = {s.labels["node"]: s for s in used.samples}
    assert set(by_node) == {"n1", "n2", WEIRD}
    assert by_node[WEIRD].labels["pod"] == WEIRD, "label values round-trip, never injected"
    assert by_node["n1"].value == 7
    host = families["hami_host_gpu_utilization_ratio"].samples
    assert [(s.labels, s.value) for s in host] == [
        ({"device_index": "0", "device_uuid": "G", "node": "n1"}, 50)
    ]
    assert families["hami_build_info"].samples[0].labels == {"version": "1", "node": "n2"}
    data_series = [
        s
        for f in families.values()
        if not f.name.startswith("hami_usage_collector")
        for s in f.samples
    ]
    assert all("node" in s.labels for s in data_series)


def test_families_are_contiguous_sorted_and_each_series_appears_once() -> None:
    store = filled_store()
    page = MetricsPage(store, SelfMetrics(store))
    body = b"".join(asyncio.run(page.body(openmetrics=False, compressed=False)))
    parsed = parse(body)
    assert len({s.series for s in parsed.samples}) == len(parsed.samples)
    helps = [line for line in body.split(b"\n") if line.startswith(b"# HELP")]
    assert len(helps) == len(set(helps))
    order = [s.name for s in parsed.samples if not s.name.startswith("hami_usage")]
    assert order == sorted(order)


def test_openmetrics_and_gzip_forms_hold_the_same_samples() -> None:
    store = filled_store()
    page = MetricsPage(store, SelfMetrics(store))

    async def forms() -> tuple[bytes, bytes, bytes]:
        return (
            b"".join(await page.body(openmetrics=False, compressed=False)),
            b"".join(await page.body(openmetrics=True, compressed=False)),
            b"".join(await page.body(openmetrics=False, compressed=True)),
        )

    text, om, zipped = asyncio.run(forms())
    assert om.endswith(b"# EOF\n")
    assert gzip.decompress(zipped) == text
    data = [s for s in parse(text).samples if s.name.startswith("hami_vgpu")]
    om_data = [s for s in parse(om, openmetrics=True).samples if s.name.startswith("hami_vgpu")]
    assert [(s.name, s.labels) for s in data] == [(s.name, s.labels) for s in om_data]


def test_builds_are_shared_until_something_changes() -> None:
    store = filled_store()
    metrics = SelfMetrics(store)
    page = MetricsPage(store, metrics)

    async def run() -> None:
        first, second = await asyncio.gather(page.body(False, True), page.body(False, True))
        assert first is second, "concurrent scrapes share one compressed body"
        assert await page.body(False, True) is first
        store.put(
            Source("n1", "n1", "n1", SourceKind.HAMI, 1),
            Normaliser("n1").normalise(b"m 1\n"),
            received=1,
        )
        changed = await page.body(False, True)
        assert changed is not first
        assert b'm{node="n1"} 1.0' in gzip.decompress(b"".join(changed))

    asyncio.run(run())


def test_a_failed_build_fails_its_scrapes_and_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    store = filled_store()
    page = MetricsPage(store, SelfMetrics(store))
    compress, calls = metrics_module._compress_blocks, []

    def broken_once(blocks: list[list[bytes]]) -> list[bytes]:
        calls.append(len(blocks))
        if len(calls) == 1:
            raise zlib.error("injected")
        return compress(blocks)

    monkeypatch.setattr(metrics_module, "_compress_blocks", broken_once)

    async def run() -> None:
        failed = await asyncio.gather(
            page.body(False, True), page.body(False, True), return_exceptions=True
        )
        assert isinstance(failed[0], zlib.error), "concurrent scrapes share the failure"
        assert failed[1] is failed[0]
        again = await page.body(False, True)  # the same version: built again, not the failure
        assert gzip.decompress(b"".join(again)) == b"".join(await page.body(False, False))
        assert calls == [calls[0], calls[0]], "the one build failed, the next did it all"

    asyncio.run(run())


def test_closing_cancels_and_awaits_a_build_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    store = filled_store()
    page = MetricsPage(store, SelfMetrics(store))
    compress, entered, leave = metrics_module._compress_blocks, threading.Event(), threading.Event()

    def blocking(blocks: list[list[bytes]]) -> list[bytes]:
        entered.set()
        leave.wait(10)
        return compress(blocks)

    monkeypatch.setattr(metrics_module, "_compress_blocks", blocking)

    async def run() -> None:
        closing = page.closing(cast(web.Application, None))
        await anext(closing)
        scrape = asyncio.ensure_future(page.body(False, True))
        try:
            assert await asyncio.to_thread(entered.wait, 10), "the build is in its thread"
            with pytest.raises(StopAsyncIteration):
                await anext(closing)  # cancels the build and waits for it
            await asyncio.wait([scrape])
            assert scrape.cancelled(), "the scrape waiting for it is cancelled too"
            with pytest.raises(RuntimeError, match="stopped"):
                await page.body(False, True)
        finally:
            leave.set()

    asyncio.run(run())


async def test_http_negotiation() -> None:
    async with (
        running_collector(kubernetes=False) as (base, _),
        aiohttp.ClientSession(auto_decompress=False) as http,
    ):
        async with http.get(f"{base}/metrics", headers={"Accept-Encoding": "identity"}) as resp:
            assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            assert "Content-Encoding" not in resp.headers
            assert b"hami_usage_collector_build_info" in await resp.read()
        headers = {
            "Accept": "application/openmetrics-text; version=1.0.0",
            "Accept-Encoding": "gzip",
        }
        async with http.get(f"{base}/metrics", headers=headers) as resp:
            assert (
                resp.headers["Content-Type"]
                == "application/openmetrics-text; version=1.0.0; charset=utf-8"
            )
            assert resp.headers["Content-Encoding"] == "gzip"
            assert gzip.decompress(await resp.read()).endswith(b"# EOF\n")
        async with http.get(f"{base}/healthz") as resp:
            assert resp.status == 200
        await until_ready(base, 60)  # nothing to discover, nothing to scrape: once compiled
        async with http.get(f"{base}/readyz") as resp:
            assert resp.status == 200


def gzip_members(body: bytes) -> list[bytes]:
    """The decompressed text of each gzip member of ``body``, in order."""
    texts = []
    while body:
        member = zlib.decompressobj(16 + zlib.MAX_WBITS)
        texts.append(member.decompress(body))
        assert member.eof, "every member is complete"
        body = member.unused_data
    return texts


def test_gzip_page_recompresses_only_what_changed() -> None:
    store = filled_store()
    page = MetricsPage(store, SelfMetrics(store))

    async def run() -> tuple[list[bytes], list[bytes], bytes]:
        before = b"".join(await page.body(False, True))
        store.put(
            Source("n1", "n1", "n1", SourceKind.HAMI, 1),
            Normaliser("n1").normalise(b'hami_vgpu_memory_used_bytes{container="c",pod="p"} 8\n'),
            received=1,
        )
        after = b"".join(await page.body(False, True))
        plain = b"".join(await page.body(False, False))
        return gzip_members(before), gzip_members(after), plain

    before, after, plain = asyncio.run(run())
    assert b"".join(after) == plain, "the gzip page is the plain page, member by member"
    assert len(after) > 3, "families and nodes are members of their own"
    new = [text for text in after if text not in before]
    assert any(b'node="n1"} 8.0' in text for text in new)
    assert all(b'node="n1"' in text or b"hami_usage_collector" in text for text in new), (
        "only n1's chunks and our own metrics are compressed again"
    )


def test_a_page_kept_up_to_date_equals_one_built_from_scratch() -> None:
    """Nodes changed, added between others, removed, or losing a family: the kept page follows.

    More nodes than one gzip block holds, so changes land inside blocks and
    shift the blocks after them. Last, more nodes come and go between two
    builds than the store's log of changes keeps, so the page has to look at
    every node.
    """
    store = Store(stale_after=60)
    metrics = SelfMetrics(store)
    page = MetricsPage(store, metrics)

    def put(node: str, value: int, extra: bool) -> None:
        body = b'hami_vgpu_memory_used_bytes{container="c",pod="p"} %d\n' % value
        if extra:
            body += b'HostCoreUtilization{deviceidx="0",deviceuuid="G"} %d\nmy_own 1\n' % value
        store.put(Source(node, node, node, SourceKind.HAMI, 1), Normaliser(node).normalise(body), 0)

    for i in range(0, 40, 2):
        put(f"n{i:02d}", i, extra=i % 3 == 0)
    # each step: sources removed, then (node, value, extra families) put
    steps: list[tuple[list[str], list[tuple[str, int, bool]]]] = [
        ([], []),
        ([], [("n10", 99, True)]),
        ([], [("n07", 7, True)]),  # between two nodes: later blocks move
        (["n00"], []),
        ([], [("n12", 12, False)]),  # loses two families
        ([f"n{i:02d}" for i in range(0, 40, 6)], []),
        ([], [("n07", 1, False), ("n10", 1, False)]),  # families gone
        ([], [("n99", 1, True)]),  # and back
    ]

    async def pages() -> tuple[bytes, bytes, bytes]:
        zipped = b"".join(await page.body(False, True))
        plain = b"".join(await page.body(False, False))
        fresh = b"".join(await MetricsPage(store, metrics).body(False, False))
        return gzip.decompress(zipped), plain, fresh

    for removed, changed in steps:
        for source in removed:
            store.remove(source)
        for node, value, extra in changed:
            put(node, value, extra)
        zipped, plain, fresh = asyncio.run(pages())
        assert zipped == plain == fresh
    assert b"my_own" in plain
    assert b'node="n07"' in plain
    assert b'node="n00"' not in plain
    # more nodes come and go than the store's change log keeps: the page looks at all
    for i in range(1100):
        put(f"gone-{i}", i, extra=False)
        store.remove(f"gone-{i}")
    put("n08", 8, extra=True)
    zipped, plain, fresh = asyncio.run(pages())
    assert zipped == plain == fresh
    assert b'node="n08"' in plain
    assert b"gone-" not in plain
