"""Test helpers: run the real collector app in-process on loopback."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import cast

from aiohttp import web

from collector.app import build_app
from collector.settings import CollectorSettings
from collector.sources.pods import PodDirectory


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago on ``host``."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


@asynccontextmanager
async def running_collector(**overrides: object) -> AsyncIterator[tuple[str, web.Application]]:
    """Start the collector with settings ``overrides`` on a loopback port; yield its URL and app.

    ``pods=`` (a PodDirectory) attributes pushed regions without Kubernetes.
    """
    pods = cast(PodDirectory | None, overrides.pop("pods", None))
    port = free_port()
    settings = CollectorSettings(listen=f"127.0.0.1:{port}", **overrides)  # type: ignore[arg-type]
    app = build_app(settings, pods)
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        await runner.cleanup()


async def eventually(
    check: Callable[[], Awaitable[bool]], timeout: float = 10.0, what: str = ""
) -> None:
    """Poll ``check`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")
        await asyncio.sleep(0.05)
