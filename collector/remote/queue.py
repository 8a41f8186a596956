"""One remote-write destination: bounded queues in shards, batches, retries.

The semantics are Prometheus' (``storage/remote/queue_manager.go``): samples
wait in memory, a few shards send in parallel, each at most one request at a
time of up to ``batch`` samples; a 5xx, a 429 or a failed connection is retried
with exponential backoff (``Retry-After`` when the receiver names a longer
wait), so a shard's samples reach the receiver in order; any other 4xx drops
that request's samples (counted, logged once per status and reason) and the
shard goes on. A series' samples always go through the same shard (by node),
so a receiver never sees them out of order.

Enqueueing never waits: a shard holds at most its share of ``max_samples``;
past it the oldest waiting samples are dropped and counted. A request being
sent or retried is not dropped.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import zlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import aiohttp

from collector.remote import encode
from collector.remote.stats import DestinationStats
from core.durations import duration

log = logging.getLogger(__name__)

_LOGGED_REASONS = 64
"""Distinct refusals logged per destination; a receiver naming each series cannot flood the log."""


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """How one destination queues and sends; the same for every destination."""

    max_samples: int = 2_000_000
    batch: int = 2_000
    shards: int = 4
    timeout: float = 30.0
    min_backoff: float = 0.03
    max_backoff: float = 5.0


@dataclass(slots=True)
class _Entry:
    """Samples of one node at one time, or staleness markers of ``keys``, in order of arrival.

    ``series`` is the store's own mapping (never changed after the put); it is
    listed only when a shard first takes from it, and ``taken`` counts what is
    already out.
    """

    node: str | None
    millis: int
    size: int
    series: Mapping[bytes, float] | None = None
    keys: Collection[bytes] | None = None
    taken: int = 0
    listed: list[bytes] | None = field(default=None)
    values: list[float] | None = field(default=None)

    def left(self) -> int:
        return self.size - self.taken


class _Shard:
    """A queue and its sender; the queue is bounded in samples."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.entries: collections.deque[_Entry] = collections.deque()
        self.queued = 0
        self.ready = asyncio.Event()
        self.idle = asyncio.Event()
        self.idle.set()

    def put(self, entry: _Entry) -> int:
        """Queue ``entry``; return how many samples were dropped to keep the bound."""
        dropped = 0
        excess = entry.left() - self.bound
        if excess > 0:  # one entry larger than the whole queue: its first samples go
            entry.taken += excess
            dropped += excess
        while self.entries and self.queued + entry.left() > self.bound:
            oldest = self.entries.popleft()
            dropped += oldest.left()
            self.queued -= oldest.left()
        self.entries.append(entry)
        self.queued += entry.left()
        self.ready.set()
        self.idle.clear()
        return dropped


