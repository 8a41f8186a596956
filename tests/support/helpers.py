"""Test helpers: run the real collector app in-process on loopback, our programs and a real
Prometheus beside it, and wait for conditions.

No helper picks a port that "was free a moment ago": servers bind port 0 and the port
they got is read back (from aiohttp, or from the log line a program writes).
"""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
import yaml
from aiohttp import web

from collector.app import build_app
from collector.normalise import labelsets, schema
from collector.normalise.batch import Batch, Source
from collector.normalise.schema import SourceKind
from collector.settings import CollectorSettings
from collector.sources.nodes import NodeDirectory
from collector.sources.pods import PodDirectory
from collector.store.latest import Store
from simulator.monitors import MonitorFarm
from simulator.run import demo_app, write_targets
from testing.processes import bind_one_port, stop

RESERVE_TRIES = 5
"""Fresh ports tried before :func:`reserved_port` gives up finding one free on every host."""


@contextmanager
def reserved_port(*hosts: str) -> Iterator[int]:
    """Hold one port on ``hosts`` (default 127.0.0.1) for the block; yield it.

    For a server that must stop and start again at the same address. Each host's
    socket is bound with SO_REUSEADDR and never listens: on Linux a server that sets
    SO_REUSEADDR too (aiohttp, socketserver, the collector, Go) may bind and listen on
    the port meanwhile, and connections are refused while it is down, but no other bind
    takes the port and bind(0) never hands it out.
    """
    port, held = _reserve(hosts or ("127.0.0.1",))
    try:
        yield port
    finally:
        for sock in held:
            sock.close()


def _reserve(hosts: tuple[str, ...]) -> tuple[int, list[socket.socket]]:
    held = bind_one_port(hosts, RESERVE_TRIES)
    if held is None:
        raise AssertionError(f"no port free on all of {hosts} in {RESERVE_TRIES} tries")
    return held[0].getsockname()[1], held


