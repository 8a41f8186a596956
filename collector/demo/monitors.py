"""Serve simulated node monitors over real HTTP on loopback, with injectable faults.

:class:`MonitorFarm` gives every :class:`~collector.demo.node.SimulatedNode`
its own loopback address (``127.1.0.1``, ``127.1.0.2``, …) and serves its
exposition on ``/metrics`` exactly as the real monitor would (promhttp's
Content-Type, gzip when the client accepts it). Faults can be switched on per
node to exercise a scraper: errors, stalls, drips, oversized bodies, a gzip
bomb, broken or awkward text. Every wait is bounded and :meth:`MonitorFarm.stop`
leaves no task behind.
"""

from __future__ import annotations

import asyncio
import gzip
import math
import socket
import struct
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType

from aiohttp import web

from collector.demo.node import SimulatedNode
from core.content import TEXT_CONTENT_TYPE

__all__ = [
    "FAULTS",
    "MAX_STALL_S",
    "GzipBomb",
    "MonitorFarm",
    "build_gzip_bomb",
    "crc32_combine",
    "loopback_address",
]

FAULTS: tuple[str, ...] = (
    "flaky",
    "500",
    "html",
    "malformed",
    "timeout",
    "drip",
    "oversized",
    "gzip_bomb",
    "weird_labels",
)
"""Faults :meth:`MonitorFarm.set_fault` accepts.

``flaky``        every 3rd request (counted from set_fault) answers 500, every
                 5th stalls for ``stall_s`` before answering normally
``500``          every request answers 500
``html``         200 with an HTML error page (``text/html``)
``malformed``    a valid body with one broken line in the middle
``timeout``      stalls for ``stall_s`` (at most 60 s), then answers normally
``drip``         sends the body one byte per ``drip_interval_s`` (for at most
                 ``drip_max_s``, then the rest at once)
``oversized``    an endless-looking stream of valid lines, ``oversized_bytes`` long,
                 generated chunk by chunk
``gzip_bomb``    ``Content-Encoding: gzip`` whose payload expands to
                 ``bomb_bytes`` (> 1 GiB by default) of valid-looking lines
``weird_labels`` valid body whose namespace/pod/container values hold quotes,
                 backslashes, newlines, braces, commas, '=' and UTF-8
"""

MAX_STALL_S = 60.0
"""Upper bound of every deliberate stall."""

MIB = 1 << 20
GIB = 1 << 30

_HTML_PAGE = (
    b"<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\n"
    b"<body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body>\n"
    b"</html>\n"
)
_BROKEN_LINE = b'hami_vgpu_memory_used_bytes{namespace="team-a",pod="broken" 12 oops'
_FILLER_FAMILY = "hami_vgpu_memory_used_bytes"
_FILLER_HEAD = (
    f"# HELP {_FILLER_FAMILY} vGPU device memory usage in bytes\n# TYPE {_FILLER_FAMILY} gauge\n"
).encode()


def _filler_line(pod: str) -> bytes:
    return (
        f'{_FILLER_FAMILY}{{container="cuda",device_uuid="GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec",'
        f'namespace="filler",pod="{pod}",vdevice_index="0",zone="vGPU"}} 2.097152e+10\n'
    ).encode()


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


# --------------------------------------------------------------------------
# A gzip bomb, built in bounded time and memory
# --------------------------------------------------------------------------


def _gf2_times(matrix: Sequence[int], vector: int) -> int:
    total = 0
    row = 0
    while vector:
        if vector & 1:
            total ^= matrix[row]
        vector >>= 1
        row += 1
    return total


def _gf2_square(matrix: Sequence[int]) -> list[int]:
    return [_gf2_times(matrix, matrix[row]) for row in range(32)]


def crc32_combine(crc1: int, crc2: int, length2: int) -> int:
    """CRC-32 of ``A + B`` from ``crc32(A)``, ``crc32(B)`` and ``len(B)`` (zlib's algorithm)."""
    if length2 <= 0:
        return crc1
    odd = [0xEDB88320] + [1 << bit for bit in range(31)]  # one zero bit
    even = _gf2_square(odd)  # two zero bits
    odd = _gf2_square(even)  # four zero bits
    while True:
        even = _gf2_square(odd)
        if length2 & 1:
            crc1 = _gf2_times(even, crc1)
        length2 >>= 1
        if not length2:
            break
        odd = _gf2_square(even)
        if length2 & 1:
            crc1 = _gf2_times(odd, crc1)
        length2 >>= 1
        if not length2:
            break
    return crc1 ^ crc2


