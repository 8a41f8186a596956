"""Send snapshots to the collector without ever making the sampler wait.

The sampler hands each snapshot to :meth:`Pusher.submit`, which only queues it.
One sender task drains the queue oldest first. While the collector is away the
queue is the backlog: bounded by age and by bytes (oldest dropped first), and
replayed in order once the collector answers again, so history has no gap.
A pusher sends to one collector address; :mod:`agent.destinations` runs one
per replica, each with its own backlog, so a dead replica delays no other.

Requests go through the standard library's ``http.client`` in a worker thread,
one at a time per destination: a DaemonSet on every GPU node has a memory goal
(< 40 MiB) that importing an async HTTP library alone would use a third of.
"""

from __future__ import annotations

import asyncio
import gzip
import http.client
import logging
import random
import socket
import ssl
import urllib.parse
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core.payload import Payload

log = logging.getLogger(__name__)

_tls: ssl.SSLContext | None = None
"""The context of HTTPS pushes made without one of their own (None: the system's CAs)."""


def trust(ca_file: Path | str | None) -> None:
    """Check the collector's certificate against ``ca_file`` (``--collector-ca-file``), or the
    system's CAs when None, in every HTTPS push of this process that names no context.

    Raises OSError or ssl.SSLError when the file cannot be read as PEM certificates.
    """
    global _tls
    _tls = ssl.create_default_context(cafile=str(ca_file)) if ca_file is not None else None


@dataclass(frozen=True, slots=True)
class Queued:
    """A snapshot ready to send: its gzipped JSON and when it was taken."""

    body: bytes
    taken: float
    sequence: int


class Backlog:
    """Snapshots not yet accepted, oldest first, within ``max_age`` seconds and ``max_bytes``."""

    def __init__(self, max_age: float, max_bytes: int) -> None:
        self.max_age = max_age
        self.max_bytes = max_bytes
        self.bytes = 0
        self.dropped = 0
        self._items: deque[Queued] = deque()

    def __len__(self) -> int:
        return len(self._items)

    def append(self, item: Queued) -> None:
        """Queue a snapshot, dropping the oldest ones past the limits."""
        self._items.append(item)
        self.bytes += len(item.body)
        self._trim(item.taken)

    def oldest(self) -> Queued | None:
        """The snapshot to send next."""
        return self._items[0] if self._items else None

    def pop(self) -> None:
        """Forget the oldest snapshot (accepted, or refused for good)."""
        self.bytes -= len(self._items.popleft().body)

    def _trim(self, now: float) -> None:
        while self._items and (
            self.bytes > self.max_bytes or now - self._items[0].taken > self.max_age
        ):
            self.pop()
            self.dropped += 1


@dataclass(slots=True)
class PushStats:
    """What the sender did, for the agent's own metrics."""

    accepted: int = 0
    refused: int = 0
    failed: int = 0
    last_error: str | None = None


def packed(payload: Payload) -> Queued:
    """A snapshot as it is sent: gzipped JSON (level 1: the agent's CPU matters more)."""
    body = gzip.compress(payload.model_dump_json(exclude_none=True).encode(), compresslevel=1)
    return Queued(body, payload.time, payload.sequence)


class Pusher:
    """Owns the backlog and the one task that sends it, to one collector.

    With ``address``, every request connects to that address while the Host
    header and the TLS server name stay the URL's host: one replica behind a
    headless Service's name.
    """

    def __init__(
        self,
        url: str,
        token: Callable[[], str | None],
        backlog: Backlog,
        request_timeout: float = 10.0,
        backoff: tuple[float, float] = (0.5, 30.0),
        address: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.backlog = backlog
        self.ssl_context = ssl_context
        self.stats = PushStats()
        self.address = address
        self._url = urllib.parse.urlsplit(url.rstrip("/") + "/api/v1/push")
        self._token = token
        self._timeout = request_timeout
        self._backoff = backoff
        self._ready = asyncio.Event()

    def submit(self, payload: Payload) -> None:
        """Queue a snapshot; never blocks on the network."""
        self.enqueue(packed(payload))

    def enqueue(self, item: Queued) -> None:
        """Queue an already packed snapshot (one body shared by every destination)."""
        self.backlog.append(item)
        self._ready.set()

    async def run(self) -> None:
        """Send queued snapshots forever, oldest first, backing off while the collector fails."""
        attempt = 0
        while True:
            item = self.backlog.oldest()
            if item is None:
                self._ready.clear()
                await self._ready.wait()
                continue
            delay = await self._send(item)
            if delay is None:
                attempt = 0
                continue
            attempt += 1
            base, cap = self._backoff
            await asyncio.sleep(max(delay, random.uniform(0, min(cap, base * 2**attempt))))

    async def _send(self, item: Queued) -> float | None:
        """Send one snapshot; return None to go on at once, else the least wait before retrying."""
        headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
        token = self._token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            status, text, retry_after = await asyncio.to_thread(self._post, item.body, headers)
        except (OSError, http.client.HTTPException) as exc:
            self._failed(None, f"{type(exc).__name__}: {exc}")
            return 0.0
        if status in (200, 202, 204):
            self.backlog.pop()
            self.stats.accepted += 1
            self.stats.last_error = None
            return None
        if status in (400, 413):
            log.error(
                "collector refused snapshot %d for good (HTTP %d): %s", item.sequence, status, text
            )
            self.backlog.pop()
            self.stats.refused += 1
            return None
        self._failed(status, text)
        return float(retry_after) if retry_after.isdigit() else 0.0

    def _post(self, body: bytes, headers: dict[str, str]) -> tuple[int, str, str]:
        """One POST on a fresh connection; return the status, a bit of the text, Retry-After."""
        connection: http.client.HTTPConnection
        if self._url.scheme == "https":
            connection = http.client.HTTPSConnection(
                self._url.netloc, timeout=self._timeout, context=self.ssl_context or _tls
            )
        else:
            connection = http.client.HTTPConnection(self._url.netloc, timeout=self._timeout)
        if self.address is not None:
            # http.client connects through this attribute, and takes the Host header
            # and the TLS server name from the host it was given: pinning the address
            # here keeps both. Its own name for the hook, not in typeshed.
            address = self.address
            connection._create_connection = lambda where, *rest: socket.create_connection(  # type: ignore[attr-defined]
                (address, where[1]), *rest
            )
        try:
            connection.request("POST", self._url.path, body, headers)
            response = connection.getresponse()
            text = response.read(300).decode(errors="replace")
            return response.status, text, response.getheader("Retry-After") or ""
        finally:
            connection.close()

    def _failed(self, status: int | None, message: str) -> None:
        if self.stats.last_error is None:
            log.warning("push failed (%s): %s; keeping a backlog", status or "no answer", message)
        self.stats.failed += 1
        self.stats.last_error = message or f"HTTP {status}"


def token_reader(path: str | None) -> Callable[[], str | None]:
    """Read the projected token at every push: the kubelet rotates it in place."""

    def read() -> str | None:
        if path is None:
            return None
        try:
            with open(path) as f:
                return f.read().strip() or None
        except OSError as exc:
            log.warning("cannot read token file %s: %s", path, exc)
            return None

    return read
