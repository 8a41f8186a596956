"""Scrapes over one kept-alive connection per target (``collector/sources/pull.py``).

The monitor here is a raw asyncio server so that each test says exactly which
bytes come back, and sees every connection and request the client makes.
"""

from __future__ import annotations

import asyncio
import gc
import gzip
import json
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from helpers import eventually, holds, running_collector
from yarl import URL

from collector.normalise.batch import Batch
from collector.normalise.bodies import Normaliser, PassThrough
from collector.normalise.schema import Flavour, SourceKind
from collector.selfmetrics import SelfMetrics
from collector.sources.pull import Pull, ScrapeError
from collector.sources.scrape import ScrapeConfig, ScrapeLoop, ScrapeManager, fetch
from collector.sources.targets import Target
from collector.store.latest import Store
from core.tasks import Supervisor
from simulator.cluster import build_cluster

Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def reply(body: bytes, *headers: str, status: str = "200 OK") -> bytes:
    head = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


@dataclass
class Monitor:
    """Answers the n-th request with ``answers[n]`` (the last one repeats)."""

    answers: list[Answer]
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    closed: int = 0
    url: str = ""

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                self.requests.append(head)
                answer = self.answers[min(len(self.requests), len(self.answers)) - 1]
                await answer(reader, writer)
                if writer.is_closing():
                    return
        finally:
            self.closed += 1
            writer.close()