@asynccontextmanager
async def serving(
    app: web.Application, ssl_context: ssl.SSLContext | None = None, port: int = 0
) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1 (``port``, or one the kernel picks), over TLS with
    ``ssl_context``, for the block; yield its URL."""
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", port, ssl_context=ssl_context, reuse_address=True)
        await site.start()
        host, bound = runner.addresses[0][:2]
        yield f"{'https' if ssl_context else 'http'}://{host}:{bound}"
    finally:
        await runner.cleanup()


@asynccontextmanager
async def running_demo(
    folder: Path, nodes: int, interval: float
) -> AsyncIterator[tuple[str, list[str]]]:
    """The demo (``hami-collector demo``) served on a reserved loopback port, which its agents
    push to; yield its base URL and the lines it tells its user."""
    with reserved_port() as port:
        app, lines = demo_app(f"127.0.0.1:{port}", nodes, interval, folder)
        async with serving(app, port=port) as url:
            yield url, lines


@asynccontextmanager
async def running_collector(**overrides: object) -> AsyncIterator[tuple[str, web.Application]]:
    """Start the collector with settings ``overrides`` on a loopback port; yield its URL and app.

    ``pods=`` (a PodDirectory) attributes pushed regions and ``registrations=`` (a
    NodeDirectory) registers cards without Kubernetes.
    """
    pods = cast(PodDirectory | None, overrides.pop("pods", None))
    nodes = cast(NodeDirectory | None, overrides.pop("registrations", None))
    settings = CollectorSettings(listen="127.0.0.1:0", **overrides)  # type: ignore[arg-type]
    app = build_app(settings, pods, registrations=nodes)
    async with serving(app) as url:
        yield url, app


@asynccontextmanager
async def scraping_collector(
    farm: MonitorFarm, folder: Path, **overrides: object
) -> AsyncIterator[tuple[str, web.Application]]:
    """The collector scraping ``farm`` through a targets file in ``folder``, without Kubernetes."""
    targets = folder / "targets.json"
    write_targets(targets, farm)
    async with running_collector(kubernetes=False, targets_file=targets, **overrides) as running:
        yield running


async def eventually(
    check: Callable[[], Awaitable[bool]], timeout: float = 10.0, what: str = ""
) -> None:
    """Poll ``check`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")
        await asyncio.sleep(0.05)


async def until_ready(base: str, timeout: float = 60.0) -> None:
    """Wait until the collector at ``base`` answers ``/readyz`` with 200 (its query engine
    compiles its loops first: ~0.5 s from the compile cache, 10-15 s without)."""
    async with aiohttp.ClientSession() as http:

        async def ready() -> bool:
            async with http.get(base + "/readyz") as resp:
                return resp.status == 200

        await eventually(ready, timeout, f"{base}/readyz to answer 200")


async def holds(value: bool) -> bool:
    """``value``, awaitable: for :func:`eventually` on a plain condition (``lambda: holds(x)``)."""
    return value


_LISTENING = re.compile(r"listening on (http://[^\s\"]+)")


class Program:
    """One of our programs (``python -m MODULE ARGS``) in a child process, its stderr kept.

    A reader thread keeps the pipe drained (the program never blocks on its log) and
    notes the first ``listening on URL`` line: the address the program really got.
    """

    def __init__(self, *args: str, env: Mapping[str, str] | None = None) -> None:
        self.args = args
        self.process = subprocess.Popen(
            [sys.executable, "-m", *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._url: str | None = None
        self._said = threading.Event()
        self._reader = threading.Thread(target=self._read, name=f"{args[0]} stderr", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            found = _LISTENING.search(line)
            if found and self._url is None:
                self._url = found.group(1)
                self._said.set()
        self._said.set()  # it exited without saying where: url() fails at once
        self.process.stderr.close()

    @property
    def stderr(self) -> str:
        """What the program has written to stderr so far."""
        return "".join(self.lines)

    async def url(self, timeout: float = 30.0) -> str:
        """The URL the program says it listens on; fail if it exits or stays silent first."""
        await asyncio.to_thread(self._said.wait, timeout)
        if self._url is None:
            raise AssertionError(
                f"{' '.join(self.args)} did not say where it listens:\n{self.stderr}"
            )
        return self._url

    def stop(self) -> int:
        """SIGTERM (SIGKILL after 15 s); return the exit status once stderr is read to its end."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self._reader.join(5)
        return self.process.returncode


@contextmanager
def program(*args: str, env: Mapping[str, str] | None = None) -> Iterator[Program]:
    """Run :class:`Program` ``args`` for the block; it is stopped at the end."""
    running = Program(*args, env=env)
    try:
        yield running
    finally:
        running.stop()


TOOLS = Path(__file__).resolve().parents[2] / ".tools" / "prometheus" / "usr" / "bin"


def prometheus_tool(name: str) -> Path:
    """Debian's ``prometheus`` or ``promtool``, fetched into .tools by ``make tools``."""
    path = TOOLS / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make tools` (make test does it)")
    return path


_PROMETHEUS_LISTENING = re.compile(r'msg="Listening on" address=(\S+)')
PROMETHEUS_START_TIMEOUT = 30.0


