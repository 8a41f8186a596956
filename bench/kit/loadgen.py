"""A bounded HTTP load generator, run in its own process by :mod:`bench.foundation.serve`.

``python -m bench.kit.loadgen HOST PORT PATH CONNECTIONS SECONDS`` keeps CONNECTIONS
keep-alive HTTP/1.1 requests in flight (``Accept-Encoding: gzip``) for SECONDS
and prints one JSON object: requests completed, bytes read, req/s, median
latency and the CPU seconds this process used (to tell whether the client, not
the server, was the limit). It is a minimal client, written to cost as little
CPU as possible on a 2-core machine it shares with the server: each connection
reads into one reused buffer (``asyncio.BufferedProtocol``) and only counts the
body's bytes against its Content-Length; it does not decompress or keep bodies.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from typing import Any

_BUFFER = 1 << 20


class _Connection(asyncio.BufferedProtocol):
    """One keep-alive connection sending the same GET again as soon as a response ends."""

    def __init__(self, request: bytes, deadline: float, done: asyncio.Future[None]) -> None:
        self.request = request
        self.deadline = deadline
        self.done = done
        self.buffer = bytearray(_BUFFER)
        self.view = memoryview(self.buffer)
        self.head = b""
        self.remaining = -1  # -1: reading the head
        self.began = 0.0
        self.latencies: list[float] = []
        self.bytes = 0
        self.errors = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._send()

    def _send(self) -> None:
        assert self.transport is not None
        self.began = time.perf_counter()
        self.head = b""
        self.remaining = -1
        self.transport.write(self.request)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.view

    def buffer_updated(self, nbytes: int) -> None:
        data = self.view[:nbytes]
        if self.remaining < 0:
            self.head += bytes(data)
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            head, body = self.head[:end], self.head[end + 4 :]
            self.remaining = _content_length(head)
            if (
                not head.startswith(b"HTTP/1.1 200")
                or b"content-encoding: gzip" not in head.lower()
            ):
                self.errors += 1
            self.bytes += len(body)
            self.remaining -= len(body)
        else:
            self.bytes += nbytes
            self.remaining -= nbytes
        if self.remaining == 0:
            now = time.perf_counter()
            self.latencies.append(now - self.began)
            if now < self.deadline:
                self._send()
            else:
                assert self.transport is not None
                self.transport.close()
        elif self.remaining < 0 and self.head.find(b"\r\n\r\n") >= 0:
            self.errors += 1  # more bytes than announced: not what a server should send
            assert self.transport is not None
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    raise ValueError("response without Content-Length")


async def load(host: str, port: int, path: str, connections: int, seconds: float) -> dict[str, Any]:
    """Keep ``connections`` requests for ``path`` in flight for ``seconds``."""
    loop = asyncio.get_running_loop()
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept-Encoding: gzip\r\n\r\n".encode()
    )
    # warm: the first request builds the page
    warm_done: asyncio.Future[None] = loop.create_future()
    await loop.create_connection(lambda: _Connection(request, 0.0, warm_done), host, port)
    await asyncio.wait_for(warm_done, 60)
    cpu0 = time.process_time()
    start = time.perf_counter()
    deadline = start + seconds
    protocols: list[_Connection] = []
    waits: list[asyncio.Future[None]] = []
    for _ in range(connections):
        done: asyncio.Future[None] = loop.create_future()
        conn = _Connection(request, deadline, done)
        protocols.append(conn)
        waits.append(done)
        await loop.create_connection(lambda c=conn: c, host, port)  # type: ignore[misc]
    await asyncio.wait_for(asyncio.gather(*waits), seconds + 30)
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    latencies = [t for p in protocols for t in p.latencies]
    total = sum(p.bytes for p in protocols)
    return {
        "requests": len(latencies),
        "errors": sum(p.errors for p in protocols),
        "seconds": elapsed,
        "req_per_s": len(latencies) / elapsed,
        "mb_per_s": total / elapsed / 1e6,
        "body_bytes": total // max(1, len(latencies)),
        "latency_ms_median": statistics.median(latencies) * 1e3 if latencies else 0.0,
        "client_cpu_s": cpu,
    }


def main(argv: list[str]) -> None:
    """Parse ``HOST PORT PATH CONNECTIONS SECONDS`` and print the result as JSON."""
    cli = argparse.ArgumentParser(prog="python -m bench.kit.loadgen")
    for name, kind in (
        ("host", str),
        ("port", int),
        ("path", str),
        ("connections", int),
        ("seconds", float),
    ):
        cli.add_argument(name, type=kind)
    a = cli.parse_args(argv)
    print(json.dumps(load_sync(a.host, a.port, a.path, a.connections, a.seconds)))


def load_sync(host: str, port: int, path: str, connections: int, seconds: float) -> dict[str, Any]:
    """:func:`load` on a new event loop."""
    return asyncio.run(load(host, port, path, connections, seconds))


if __name__ == "__main__":
    main(sys.argv[1:])
