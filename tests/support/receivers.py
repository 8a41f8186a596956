"""Remote-write receivers for tests: a real VictoriaMetrics, a real Prometheus, and a
small recording receiver and outage switch of our own on loopback."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import cramjam
import pytest
from aiohttp import ClientSession, web
from helpers import real_prometheus, reserved_port

from testing.processes import stop

VICTORIA = Path(__file__).resolve().parents[2] / ".tools" / "victoria-metrics" / "usr" / "bin"
START_TIMEOUT = 30.0


@contextmanager
def prometheus_receiver(work: Path) -> Iterator[str]:
    """A real Prometheus accepting remote write (no scrape jobs); yields its base URL."""
    config = {"global": {"scrape_interval": "15s"}}
    with real_prometheus(work, config, args=["--web.enable-remote-write-receiver"]) as url:
        yield url


@contextmanager
def victoria_metrics(work: Path) -> Iterator[str]:
    """A real single-node VictoriaMetrics on a loopback port, ready; stopped at the end.

    It logs the address it was given, not the one it got, so the port is reserved
    (helpers.reserved_port) and handed to it. Query results are not cached and the
    newest samples are not held back, so a query sees what was just written.
    """
    binary = VICTORIA / "victoria-metrics"
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run `make tools`")
    with reserved_port() as port, (work / "victoria.log").open("wb") as log:
        url = f"http://127.0.0.1:{port}"
        process = subprocess.Popen(
            [
                binary,
                f"-httpListenAddr=127.0.0.1:{port}",
                f"-storageDataPath={work / 'victoria'}",
                "-search.latencyOffset=0s",
                "-search.disableCache",
                "-retentionPeriod=100y",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_healthy(process, url, work / "victoria.log")
            yield url
        finally:
            stop(process)


def _wait_healthy(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"victoria-metrics did not start: {log.read_text(errors='replace')}")
        time.sleep(0.1)  # a bounded poll; this helper is synchronous


class Recorder:
    """A receiver that keeps every body (decompressed) and answers ``statuses`` in turn, then ``then``."""

    def __init__(self, *statuses: int, then: int = 204) -> None:
        self.statuses = list(statuses)
        self.then = then
        self.bodies: list[bytes] = []
        self.answered: list[int] = []

    async def handle(self, request: web.Request) -> web.Response:
        body = bytes(cramjam.snappy.decompress_raw(await request.read()))
        status = self.statuses.pop(0) if self.statuses else self.then
        self.answered.append(status)
        if status < 300:
            self.bodies.append(body)
        return web.Response(status=status, text="" if status < 300 else f"refused ({status})")


class Switch:
    """A forwarding proxy on a reserved loopback port that can be taken down and up.

    While down nothing listens: connections are refused, as for a receiver that
    is restarting.
    """

    def __init__(self, port: int, target: str) -> None:
        self.url = f"http://127.0.0.1:{port}/api/v1/write"
        self._port = port
        self._target = target
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None

    async def up(self) -> None:
        app = web.Application()
        app.router.add_post("/api/v1/write", self._forward)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self._port, reuse_address=True).start()

    async def down(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _forward(self, request: web.Request) -> web.Response:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() != "host"}
        async with self._session.post(
            self._target, data=await request.read(), headers=headers
        ) as resp:
            return web.Response(status=resp.status, body=await resp.read())

    @classmethod
    @asynccontextmanager
    async def forwarding(cls, target: str) -> AsyncIterator[Switch]:
        with reserved_port() as port:
            switch = cls(port, target)
            async with ClientSession() as session:
                switch._session = session
                await switch.up()
                try:
                    yield switch
                finally:
                    await switch.down()