def _crc32_repeated(chunk_crc: int, chunk_length: int, times: int) -> int:
    """CRC-32 of a chunk repeated ``times`` times, by doubling."""
    result = 0
    power_crc, power_length = chunk_crc, chunk_length
    while times:
        if times & 1:
            result = crc32_combine(result, power_crc, power_length)
        times >>= 1
        if times:
            power_crc = crc32_combine(power_crc, power_crc, power_length)
            power_length *= 2
    return result


def _independent_deflate(data: bytes) -> bytes:
    """Raw deflate blocks for ``data`` that reference nothing outside themselves.

    A fresh compressor has no history, and the full flush ends byte-aligned
    without a final block, so copies of the result can be concatenated.
    """
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    return compressor.compress(data) + compressor.flush(zlib.Z_FULL_FLUSH)


@dataclass(frozen=True, slots=True)
class GzipBomb:
    """A gzip member and the size it expands to."""

    body: bytes
    expanded_size: int


def build_gzip_bomb(expanded_bytes: int, chunk_bytes: int = MIB) -> GzipBomb:
    """A valid gzip member expanding to at least ``expanded_bytes`` of exposition lines.

    One chunk of lines is deflated once and its blocks repeated; the CRC of the
    whole is combined arithmetically, so building a 1 GiB bomb takes
    milliseconds and about 1 MiB.
    """
    line = _filler_line("bomb-000000")
    chunk = line * max(1, chunk_bytes // len(line))
    repeats = max(1, math.ceil(max(expanded_bytes - len(_FILLER_HEAD), 1) / len(chunk)))
    expanded = len(_FILLER_HEAD) + repeats * len(chunk)
    crc = crc32_combine(
        zlib.crc32(_FILLER_HEAD),
        _crc32_repeated(zlib.crc32(chunk), len(chunk), repeats),
        repeats * len(chunk),
    )
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"  # deflate, no flags, mtime 0
    final_block = b"\x03\x00"  # an empty final block with fixed Huffman codes
    trailer = struct.pack("<II", crc, expanded & 0xFFFFFFFF)
    body = b"".join(
        (
            header,
            _independent_deflate(_FILLER_HEAD),
            _independent_deflate(chunk) * repeats,
            final_block,
            trailer,
        )
    )
    return GzipBomb(body=body, expanded_size=expanded)


# --------------------------------------------------------------------------
# The farm
# --------------------------------------------------------------------------


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
                body=_HTML_PAGE, headers={"Content-Type": "text/html; charset=utf-8"}
            )
        if fault == "gzip_bomb":
            if self._bomb is None:
                self._bomb = build_gzip_bomb(self._bomb_bytes)
            headers = {"Content-Type": TEXT_CONTENT_TYPE, "Content-Encoding": "gzip"}
            return web.Response(body=self._bomb.body, headers=headers)
        if fault == "oversized":
            return await self._stream_oversized(request)
        rendered = self._render(node)
        if fault == "malformed":
            lines = rendered.plain.split(b"\n")
            lines.insert(len(lines) // 2, _BROKEN_LINE)
            return self._respond(request, _Rendered(rendered.key, b"\n".join(lines)))
        if fault == "drip":
            return await self._drip(request, rendered.plain)
        return self._respond(request, rendered)

    def _respond(self, request: web.Request, rendered: _Rendered) -> web.Response:
        if _accepts_gzip(request):
            headers = {"Content-Type": TEXT_CONTENT_TYPE, "Content-Encoding": "gzip"}
            return web.Response(body=rendered.gzipped(), headers=headers)
        return web.Response(body=rendered.plain, headers={"Content-Type": TEXT_CONTENT_TYPE})

    async def _drip(self, request: web.Request, body: bytes) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": TEXT_CONTENT_TYPE})
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._drip_max_s
        try:
            sent = 0
            while sent < len(body) and loop.time() < deadline:
                await response.write(body[sent : sent + 1])
                sent += 1
                await asyncio.sleep(self._drip_interval_s)
            if sent < len(body):
                await response.write(body[sent:])
            await response.write_eof()
        except ConnectionError:
            pass  # the client gave up
        return response

    async def _stream_oversized(self, request: web.Request) -> web.StreamResponse:
        if self._filler is None:
            self._filler = b"".join(_filler_line(f"filler-{i:06d}") for i in range(400))
        filler = self._filler
        response = web.StreamResponse(headers={"Content-Type": TEXT_CONTENT_TYPE})
        await response.prepare(request)
        try:
            async with asyncio.timeout(self._send_limit_s):
                await response.write(_FILLER_HEAD)
                written = len(_FILLER_HEAD)
                while written < self._oversized_bytes:
                    await response.write(filler)  # waits for the client: memory stays bounded
                    written += len(filler)
                await response.write_eof()
        except ConnectionError:
            pass  # the client gave up
        except TimeoutError:
            # A client that neither reads nor hangs up: drop the connection.
            if request.transport is not None:
                request.transport.abort()
        return response
