"""A scrape's gzip body is taken whole or not at all (found by the soak: ``make soak``).

aiohttp, left to inflate, hands on the prefix of a gzip stream that stops
early; the collector then kept half a node's series, the last one possibly
with a cut value, as a good scrape. Both clients a scrape may use are held to
it: the kept-connection one for plain http, aiohttp's for the rest.
"""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web
from yarl import URL

from collector.sources.pull import Pull, ScrapeError
from collector.sources.scrape import fetch

BODY = b"".join(b'hami_vgpu_memory_used_bytes{pod="p%d"} 123456789\n' % i for i in range(3000))


@pytest.fixture
async def serve() -> AsyncIterator[tuple[dict[str, object], str]]:
    """A monitor answering with ``answer["body"]`` and ``answer["encoding"]``."""
    answer: dict[str, object] = {}

    async def handler(request: web.Request) -> web.Response:
        headers = {"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
        if answer.get("encoding"):
            headers["Content-Encoding"] = str(answer["encoding"])
        body = answer["body"]
        assert isinstance(body, bytes)
        return web.Response(body=body, headers=headers)

    app = web.Application()
    app.router.add_get("/metrics", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield answer, f"http://127.0.0.1:{runner.addresses[0][1]}/metrics"
    finally:
        await runner.cleanup()


Get = Callable[..., Awaitable[bytes]]


async def _aiohttp(url: str, limit: int = 1 << 20) -> bytes:
    async with aiohttp.ClientSession() as session:
        return (await fetch(session, url, 10.0, limit)).body


async def _pull(url: str, limit: int = 1 << 20) -> bytes:
    pull = Pull(URL(url), limit)
    try:
        body = (await pull.get(10.0)).body
    finally:
        pull.close()
    return body


@pytest.fixture(params=[_pull, _aiohttp], ids=["pull", "aiohttp"])
def get(request: pytest.FixtureRequest) -> Get:
    client: Get = request.param
    return client


@pytest.mark.parametrize("cut", [0.25, 0.5, 0.99])
async def test_a_truncated_gzip_body_is_a_parse_error(
    serve: tuple[dict[str, object], str], cut: float, get: Get
) -> None:
    answer, url = serve
    whole = gzip.compress(BODY)
    answer.update(body=whole[: int(len(whole) * cut)], encoding="gzip")
    with pytest.raises(ScrapeError, match="truncated") as caught:
        await get(url)
    assert caught.value.reason == "parse"


async def test_whole_gzip_bodies_of_one_or_more_members_and_plain_ones_are_taken(
    serve: tuple[dict[str, object], str], get: Get
) -> None:
    answer, url = serve
    half = len(BODY) // 2
    for body, encoding in (
        (gzip.compress(BODY), "gzip"),
        (gzip.compress(BODY[:half]) + gzip.compress(BODY[half:]), "gzip"),
        (BODY, None),
    ):
        answer.update(body=body, encoding=encoding)
        assert await get(url) == BODY


async def test_garbage_and_unasked_encodings_are_parse_errors(
    serve: tuple[dict[str, object], str], get: Get
) -> None:
    answer, url = serve
    for body, encoding, message in (
        (b"not gzip at all", "gzip", "broken gzip"),
        (gzip.compress(BODY) + b"\0\0\0", "gzip", "broken gzip"),
        (BODY, "br", "was not asked for"),
    ):
        answer.update(body=body, encoding=encoding)
        with pytest.raises(ScrapeError, match=message):
            await get(url)


async def test_the_limit_applies_to_the_inflated_size(
    serve: tuple[dict[str, object], str], get: Get
) -> None:
    answer, url = serve
    answer.update(body=gzip.compress(b"x" * (8 << 20)), encoding="gzip")
    with pytest.raises(ScrapeError, match="larger than") as caught:
        await get(url, limit=1 << 20)
    assert caught.value.reason == "too_large"
