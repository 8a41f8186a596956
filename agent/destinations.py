"""Push every snapshot to every collector replica, each at its own pace.

``--collector`` names one or more URLs; a URL whose host resolves to several
addresses (a headless Service: one address per replica) becomes one
destination per address. Each destination is a :class:`~agent.push.Pusher`
with its own backlog, ordered replay and backoff, run as its own supervised
task, so a dead replica never delays the others. Names are resolved again
every ``refresh`` seconds through the event loop's resolver. The backlog of
an address that went away (a replica restarting: a headless Service lists
only ready pods) keeps taking snapshots, and the next new address of that URL
takes it over, so the replica that comes back gets the gap replayed; one that
no successor claims within ``backlog_seconds`` is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from agent.push import Backlog, Pusher, packed
from core.payload import Payload
from core.tasks import Supervised, Supervisor

log = logging.getLogger(__name__)

Resolver = Callable[[str, int], Awaitable[list[str]]]
"""Host name and port -> the addresses to push to, in the resolver's order."""


async def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to, through the event loop's resolver, once each."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One destination: a configured URL, and the address it is pushed to (None: by name)."""

    url: str
    address: str | None

    def __str__(self) -> str:
        return self.url if self.address is None else f"{self.url} ({self.address})"


@dataclass(frozen=True, slots=True)
class PushOptions:
    """What every destination's pusher is made with."""

    token: Callable[[], str | None]
    backlog_seconds: float
    backlog_bytes: int
    request_timeout: float = 10.0
    backoff: tuple[float, float] = (0.5, 30.0)


class Fanout:
    """The destinations of every configured URL, their pushers and their tasks."""

    def __init__(
        self,
        urls: list[str],
        options: PushOptions,
        tasks: Supervisor,
        resolver: Resolver = resolve,
        refresh: float = 60.0,
    ) -> None:
        self.urls = urls
        self.pushers: dict[Endpoint, Pusher] = {}
        self._options = options
        self._tasks = tasks
        self._running: dict[Endpoint, Supervised] = {}
        self._resolver = resolver
        self._refresh = refresh
        self.waiting: dict[str, list[tuple[float, Backlog]]] = {}
        """Per URL, the backlogs of addresses that went away, and since when, oldest first."""

    def submit(self, payload: Payload) -> None:
        """Queue a snapshot for every destination; packed once, never blocks."""
        item = packed(payload)
        for pusher in self.pushers.values():
            pusher.enqueue(item)
        for orphans in self.waiting.values():
            for _, backlog in orphans:
                backlog.append(item)

    async def run(self) -> None:
        """Resolve every URL now and every ``refresh`` seconds, forever."""
        while True:
            await self.update()
            await asyncio.sleep(self._refresh)

    async def update(self) -> None:
        """Resolve every URL once and start or stop destinations to match."""
        for url in self.urls:
            addresses = await self._addresses(url)
            if addresses is not None:
                await self._reconcile(url, addresses)

    async def _addresses(self, url: str) -> list[str | None] | None:
        """The addresses of ``url``'s host; None to keep what it has (the name did not resolve)."""
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            found = await self._resolver(host, port)
        except (OSError, UnicodeError) as exc:  # UnicodeError: a name IDNA cannot encode
            known = any(e.url == url for e in self.pushers)
            log.warning(
                "cannot resolve %s (%s); %s",
                host,
                exc,
                "keeping its addresses" if known else "pushing by name",
            )
            return None if known else [None]
        return list(found) or [None]

    async def _reconcile(self, url: str, addresses: list[str | None]) -> None:
        wanted = [Endpoint(url, a) for a in addresses]
        gone = [e for e in self.pushers if e.url == url and e not in wanted]
        if gone:
            await self._tasks.stop([self._running.pop(e) for e in gone])
        # A replica that moved: its successor inherits the backlog of an address that left.
        now = time.monotonic()
        orphans = self.waiting.setdefault(url, [])
        orphans.extend((now, self.pushers.pop(e).backlog) for e in gone)
        for endpoint in wanted:
            if endpoint not in self.pushers:
                self._start(endpoint, orphans.pop(0)[1] if orphans else self._backlog())
        while orphans and now - orphans[0][0] > self._options.backlog_seconds:
            dropped = orphans.pop(0)[1]
            log.warning("dropping %d snapshots of an address gone for good", len(dropped))

    def _backlog(self) -> Backlog:
        return Backlog(self._options.backlog_seconds, self._options.backlog_bytes)

    def _start(self, endpoint: Endpoint, backlog: Backlog) -> None:
        options = self._options
        pusher = Pusher(
            endpoint.url,
            options.token,
            backlog,
            options.request_timeout,
            options.backoff,
            endpoint.address,
        )
        self.pushers[endpoint] = pusher
        self._running[endpoint] = self._tasks.start("push", pusher.run, f"push {endpoint}")
        log.info("pushing to %s", endpoint)