def send(data: bytes, close: bool = False) -> Answer:
    async def answer(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(data)
        await writer.drain()
        if close:
            writer.close()

    return answer


async def hang(reader: asyncio.StreamReader, _: asyncio.StreamWriter) -> None:
    await reader.read()  # until the client gives up and closes


@pytest.fixture
async def monitor() -> AsyncIterator[Monitor]:
    mon = Monitor([send(reply(b"a 1\n"))])
    server = await asyncio.start_server(mon.serve, "127.0.0.1", 0)
    mon.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/metrics?x=1"
    async with server:
        yield mon
        server.close()


async def pull_once(url: str, time_limit: float = 10.0, limit: int = 1 << 20) -> bytes:
    pull = Pull(URL(url), limit)
    try:
        return (await pull.get(time_limit))[0]
    finally:
        pull.close()


async def test_one_kept_connection_serves_every_scrape(monitor: Monitor) -> None:
    gz = gzip.compress(b"a 2\n")
    monitor.answers = [
        send(reply(b"a 1\n")),
        send(reply(gz, "Content-Encoding: gzip")),
        send(reply(b"a 3\n", "Content-Type: application/openmetrics-text; version=1.0.0")),
    ]
    pull = Pull(URL(monitor.url), 1 << 20)
    try:
        got = [await pull.get(10.0) for _ in range(3)]
    finally:
        pull.close()
    assert [(a.body, a.openmetrics) for a in got] == [
        (b"a 1\n", False),
        (b"a 2\n", False),
        (b"a 3\n", True),
    ]
    assert monitor.connections == 1
    first = monitor.requests[0].decode()
    assert first.startswith("GET /metrics?x=1 HTTP/1.1\r\n")
    host = monitor.url.split("/")[2]
    assert f"\r\nHost: {host}\r\n" in first
    assert "\r\nAccept-Encoding: gzip\r\n" in first


async def test_equal_digests_are_equal_answers_whichever_client(monitor: Monitor) -> None:
    """The digest is of the bytes as sent, their encoding and their format."""
    body = b"a 1\n"
    om = "Content-Type: application/openmetrics-text; version=1.0.0"
    ways = [
        reply(body),
        reply(gzip.compress(body, mtime=0), "Content-Encoding: gzip"),
        reply(body, om),
        reply(b"a 2\n"),
        reply(b"a 1\n\n"),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\na \r\n2\r\n1\n\r\n0\r\n\r\n",
    ]
    monitor.answers = [send(way) for way in ways * 2]
    pull = Pull(URL(monitor.url), 1 << 20)
    try:
        pulled = [await pull.get(10.0) for _ in ways]
    finally:
        pull.close()
    async with aiohttp.ClientSession() as session:
        fetched = [await fetch(session, monitor.url, 10.0, 1 << 20) for _ in ways]
    assert pulled == fetched
    digests = [a.digest for a in pulled]
    assert len(set(digests[:5])) == 5, "another encoding, format or body: another digest"
    assert digests[5] == digests[0], "the same bytes in chunks"


async def test_chunked_and_until_close_answers_are_whole(monitor: Monitor) -> None:
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\na 1\n\r\n4\r\nb 2\n\r\n0\r\n\r\n"
    until_close = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\na 1\nb 2\n"
    for answer in (send(chunked), send(until_close, close=True)):
        monitor.answers = [answer]
        monitor.requests.clear()
        assert await pull_once(monitor.url) == b"a 1\nb 2\n"


async def test_a_target_that_closed_its_kept_connection_is_reached_again(monitor: Monitor) -> None:
    monitor.answers = [
        send(reply(b"a 1\n"), close=True),  # answers, then closes while idle
        send(reply(b"a 2\n")),
        send(b"", close=True),  # takes the next request and closes without answering
        send(reply(b"a 3\n")),
    ]
    pull = Pull(URL(monitor.url), 1 << 20)
    try:
        assert (await pull.get(10.0))[0] == b"a 1\n"
        await eventually(lambda: holds(monitor.closed == 1), 10, "the first connection closed")
        assert (await pull.get(10.0))[0] == b"a 2\n"
        # the kept connection drops this one unanswered: tried once more, on a new one
        assert (await pull.get(10.0))[0] == b"a 3\n"
    finally:
        pull.close()
    assert monitor.connections == 3


async def test_a_new_connection_closed_unanswered_fails(monitor: Monitor) -> None:
    monitor.answers = [send(b"", close=True)]
    with pytest.raises(ScrapeError, match="without answering") as caught:
        await pull_once(monitor.url)
    assert caught.value.reason == "connect"
    assert monitor.connections == 1


@pytest.mark.parametrize(
    ("answer", "reason", "message"),
    [
        (reply(b"oops", status="500 Internal Server Error"), "http", "HTTP 500 Internal Server Error"),
        (reply(b"x" * 2000, status="503 Busy"), "http", "HTTP 503 Busy"),
        (reply(b"x" * 2000), "too_large", "body of 2000 bytes > 1000"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7d0\r\n" + b"x" * 2000, "too_large",
         "larger than 1000"),
        (b"SMTP ready\r\n\r\n", "parse", "malformed HTTP answer"),
        (reply(b"a 1\n", "Content-Encoding: br"), "parse", "was not asked for"),
        (reply(b"not gzip", "Content-Encoding: gzip"), "parse", "broken gzip"),
        (reply(b"a 1\n")[:-2], "connect", "closed in the middle"),
    ],
)  # fmt: skip
async def test_bad_answers_fail_with_their_reason(
    monitor: Monitor, answer: bytes, reason: str, message: str
) -> None:
    monitor.answers = [send(answer, close=True)]
    with pytest.raises(ScrapeError, match=message) as caught:
        await pull_once(monitor.url, limit=1000)
    assert caught.value.reason == reason


async def test_no_answer_in_time_is_a_timeout_and_the_next_scrape_reconnects(
    monitor: Monitor,
) -> None:
    monitor.answers = [hang, send(reply(b"a 1\n"))]
    pull = Pull(URL(monitor.url), 1 << 20)
    try:
        with pytest.raises(ScrapeError, match="no complete answer") as caught:
            await pull.get(0.2)
        assert caught.value.reason == "timeout"
        assert (await pull.get(10.0))[0] == b"a 1\n"
    finally:
        pull.close()
    assert monitor.connections == 2


async def test_a_refused_connection_is_a_connect_error() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(ScrapeError, match=f"Cannot connect to host 127.0.0.1:{port}") as caught:
        await pull_once(f"http://127.0.0.1:{port}/metrics")
    assert caught.value.reason == "connect"


async def test_a_cancelled_scrape_closes_its_connection(monitor: Monitor) -> None:
    monitor.answers = [hang]
    pull = Pull(URL(monitor.url), 1 << 20)
    task = asyncio.create_task(pull.get(60.0))
    await eventually(lambda: holds(len(monitor.requests) == 1), 10, "the request sent")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await eventually(lambda: holds(monitor.closed == 1), 10, "the connection closed")


def _loop(url: str, store: Store, session: aiohttp.ClientSession) -> ScrapeLoop:
    config = ScrapeConfig(1.0, 5.0, 1 << 20, {SourceKind.HAMI: 0}, PassThrough())
    target = Target("t1", url, "node-1", Flavour.HAMI, "t1")
    return ScrapeLoop(target, session, store, SelfMetrics(store), config, asyncio.Semaphore(4))


async def test_a_redirect_is_followed_and_an_unchanged_body_is_not_normalised_again(
    monitor: Monitor, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = build_cluster(1, seed=3, flavours=("hami",))[0]
    node.step(1000.0)
    body = node.exposition(1000.0)
    node.step(1015.0)
    other = node.exposition(1015.0)
    assert other != body
    location = monitor.url.replace("/metrics?x=1", "/moved")
    moved = send(reply(b"", f"Location: {location}", status="302 Found"))
    # the kept connection gets the 302; aiohttp asks again, follows it, and pulls from then on
    monitor.answers = [moved, moved, send(reply(body)), send(reply(body)), send(reply(other))]
    normalised: list[bytes] = []
    original = Normaliser.normalise

    def counted(self: Normaliser, text: bytes, openmetrics: bool = False) -> Batch:
        normalised.append(text)
        return original(self, text, openmetrics)

    monkeypatch.setattr(Normaliser, "normalise", counted)
    store = Store(stale_after=60)
    async with aiohttp.ClientSession() as session:
        loop = _loop(monitor.url, store, session)
        try:
            views = []
            for _ in range(3):
                await loop.scrape_once()
                view = store.view("node-1")
                assert not loop.health.failing, loop.health.error
                assert view is not None
                views.append(view)
        finally:
            loop.close()
    paths = [r.split(b" ")[1] for r in monitor.requests]
    assert paths == [b"/metrics?x=1", b"/metrics?x=1", b"/moved", b"/metrics?x=1", b"/metrics?x=1"]
    assert monitor.connections == 2, "the kept connection's, then aiohttp's only"
    assert normalised == [body, other]
    first, again, changed = views
    assert again.series is first.series  # the same batch, put again
    assert changed.series != first.series
    assert loop.health.scrapes == 3


async def test_a_removed_target_has_its_kept_connection_closed(
    monitor: Monitor, tmp_path: Path
) -> None:
    node = build_cluster(1, seed=4, flavours=("hami",))[0]
    node.step(1000.0)
    monitor.answers = [send(reply(node.exposition(1000.0)))]
    address = monitor.url.split("/")[2]
    targets = tmp_path / "targets.json"
    group = {"targets": [address], "labels": {"node": node.name, "flavour": "hami"}}
    targets.write_text(json.dumps([group]))
    async with running_collector(
        kubernetes=False, targets_file=targets, interval=0.3, timeout=0.25
    ):
        await eventually(lambda: holds(len(monitor.requests) >= 3), 10, "scrapes")
        assert monitor.connections == 1, "one kept connection for every scrape"
        targets.write_text("[]")
        await eventually(lambda: holds(monitor.closed == 1), 10, "the connection closed")


async def test_a_removed_target_is_freed_at_once_not_left_to_the_cycle_collector(
    monitor: Monitor,
) -> None:
    # collector.memory.heap keeps full collections rare, so what a dropped target held (its loop,
    # its normaliser's caches, its last batch) must go by reference counting alone
    node = build_cluster(1, seed=4, flavours=("hami",))[0]
    node.step(1000.0)
    monitor.answers = [send(reply(node.exposition(1000.0)))]
    target = Target("t1", monitor.url, node.name, Flavour.HAMI, "t1")
    config = ScrapeConfig(0.2, 5.0, 1 << 20, {SourceKind.HAMI: 0}, PassThrough())
    store = Store(stale_after=60)
    async with aiohttp.ClientSession() as session, Supervisor() as tasks:
        manager = ScrapeManager(session, store, SelfMetrics(store), config, tasks)
        await manager.sync("file", [target])
        await eventually(lambda: holds(len(monitor.requests) >= 2), 10, "scrapes")
        (loop,) = manager.loops()
        watched = (weakref.ref(loop), weakref.ref(loop._normaliser))
        del loop
        collecting = gc.isenabled()
        gc.disable()
        try:
            await manager.sync("file", [])
            assert [ref() for ref in watched] == [None, None]
        finally:
            if collecting:
                gc.enable()