class Destination:
    """Sends to one receiver URL; ``enqueue`` and ``mark_stale`` never wait."""

    def __init__(
        self,
        url: str,
        session: aiohttp.ClientSession,
        heads: encode.Heads,
        stats: DestinationStats,
        config: QueueConfig,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.url = url
        self.stats = stats
        self._session = session
        self._heads = heads
        self._config = config
        self._headers = {**encode.HEADERS, **(headers or {})}
        self._shards = [
            _Shard(max(1, config.max_samples // config.shards)) for _ in range(config.shards)
        ]
        self._logged: set[str] = set()

    def enqueue(self, node: str | None, series: Mapping[bytes, float], millis: int) -> None:
        """Queue samples of ``node`` at ``millis`` (None: the keys hold every label)."""
        self._put(_Entry(node, millis, len(series), series=series))

    def mark_stale(self, node: str | None, keys: Collection[bytes], millis: int) -> None:
        """Queue staleness markers at ``millis`` for series of ``node`` that went."""
        self._put(_Entry(node, millis, len(keys), keys=keys))

    def _put(self, entry: _Entry) -> None:
        shard = self._shards[zlib.crc32((entry.node or "").encode()) % len(self._shards)]
        dropped = shard.put(entry)
        self.stats.queued(entry.size, dropped)

    def pending(self) -> int:
        """Samples waiting, not counting a request in flight."""
        return sum(shard.queued for shard in self._shards)

    async def run(self, index: int) -> None:
        """Send shard ``index``'s samples until cancelled."""
        shard = self._shards[index]
        while True:
            if not shard.entries:
                shard.idle.set()
                shard.ready.clear()
                await shard.ready.wait()
                continue
            body, count = self._take(shard)
            await self._send(encode.compress(body), count)

    async def drained(self) -> None:
        """Return once every shard is empty with nothing in flight."""
        for shard in self._shards:
            await shard.idle.wait()

    async def send_metadata(self, families: list[tuple[str, str, str]]) -> None:
        """Send HELP and TYPE of ``families`` once (no retry: they are sent again later)."""
        if families:
            body = encode.compress(encode.encode_metadata(families))
            await self._post(body, 0, retry=False)

    def _take(self, shard: _Shard) -> tuple[bytes, int]:
        """Encode up to ``batch`` samples from the head of ``shard``."""
        parts: list[bytes] = []
        room = self._config.batch
        while shard.entries and room > 0:
            entry = shard.entries[0]
            start = entry.taken
            end = min(entry.size, start + room)
            tail = encode.timestamp_tail(entry.millis)
            if tail is None:
                self._unsendable(shard, entry)
                continue
            if entry.keys is not None:
                self._markers(parts, entry, start, end, tail)
            else:
                self._samples(parts, entry, start, end, tail)
            entry.taken = end
            room -= end - start
            shard.queued -= end - start
            if end >= entry.size:
                shard.entries.popleft()
        return b"".join(parts), self._config.batch - room

    def _samples(
        self, parts: list[bytes], entry: _Entry, start: int, end: int, tail: bytes
    ) -> None:
        if entry.listed is None or entry.values is None:
            assert entry.series is not None
            entry.listed, entry.values = list(entry.series), list(entry.series.values())
        heads = self._heads.heads(entry.node, entry.listed[start:end])
        parts.extend(encode.samples(heads, entry.values[start:end], tail))

    def _markers(
        self, parts: list[bytes], entry: _Entry, start: int, end: int, tail: bytes
    ) -> None:
        if entry.listed is None:
            assert entry.keys is not None
            entry.listed = list(entry.keys)
        keys = entry.listed[start:end]
        parts.extend(encode.markers(self._heads.heads(entry.node, keys), tail))
        self._heads.forget(entry.node, keys)

    def _unsendable(self, shard: _Shard, entry: _Entry) -> None:
        """Drop an entry whose time cannot be sent (counted as failed), logged once."""
        shard.entries.popleft()
        shard.queued -= entry.left()
        self.stats.failed(entry.left())
        what = f"a batch of node {entry.node} at {entry.millis} ms, outside the years 2004-2109"
        self._log_once("time", what)

    async def _send(self, body: bytes, count: int) -> None:
        await self._post(body, count, retry=True)

    async def _post(self, body: bytes, count: int, retry: bool) -> None:
        backoff = self._config.min_backoff
        while True:
            started = time.monotonic()
            wait = backoff
            try:
                async with self._session.post(
                    self.url,
                    data=body,
                    headers=self._headers,
                    timeout=aiohttp.ClientTimeout(total=self._config.timeout),
                ) as resp:
                    if resp.status < 300:
                        self.stats.sent(count, time.monotonic() - started, time.time())
                        return
                    reason = (await resp.text(errors="replace"))[:200].strip()
                    if resp.status != 429 and resp.status < 500:
                        self._rejected(resp.status, reason, count)
                        return
                    wait = max(backoff, retry_after(resp.headers.get("Retry-After")))
                    problem = f"HTTP {resp.status}: {reason}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                problem = f"{type(exc).__name__}: {exc}"
            self.stats.trouble(problem.replace(self.url, self.stats.name))  # no user info
            if not retry:
                log.info("remote write metadata to %s failed: %s", self.stats.name, problem)
                return
            self.stats.retried(count)
            log.debug(
                "remote write to %s: %s; retrying in %s", self.stats.name, problem, duration(wait)
            )
            await asyncio.sleep(wait)
            backoff = min(backoff * 2, self._config.max_backoff)

    def _rejected(self, status: int, reason: str, count: int) -> None:
        self.stats.failed(count)
        first_line = reason.splitlines()[0][:60] if reason else ""
        what = f"{count} samples refused (HTTP {status}: {first_line})"
        self.stats.trouble(what)
        self._log_once(f"{status} {first_line}", what)

    def _log_once(self, key: str, what: str) -> None:
        """Log ``what`` the first time ``key`` (a status and reason) happens."""
        if key not in self._logged and len(self._logged) < _LOGGED_REASONS:
            self._logged.add(key)
            log.warning(
                "remote write to %s: %s; dropped, and counted only from now on for this reason",
                self.stats.name,
                what,
            )


def retry_after(value: str | None) -> float:
    """Seconds a ``Retry-After`` header asks for, at most 300 (delta seconds only; dates are ignored)."""
    try:
        return min(max(float(value), 0.0), 300.0) if value else 0.0
    except ValueError:
        return 0.0