@contextmanager
def real_prometheus(
    work: Path, config: Mapping[str, Any], tsdb: Path | None = None, args: Sequence[str] = ()
) -> Iterator[str]:
    """A real Prometheus on a loopback port with ``config``, ready; stopped at the end.

    It binds port 0 and logs the address it got, which is read from its log.
    ``args`` are more flags (``--web.enable-remote-write-receiver``).
    """
    (work / "prometheus.yml").write_text(yaml.safe_dump(dict(config)))
    log_path = work / "prometheus.log"
    log = log_path.open("wb")
    process = subprocess.Popen(
        [
            prometheus_tool("prometheus"),
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={tsdb or work / 'tsdb'}",
            "--web.listen-address=127.0.0.1:0",
            "--storage.tsdb.retention.time=100y",
            *args,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield _wait_ready(process, log_path)
    finally:
        stop(process)
        log.close()


def _wait_ready(process: subprocess.Popen[bytes], log_path: Path) -> str:
    """Poll the log for the address, then ``/-/ready``; fail if it exits or takes too long."""
    deadline = time.monotonic() + PROMETHEUS_START_TIMEOUT
    while True:
        found = _PROMETHEUS_LISTENING.search(log_path.read_text(errors="replace"))
        url = f"http://{found.group(1)}" if found else None
        if url is not None and _ready(url):
            return url
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"prometheus did not start: {log_path.read_text(errors='replace')}")
        time.sleep(0.1)  # a bounded poll, as in eventually(): this helper is synchronous


def _ready(url: str) -> bool:
    return _answers(f"{url}/-/ready")


VICTORIA_TOOLS = Path(__file__).resolve().parents[2] / ".tools" / "victoria-metrics" / "usr" / "bin"
VMALERT_START_TIMEOUT = 30.0


@contextmanager
def real_vmalert(
    work: Path,
    rules: Path,
    datasource: str,
    notifier: str,
    interval: str = "1s",
    args: Sequence[str] = (),
) -> Iterator[str]:
    """A real vmalert (VictoriaMetrics 1.79) evaluating ``rules`` against ``datasource``.

    It listens on a loopback port held by :func:`reserved_port` (vmalert logs the
    address it was given, not the one it got), sends its alerts to ``notifier``
    (an Alertmanager-compatible URL) and is stopped at the end. Yields its URL.
    ``args`` are more flags (``-datasource.bearerTokenFile=...``, ``-datasource.tlsCAFile=...``).
    """
    binary = VICTORIA_TOOLS / "vmalert"
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run `make tools` (make test does it)")
    log_path = work / "vmalert.log"
    with reserved_port() as port, log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                binary,
                f"-rule={rules}",
                f"-datasource.url={datasource}",
                f"-notifier.url={notifier}",
                f"-httpListenAddr=127.0.0.1:{port}",
                f"-evaluationInterval={interval}",
                *args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + VMALERT_START_TIMEOUT
            while not _answers(f"{url}/health"):
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"vmalert did not start: {log_path.read_text(errors='replace')}")
                time.sleep(0.1)  # a bounded poll, as in _wait_ready()
            yield url
        finally:
            stop(process)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


GIB = float(1 << 30)


def pod_batch(node: str) -> Batch:
    """A card and one container vGPU of pod ns-a/p on ``node``."""
    uuid = f"GPU-{node}"
    card = labelsets.card(0, "NVIDIA A100", uuid)
    vgpu = labelsets.vgpu("ns-a", "p", "main", 0, uuid)
    series = {
        labelsets.key("hami_host_gpu_memory_used_bytes", card): 2 * GIB,
        labelsets.key("hami_host_gpu_memory_total_bytes", card): 80 * GIB,
        labelsets.key("hami_host_gpu_utilization_ratio", card): 40.0,
        labelsets.key(schema.VGPU_MEMORY_USED, vgpu): GIB,
        labelsets.key(schema.VGPU_UTILIZATION, vgpu): 20.0,
        labelsets.key(schema.MEMORY_ALLOCATED, vgpu): 4 * GIB,
        labelsets.key(schema.CORE_ALLOCATED, vgpu): 0.25,
        labelsets.key(schema.IDLE, vgpu): 0.0,
    }
    return Batch(series, samples=len(series))


def pod_history(store: Store, node: str = "n1", points: int = 40) -> None:
    """``points`` seconds of :func:`pod_batch` on ``node`` in ``store``, the last one now."""
    source = Source(f"agent/{node}", "agent", node, SourceKind.AGENT, 0)
    now = time.time()
    for k in range(points):
        store.put(source, pod_batch(node), time.monotonic(), now - points + 1 + k)
