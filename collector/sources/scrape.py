"""Pull every target on its own loop and hand good batches to the store.

Failure policy: a scrape that fails (connect, timeout, HTTP status, size, parse)
changes nothing in the store; the target's previous good batch stays until it is
``stale_after`` old, then the store forgets it. A target that discovery drops is
forgotten at once, after its loop has stopped. A fault of ours after a good
scrape (the store, our own metrics) ends the loop's run; its supervisor logs it
and starts the loop again.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import aiohttp
from yarl import URL

from collector.normalise.batch import Batch, Source
from collector.normalise.bodies import Normaliser, PassThrough
from collector.normalise.schema import Flavour, SourceKind
from collector.selfmetrics import SelfMetrics
from collector.sources.inflate import Inflate, InflateError
from collector.sources.pull import (
    ACCEPT,
    Answer,
    Pull,
    Redirected,
    ScrapeError,
    digester,
    is_openmetrics,
)
from collector.sources.targets import Target
from collector.store.latest import Store
from core.durations import duration
from core.tasks import Supervised, Supervisor

log = logging.getLogger(__name__)

IN_FLIGHT = 256
"""Scrapes in flight at once, over every target; the rest wait for a slot."""


@dataclass(frozen=True, slots=True)
class ScrapeConfig:
    """How every target is pulled."""

    interval: float
    timeout: float
    body_limit: int
    priorities: Mapping[SourceKind, int]
    passthrough: PassThrough


async def fetch(
    session: aiohttp.ClientSession, url: str | URL, time_limit: float, limit: int
) -> Answer:
    """GET ``url``; return the answer, its body decompressed.

    For what :class:`~collector.sources.pull.Pull` leaves out: https, redirects.
    Gzip is inflated here, not by aiohttp: aiohttp takes a gzip stream that
    ends early (a monitor or proxy that died mid-body) for a whole one and
    hands on the prefix, whose last line may even parse, with a cut value.
    """
    try:
        async with session.get(
            url,
            headers={"Accept": ACCEPT, "Accept-Encoding": "gzip"},
            timeout=aiohttp.ClientTimeout(total=time_limit),
            auto_decompress=False,
        ) as resp:
            if resp.status != 200:
                raise ScrapeError("http", f"HTTP {resp.status} {resp.reason}")
            if resp.content_length is not None and resp.content_length > limit:
                raise ScrapeError("too_large", f"body of {resp.content_length} bytes > {limit}")
            coding = resp.headers.get("Content-Encoding", "identity").strip().lower()
            if coding not in ("gzip", "identity", ""):
                raise ScrapeError("parse", f"Content-Encoding {coding[:40]!r} was not asked for")
            body = bytearray()
            gunzip = Inflate(coding, limit) if coding == "gzip" else None
            openmetrics = is_openmetrics(resp.content_type)
            digest = digester(gunzip is not None, openmetrics)
            async for chunk in resp.content.iter_chunked(1 << 16):
                digest.update(chunk)
                body += chunk if gunzip is None else gunzip.feed(chunk)
                if len(body) > limit:
                    raise ScrapeError("too_large", f"body larger than {limit} bytes")
            if gunzip is not None:
                gunzip.finish()
            return Answer(bytes(body), openmetrics, digest.digest())
    except InflateError as exc:
        raise ScrapeError("parse", f"broken gzip body: {exc}") from None
    except TimeoutError:
        raise ScrapeError("timeout", f"no complete answer within {duration(time_limit)}") from None
    except aiohttp.ClientError as exc:
        raise ScrapeError("connect", f"{type(exc).__name__}: {exc}") from None


RECENT = 10
"""Outcomes of a target's latest scrapes kept for the status page."""


@dataclass(slots=True)
class Health:
    """What a target's latest scrapes said; its loop updates it, the status page reads it.

    Wall-clock times (``time.time()``). ``error`` is the latest failure's message,
    kept after a recovery so a flapping target shows why it flaps; ``recent``
    holds the latest outcomes, oldest first, True for a good scrape.
    """

    scrapes: int = 0
    failing: bool = False
    last_success: float | None = None
    duration: float | None = None
    samples: int | None = None
    error: str = ""
    error_at: float | None = None
    recent: deque[bool] = field(default_factory=lambda: deque(maxlen=RECENT))

    def succeeded(self, duration: float, samples: int) -> None:
        """Note a good scrape."""
        self._note(True, duration)
        self.last_success = time.time()
        self.samples = samples

    def failed(self, duration: float, message: str) -> None:
        """Note a failed scrape and why."""
        self._note(False, duration)
        self.error, self.error_at = message, time.time()

    def _note(self, good: bool, duration: float) -> None:
        self.scrapes += 1
        self.failing = not good
        self.duration = duration
        self.recent.append(good)


