"""Serve simulated node monitors over real HTTP on loopback, with injectable faults.

:class:`MonitorFarm` gives every :class:`~simulator.node.SimulatedNode`
its own loopback address (``127.1.0.1``, ``127.1.0.2``, …) and serves its
exposition on ``/metrics`` exactly as the real monitor would (promhttp's
Content-Type, gzip when the client accepts it). Faults can be switched on per
node to exercise a scraper (:data:`~simulator.faults.FAULTS`): errors,
stalls, drips, oversized bodies, a gzip bomb, broken or awkward text. Every
wait is bounded and :meth:`MonitorFarm.stop` leaves no task behind.
"""

from __future__ import annotations

import asyncio
import gzip
import math
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType

from aiohttp import web

from core.content import TEXT_CONTENT_TYPE
from simulator.faults import (
    FAULTS,
    HTML_PAGE,
    MAX_STALL_S,
    drip,
    filler_line,
    stream_oversized,
    with_broken_line,
)
from simulator.gzipbomb import GzipBomb, build_gzip_bomb
from simulator.node import SimulatedNode

MIB = 1 << 20
GIB = 1 << 30


def loopback_address(position: int) -> str:
    """The loopback address of the node at ``position``: 127.1.0.1, 127.1.0.2, …

    The last octet runs 1..254 (never 0 or 255), then the third octet moves on.
    """
    if position < 0:
        raise ValueError("position must not be negative")
    block, offset = divmod(position, 254)
    second = 1 + block // 256
    if second > 254:
        raise ValueError(f"no loopback address left for position {position}")
    return f"127.{second}.{block % 256}.{offset + 1}"


@dataclass(slots=True)
class _Rendered:
    key: tuple[int, int]
    plain: bytes
    _gzipped: bytes | None = field(default=None)

    def gzipped(self) -> bytes:
        if self._gzipped is None:
            self._gzipped = gzip.compress(self.plain, compresslevel=1, mtime=0)
        return self._gzipped


def _accepts_gzip(request: web.BaseRequest) -> bool:
    for part in request.headers.get("Accept-Encoding", "").split(","):
        coding, _, params = part.partition(";")
        if coding.strip().lower() != "gzip":
            continue
        quality = 1.0
        for param in params.split(";"):
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        return quality > 0
    return False


