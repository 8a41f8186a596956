"""Test helpers: run the real collector app in-process on loopback."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
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


TOOLS = Path(__file__).resolve().parent.parent / ".tools" / "prometheus" / "usr" / "bin"


def prometheus_tool(name: str) -> Path:
    """Debian's ``prometheus`` or ``promtool``, fetched into .tools by ``make tools``."""
    path = TOOLS / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make tools` (make test does it)")
    return path


@contextmanager
def real_prometheus(
    work: Path, config: Mapping[str, Any], tsdb: Path | None = None
) -> Iterator[str]:
    """A real Prometheus on a loopback port with ``config``, ready; stopped at the end."""
    port = free_port()
    (work / "prometheus.yml").write_text(yaml.safe_dump(dict(config)))
    log = (work / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            prometheus_tool("prometheus"),
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={tsdb or work / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=100y",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while not _ready(url):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"prometheus did not start: {(work / 'prometheus.log').read_text()}")
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        log.close()


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False
