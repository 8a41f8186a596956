"""One target's scrapes over one kept-alive HTTP/1.1 connection, framed by llhttp.

Why not aiohttp's client for these: a monitor's answer is small (~50 series,
about a kilobyte gzipped), so a scrape's cost is mostly fixed work, and
aiohttp's request machinery (request and response objects, header multidicts,
the cookie jar, timers, a stream reader) took ~240 us of CPU per scrape where
this takes ~80 us (the bench in ``bench/scale/run.py`` pulls thousands of them).
httptools (Node's llhttp) parses the answer; what is written here is only one
GET at a time on one connection, its time limit and the body limit. What it
does not do, https and redirects, stays with aiohttp
(:func:`collector.sources.scrape.fetch`): :class:`Redirected` says when.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import NamedTuple

import httptools
from yarl import URL

from collector.sources.inflate import Inflate, InflateError
from core.content import OPENMETRICS_CONTENT_TYPE
from core.durations import duration

ACCEPT = "text/plain;version=0.0.4;q=1.0,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"
USER_AGENT = "hami-usage-collector"


class Answer(NamedTuple):
    """A good answer: its body (inflated), whether it is OpenMetrics, and its digest."""

    body: bytes
    openmetrics: bool
    digest: bytes
    """Of the body as sent (before inflating), with its encoding and format: equal digests
    mean equal bodies. Hashing the gzip bytes, not the inflated ones, costs ~1/8 as much."""


def digester(gzipped: bool, openmetrics: bool) -> hashlib.blake2b:
    """The hash an answer's bytes go through as they arrive (:attr:`Answer.digest`)."""
    return hashlib.blake2b(digest_size=16, person=b"gz" * gzipped + b"om" * openmetrics)


def is_openmetrics(content_type: str) -> bool:
    """Whether a ``Content-Type`` (without parameters, lower case) is OpenMetrics' text."""
    return OPENMETRICS_CONTENT_TYPE.startswith(content_type + ";")