class MonitorFarm:
    """Serve each node's monitor on its own loopback address (async context manager).

    ``port=0`` (default) gives each address an ephemeral port; a fixed port
    (e.g. 9394) binds every address on that port. ``hosts`` replaces the
    default addresses from :func:`loopback_address`. ``clock`` supplies the time
    passed to ``node.step`` before each rendering (default :func:`time.time`).
    """

    def __init__(
        self,
        nodes: Sequence[SimulatedNode],
        *,
        port: int = 0,
        hosts: Sequence[str] | None = None,
        stall_s: float = 30.0,
        drip_interval_s: float = 0.5,
        drip_max_s: float = MAX_STALL_S,
        oversized_bytes: int = 48 * MIB,
        bomb_bytes: int = GIB + 64 * MIB,
        clock: Callable[[], float] = time.time,
    ) -> None:
        names = [node.name for node in nodes]
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique")
        if hosts is not None and len(hosts) != len(nodes):
            raise ValueError("hosts must name one address per node")
        for host in hosts or ():
            if not host.startswith("127."):
                raise ValueError(f"{host} is not a loopback address")
        self._nodes: dict[str, SimulatedNode] = {node.name: node for node in nodes}
        self._hosts: dict[str, str] = {
            node.name: (hosts[i] if hosts is not None else loopback_address(i))
            for i, node in enumerate(nodes)
        }
        self._port = port
        self._stall_s = min(max(stall_s, 0.0), MAX_STALL_S)
        self._drip_interval_s = min(max(drip_interval_s, 0.0), MAX_STALL_S)
        self._drip_max_s = min(max(drip_max_s, 0.0), MAX_STALL_S)
        self._oversized_bytes = oversized_bytes
        self._bomb_bytes = bomb_bytes
        self._clock = clock
        self._send_limit_s = MAX_STALL_S
        """How long one streamed body (oversized) may take before the connection is dropped."""
        self._runner: web.AppRunner | None = None
        self._addresses: dict[str, str] = {}
        self._by_socket: dict[tuple[str, int], SimulatedNode] = {}
        self._requests: dict[str, int] = dict.fromkeys(self._nodes, 0)
        self._faults: dict[str, str] = {}
        self._fault_requests: dict[str, int] = dict.fromkeys(self._nodes, 0)
        self._rendered: dict[str, _Rendered] = {}
        self._inflight: set[asyncio.Task[object]] = set()
        self._bomb: GzipBomb | None = None
        self._filler: bytes | None = None

    # -- lifecycle --------------------------------------------------------------

    async def __aenter__(self) -> MonitorFarm:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Bind every node's address and start serving."""
        if self._runner is not None:
            raise RuntimeError("MonitorFarm already started")
        app = web.Application()
        app.router.add_get("/metrics", self._handle_metrics)
        runner = web.AppRunner(
            app,
            handle_signals=False,
            access_log=None,
            shutdown_timeout=1.0,
            handler_cancellation=True,
        )
        await runner.setup()
        self._runner = runner
        try:
            for name, host in self._hosts.items():
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    sock.bind((host, self._port))
                except OSError:
                    sock.close()
                    raise
                site = web.SockSite(runner, sock)
                await site.start()
                bound_host, bound_port = sock.getsockname()[:2]
                self._by_socket[(bound_host, bound_port)] = self._nodes[name]
                self._addresses[name] = f"{bound_host}:{bound_port}"
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop serving: cancel requests in flight, close every socket and connection."""
        runner = self._runner
        if runner is None:
            return
        self._runner = None
        pending = [task for task in self._inflight if not task.done()]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5.0)
        await runner.cleanup()
        self._addresses.clear()
        self._by_socket.clear()
        self._inflight.clear()

    # -- queries and controls ------------------------------------------------------

    def address(self, node_name: str) -> str:
        """``host:port`` of the node's monitor (after :meth:`start`)."""
        try:
            return self._addresses[node_name]
        except KeyError:
            raise KeyError(f"no monitor is serving node {node_name!r}") from None

    def url(self, node_name: str) -> str:
        """``http://host:port/metrics`` of the node's monitor."""
        return f"http://{self.address(node_name)}/metrics"

    def targets(self) -> list[tuple[str, str, str]]:
        """``(node name, flavour, "host:port")`` for every node, in the given order."""
        return [
            (name, node.flavour, self.address(name))
            for name, node in self._nodes.items()
            if name in self._addresses
        ]

    def node(self, node_name: str) -> SimulatedNode:
        """The simulated node served under ``node_name``."""
        return self._nodes[node_name]

    def request_count(self, node_name: str) -> int:
        """How many ``/metrics`` requests the node's monitor has received."""
        return self._requests[node_name]

    def set_fault(self, node_name: str, fault: str | None) -> None:
        """Make the node's monitor misbehave as ``fault`` (see :data:`FAULTS`); None heals it.

        The request counter that ``flaky`` uses restarts at every call.
        """
        node = self._nodes[node_name]
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; expected one of {FAULTS}")
        if fault is None:
            self._faults.pop(node_name, None)
        else:
            self._faults[node_name] = fault
        self._fault_requests[node_name] = 0
        node.weird_labels = fault == "weird_labels"

    def fault(self, node_name: str) -> str | None:
        """The fault currently set on the node, if any."""
        return self._faults.get(node_name)

    # -- serving ------------------------------------------------------------------

    def _node_for(self, request: web.Request) -> SimulatedNode | None:
        transport = request.transport
        if transport is None:
            return None
        sockname = transport.get_extra_info("sockname")
        if not sockname:
            return None
        return self._by_socket.get((sockname[0], sockname[1]))

    async def _handle_metrics(self, request: web.Request) -> web.StreamResponse:
        node = self._node_for(request)
        if node is None:
            raise web.HTTPNotFound()
        task = asyncio.current_task()
        if task is not None:
            self._inflight.add(task)
        try:
            self._requests[node.name] += 1
            self._fault_requests[node.name] += 1
            return await self._serve(request, node, self._fault_requests[node.name])
        finally:
            if task is not None:
                self._inflight.discard(task)

    def _render(self, node: SimulatedNode) -> _Rendered:
        now = self._clock()
        node.step(now)
        key = (node.revision, math.floor(now))
        rendered = self._rendered.get(node.name)
        if rendered is None or rendered.key != key:
            rendered = _Rendered(key, node.exposition(now))
            self._rendered[node.name] = rendered
        return rendered

    async def _serve(
        self, request: web.Request, node: SimulatedNode, count: int
    ) -> web.StreamResponse:
        fault = self._faults.get(node.name)
        if fault == "500" or (fault == "flaky" and count % 3 == 0):
            return web.Response(status=500, text="An error has occurred while serving metrics\n")
        if fault == "timeout" or (fault == "flaky" and count % 5 == 0):
            await asyncio.sleep(self._stall_s)
        if fault == "html":
            return web.Response(
                body=HTML_PAGE, headers={"Content-Type": "text/html; charset=utf-8"}
            )
        if fault == "gzip_bomb":
            if self._bomb is None:
                self._bomb = build_gzip_bomb(self._bomb_bytes)
            headers = {"Content-Type": TEXT_CONTENT_TYPE, "Content-Encoding": "gzip"}
            return web.Response(body=self._bomb.body, headers=headers)
        if fault == "oversized":
            if self._filler is None:
                self._filler = b"".join(filler_line(f"filler-{i:06d}") for i in range(400))
            return await stream_oversized(
                request, self._filler, self._oversized_bytes, self._send_limit_s
            )
        rendered = self._render(node)
        if fault == "malformed":
            return self._respond(request, _Rendered(rendered.key, with_broken_line(rendered.plain)))
        if fault == "drip":
            return await drip(request, rendered.plain, self._drip_interval_s, self._drip_max_s)
        return self._respond(request, rendered)

    def _respond(self, request: web.Request, rendered: _Rendered) -> web.Response:
        if _accepts_gzip(request):
            headers = {"Content-Type": TEXT_CONTENT_TYPE, "Content-Encoding": "gzip"}
            return web.Response(body=rendered.gzipped(), headers=headers)
        return web.Response(body=rendered.plain, headers={"Content-Type": TEXT_CONTENT_TYPE})