class ScrapeLoop:
    """Scrapes one target every interval, from a start offset hashed from its key."""

    def __init__(
        self,
        target: Target,
        session: aiohttp.ClientSession,
        store: Store,
        metrics: SelfMetrics,
        config: ScrapeConfig,
        slots: asyncio.Semaphore,
    ) -> None:
        self.target = target
        self.tried = False
        self._session = session
        self._slots = slots
        self._store = store
        self._metrics = metrics
        self._config = config
        self.source = Source(
            target.key,
            target.name,
            target.node,
            SourceKind(target.flavour),
            config.priorities[SourceKind(target.flavour)],
        )
        self._normaliser = Normaliser(target.node, config.passthrough)
        # parsed once: parsing the URL string again on every scrape (its host through
        # ipaddress) cost more CPU than parsing a small body (py-spy, bench/scale/run.py)
        self._url = URL(target.url)
        plain = self._url.scheme == "http" and self._url.user is None
        self._pull = Pull(self._url, config.body_limit) if plain else None
        self.health = Health()
        # a target whose answer is byte for byte the last one gives the same batch: its
        # digest (not the body, kilobytes a target) skips the normaliser
        self._last: tuple[bytes, Batch] | None = None

    async def run(self) -> None:
        """Scrape forever; every scrape error is recorded, none ends the loop."""
        interval = self._config.interval
        offset = zlib.crc32(self.target.key.encode()) % 1000 / 1000 * interval
        next_at = time.monotonic() + offset
        while True:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            await self.scrape_once()
            next_at += interval
            now = time.monotonic()
            if next_at < now:
                next_at += (now - next_at) // interval * interval + interval

    async def scrape_once(self) -> None:
        """Scrape now and record the outcome.

        Only the scrape itself is guarded: a fault past it (the store, our own
        metrics) is ours, not the target's, so it leaves the loop for the
        supervisor, which logs it, counts it and starts the loop again.
        """
        started = time.monotonic()
        try:
            batch = await self._scrape()
        except ScrapeError as exc:
            self._fail(exc.reason, str(exc), started)
            return
        except Exception:
            log.exception("scrape of %s failed unexpectedly", self.target.name)
            self._fail("internal", "internal error", started)
            return
        finally:
            self.tried = True
        self._store.put(self.source, batch, time.monotonic())
        duration = time.monotonic() - started
        self._metrics.scraped(self.source, duration, batch, time.time())
        if self.health.failing:
            log.info("target %s (node %s) recovered", self.target.name, self.target.node)
        self.health.succeeded(duration, batch.samples)

    def close(self) -> None:
        """Close the target's kept connection (the loop has stopped)."""
        if self._pull is not None:
            self._pull.close()

    async def _scrape(self) -> Batch:
        async with self._slots:
            answer = await self._fetch()
        if self._last is not None and self._last[0] == answer.digest:
            return self._last[1]
        try:
            batch = self._normaliser.normalise(answer.body, answer.openmetrics)
        except ValueError as exc:
            raise ScrapeError("parse", str(exc)) from None
        self._last = answer.digest, batch
        return batch

    async def _fetch(self) -> Answer:
        timeout, limit = self._config.timeout, self._config.body_limit
        if self._pull is not None:
            try:
                return await self._pull.get(timeout)
            except Redirected:  # from now on aiohttp, which follows redirects, pulls it
                self._pull.close()
                self._pull = None
        return await fetch(self._session, self._url, timeout, limit)

    def _fail(self, reason: str, message: str, started: float) -> None:
        duration = time.monotonic() - started
        self._metrics.failed(self.source, duration, reason)
        if not self.health.failing:
            log.warning(
                "scrape of %s (node %s, %s) failed: %s",
                self.target.name,
                self.target.node,
                self.target.url,
                message,
            )
        self.health.failed(duration, f"{reason}: {message}")


class ScrapeManager:
    """Owns one :class:`ScrapeLoop` per target, reconciled on each discovery update.

    Each loop is a task of ``tasks``, of the kind ``scrape`` (one restart
    counter for all targets), named for its target in logs and health.
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        store: Store,
        metrics: SelfMetrics,
        config: ScrapeConfig,
        tasks: Supervisor,
    ) -> None:
        self._session = session
        self._store = store
        self._metrics = metrics
        self._config = config
        self._tasks = tasks
        self._by_provider: dict[str, frozenset[Target]] = {}
        self._loops: dict[Target, tuple[ScrapeLoop, Supervised]] = {}
        self._lock = asyncio.Lock()
        # the bound on scrapes in flight is ours, not the connector's: aiohttp wakes a
        # waiter for a connection by shuffling the list of every waiting host, ~19% of
        # the CPU at 5,000 targets behind a slow loop (py-spy, bench/scale/run.py), so a
        # collector behind fell further behind; a semaphore wakes one waiter in O(1)
        self._slots = asyncio.Semaphore(IN_FLIGHT)

    @property
    def targets(self) -> list[Target]:
        """The targets being scraped now."""
        return list(self._loops)

    def loops(self) -> list[ScrapeLoop]:
        """The loops running now, one per target (for the status page)."""
        return [loop for loop, _ in self._loops.values()]

    def tried_all(self) -> bool:
        """Whether every known target has been scraped at least once."""
        return all(loop.tried for loop, _ in self._loops.values())

    async def sync(self, provider: str, targets: Iterable[Target]) -> None:
        """Make ``provider``'s targets exactly ``targets``: stop removed loops, start new ones."""
        async with self._lock:
            self._by_provider[provider] = frozenset(targets)
            wanted = frozenset().union(*self._by_provider.values())
            gone = [t for t in self._loops if t not in wanted]
            await self._stop(gone)
            added = [t for t in wanted if t not in self._loops]
            for target in added:
                loop = ScrapeLoop(
                    target, self._session, self._store, self._metrics, self._config, self._slots
                )
                task = self._tasks.start("scrape", loop.run, name=f"scrape {target.name}")
                self._loops[target] = (loop, task)
            if gone or added:
                log.info(
                    "targets: %d added, %d removed, %d now", len(added), len(gone), len(self._loops)
                )
                self._count()

    async def close(self) -> None:
        """Stop every loop and wait for them."""
        async with self._lock:
            await self._stop(list(self._loops))

    async def _stop(self, targets: list[Target]) -> None:
        await self._tasks.stop(self._loops[t][1] for t in targets)
        for target in targets:
            loop, _ = self._loops.pop(target)
            loop.close()
            self._store.remove(target.key)
            self._metrics.forget(loop.source)

    def _count(self) -> None:
        counts = dict.fromkeys(Flavour, 0)
        for target in self._loops:
            counts[target.flavour] += 1
        self._metrics.discovered(counts)