class ScrapeError(Exception):
    """A failed scrape; ``reason`` is one fixed word for metrics."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Redirected(Exception):
    """The target answered 3xx: the caller follows it with a full client."""


class _Dropped(Exception):
    """A kept-alive connection closed before any byte of the answer: it may be tried again."""


def request_bytes(url: URL) -> bytes:
    """The GET sent to ``url`` on every scrape, built once."""
    return (
        f"GET {url.raw_path_qs} HTTP/1.1\r\nHost: {url.host_port_subcomponent}\r\n"
        f"User-Agent: {USER_AGENT}\r\nAccept: {ACCEPT}\r\nAccept-Encoding: gzip\r\n\r\n"
    ).encode("ascii")


class _Exchange(asyncio.Protocol):
    """One connection; at most one GET in flight on it."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self._answer: asyncio.Future[Answer] | None = None
        self._expiry: asyncio.TimerHandle | None = None
        self._time_limit = 0.0
        self._reason = b""
        self._encoding = b""
        self._content_type = b""
        self._framed = False
        self._length: int | None = None
        self._heard = False
        self._headers_done = False
        self._body = bytearray()
        self._inflate: Inflate | None = None
        self._openmetrics = False
        self._digest = digester(False, False)

    @property
    def open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    async def get(self, request: bytes, time_limit: float) -> Answer:
        """Send ``request`` and wait for the whole answer, at most ``time_limit`` seconds."""
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Answer] = loop.create_future()
        self._answer = answer
        self._reason, self._encoding, self._content_type = b"", b"", b""
        self._framed = self._heard = self._headers_done = False
        self._length = None
        self._body = bytearray()
        self._inflate = None
        self._time_limit = time_limit
        self._expiry = loop.call_later(time_limit, self._expire)
        self.transport.write(request)
        try:
            return await answer
        except asyncio.CancelledError:
            self.close()  # the answer would come to nobody
            raise
        finally:
            self._expiry.cancel()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()
            self.transport = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self._answer is None or self._answer.done():
            self._fail(ScrapeError("parse", "bytes sent with no request pending"))
            return
        self._heard = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            self._fail(cause if isinstance(cause, Exception) else exc)
        except httptools.HttpParserError as exc:
            self._fail(ScrapeError("parse", f"malformed HTTP answer: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self._answer is None or self._answer.done():
            return
        if self._headers_done and not self._framed:
            self.on_message_complete()  # no length, not chunked: the answer ends with the connection
        elif not self._heard:
            self._fail(_Dropped())
        else:
            self._fail(ScrapeError("connect", "the connection closed in the middle of the answer"))

    # httptools' callbacks

    def on_status(self, reason: bytes) -> None:
        self._reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-encoding":
            self._encoding = value.strip().lower()
        elif name == b"content-type":
            self._content_type = value
        elif name == b"content-length":
            self._framed = True
            self._length = int(value) if value.strip().isdigit() else None
        elif name == b"transfer-encoding":
            self._framed = True

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 300 <= status < 400:
            raise Redirected()
        if status != 200:
            reason = self._reason.decode("latin-1")
            raise ScrapeError("http", f"HTTP {status} {reason}")
        if self._length is not None and self._length > self._limit:
            raise ScrapeError("too_large", f"body of {self._length} bytes > {self._limit}")
        if self._encoding == b"gzip":
            self._inflate = Inflate("gzip", self._limit)
        elif self._encoding not in (b"identity", b""):
            shown = self._encoding.decode("latin-1")[:40]
            raise ScrapeError("parse", f"Content-Encoding {shown!r} was not asked for")
        mime = self._content_type.split(b";", 1)[0].strip().lower().decode("latin-1")
        self._openmetrics = is_openmetrics(mime)
        self._digest = digester(self._inflate is not None, self._openmetrics)
        self._headers_done = True

    def on_body(self, chunk: bytes) -> None:
        self._digest.update(chunk)
        try:
            self._body += chunk if self._inflate is None else self._inflate.feed(chunk)
        except InflateError as exc:
            raise ScrapeError("parse", f"broken gzip body: {exc}") from None
        if len(self._body) > self._limit:
            raise ScrapeError("too_large", f"body larger than {self._limit} bytes")

    def on_message_complete(self) -> None:
        answer = self._answer
        if answer is None or answer.done():
            return
        if self._inflate is not None:
            try:
                self._inflate.finish()
            except InflateError as exc:
                self._fail(ScrapeError("parse", f"broken gzip body: {exc}"))
                return
        answer.set_result(Answer(bytes(self._body), self._openmetrics, self._digest.digest()))
        self._settle()
        if not self._parser.should_keep_alive():
            self.close()

    def _expire(self) -> None:
        self._fail(
            ScrapeError("timeout", f"no complete answer within {duration(self._time_limit)}")
        )

    def _fail(self, exc: Exception) -> None:
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(exc)
        self._settle()
        self.close()  # the connection's state is unknown: the next scrape opens a new one

    def _settle(self) -> None:
        # between scrapes a connection holds nothing of the last answer: at thousands of
        # targets, each one's inflater (its 32 KiB window) and body added ~80 MiB of RSS
        self._answer, self._inflate, self._body = None, None, bytearray()


class Pull:
    """Scrapes of one plain-http URL, over a connection kept from one scrape to the next."""

    def __init__(self, url: URL, limit: int) -> None:
        self._host = url.raw_host or ""
        self._port = url.port or 80
        self._request = request_bytes(url)
        self._limit = limit
        self._exchange: _Exchange | None = None

    async def get(self, time_limit: float) -> Answer:
        """The answer, its body inflated; :class:`ScrapeError` if not good.

        A kept-alive connection the target closed just as it was used is tried
        once more on a new one.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + time_limit
        for _ in range(2):
            exchange = self._exchange
            kept = exchange is not None and exchange.open
            if exchange is None or not kept:
                exchange = self._exchange = await self._connect(time_limit)
            try:
                return await exchange.get(self._request, max(0.0, deadline - loop.time()))
            except _Dropped:
                if not kept:
                    break
        raise ScrapeError("connect", "the target closed the connection without answering")

    def close(self) -> None:
        """Close the kept connection, if any."""
        if self._exchange is not None:
            self._exchange.close()
            self._exchange = None

    async def _connect(self, time_limit: float) -> _Exchange:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(time_limit):
                _, exchange = await loop.create_connection(
                    lambda: _Exchange(self._limit), self._host, self._port
                )
        except TimeoutError:
            raise ScrapeError("timeout", f"no connection within {duration(time_limit)}") from None
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise ScrapeError(
                "connect", f"Cannot connect to host {self._host}:{self._port} [{reason}]"
            ) from None
        return exchange
