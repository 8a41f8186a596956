"""GET /metrics: the whole cluster as one scrape target.

Nothing is collected during a request. Each node's lines are rendered once per
change of that node and kept per family; a page is the families in name order,
each holding its nodes in name order. A page (and its gzip) is built at most
once per change of the store or of our own metrics, and concurrent scrapes
share that one build. Joining and compressing run in a worker thread; the
parts they read are immutable ``bytes`` taken on the event loop, so a page
never mixes two store generations.

The gzip page is a series of gzip members, one per part (RFC 1952 allows
several; Prometheus, Python and curl read them as one stream). A node's
member is compressed once per change of that node and kept beside its lines,
so one node's push recompresses that node's chunks, not the page.
"""

from __future__ import annotations

import asyncio
import itertools
import zlib
from collections.abc import Iterator, Mapping, Sequence

from aiohttp import web

from collector import schema
from collector.exposition.render import render_header, render_lines
from collector.selfmetrics import SelfMetrics
from collector.store import NodeView, Store
from core.content import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE

_Chunks = Mapping[str, bytes]

_LEVEL = 1
"""zlib level of every member: members are small, so a higher level saves little."""

_HEADER_MEMBERS_MAX = 4096
"""Most family headers whose gzip member is kept (family names come from targets)."""


def _name_of(item: tuple[bytes, float]) -> bytes:
    key = item[0]
    return key[: key.index(b"{")]


def render_node(view: NodeView, external: Sequence[tuple[str, str]] = ()) -> _Chunks:
    """Render one node's series as sample lines, grouped by family name."""
    items = sorted(view.series.items())
    return {
        name.decode(): render_lines(group, view.node, external)
        for name, group in itertools.groupby(items, key=_name_of)
    }


class _Rendered:
    """One node's lines per family, and their gzip members once asked for."""

    __slots__ = ("members", "plain")

    def __init__(self, plain: _Chunks) -> None:
        self.plain = plain
        self.members: dict[str, bytes] = {}

    def member(self, name: str) -> bytes:
        """The gzip member of family ``name``'s lines; compressed on first use.

        Called from worker threads: two builds may compress the same chunk
        at once, and both get equal bytes.
        """
        packed = self.members.get(name)
        if packed is None:
            packed = self.members[name] = _member(self.plain[name])
        return packed


_Part = bytes | tuple[_Rendered, str]
"""A page part: bytes of its own, or a node's chunk of one family."""


class MetricsPage:
    """Builds and caches the /metrics page in both formats, plain and gzipped."""

    def __init__(
        self, store: Store, metrics: SelfMetrics, external: Sequence[tuple[str, str]] = ()
    ) -> None:
        """``external`` labels are added to every cluster series (not to our own)."""
        self._store = store
        self._metrics = metrics
        self._external = tuple(external)
        self._nodes: dict[str, tuple[int, _Rendered]] = {}
        self._header_members: dict[bytes, bytes] = {}
        self._pages: dict[
            tuple[bool, bool], tuple[tuple[int, int], asyncio.Future[list[bytes]]]
        ] = {}

    async def body(self, openmetrics: bool, compressed: bool) -> list[bytes]:
        """Return the current page as parts; build it if the store or our metrics changed.

        The plain page is never joined into one buffer (at 1,000 nodes it is
        ~50 MB): its parts are written one after the other. The gzip page is
        compressed from the parts in a worker thread.
        """
        version = (self._store.generation, self._metrics.version)
        cached = self._pages.get((openmetrics, compressed))
        if cached is not None and cached[0] == version:
            return await asyncio.shield(cached[1])
        parts = self._parts(openmetrics)
        future: asyncio.Future[list[bytes]]
        if compressed:
            future = asyncio.get_running_loop().run_in_executor(None, self._compress, parts)
        else:
            future = asyncio.get_running_loop().create_future()
            future.set_result(list(map(_plain, parts)))
        self._pages[(openmetrics, compressed)] = (version, future)
        return await asyncio.shield(future)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Serve /metrics, OpenMetrics if the scraper asks for it, gzip if it accepts it."""
        openmetrics = "application/openmetrics-text" in request.headers.get("Accept", "")
        compressed = "gzip" in request.headers.get("Accept-Encoding", "")
        parts = await self.body(openmetrics, compressed)
        response = web.StreamResponse(
            headers={"Content-Type": OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE}
        )
        if compressed:
            response.headers["Content-Encoding"] = "gzip"
        response.content_length = sum(map(len, parts))
        await response.prepare(request)
        if request.method == "HEAD":  # aiohttp would send the body after the headers
            return response
        for chunk in _slices(parts):
            await response.write(chunk)
        await response.write_eof()
        return response

    def _parts(self, openmetrics: bool) -> list[_Part]:
        """Take the page's parts on the event loop: one consistent generation."""
        chunks: list[_Rendered] = []
        families: dict[str, schema.Family] = {}
        live = set()
        for node in self._store.nodes():
            view = self._store.view(node)
            if view is None:
                continue
            live.add(node)
            cached = self._nodes.get(node)
            if cached is None or cached[0] != view.generation:
                cached = (view.generation, _Rendered(render_node(view, self._external)))
                self._nodes[node] = cached
            chunks.append(cached[1])
            for name, family in view.families.items():
                families.setdefault(name, family)
        for node in self._nodes.keys() - live:
            del self._nodes[node]
        parts: list[_Part] = []
        for name in sorted(set().union(*(c.plain for c in chunks))):
            family = (
                schema.FAMILIES.get(name)
                or families.get(name)
                or schema.Family(name, "", "untyped")
            )
            parts.append(render_header(name, family.type, family.help, openmetrics))
            parts.extend((c, name) for c in chunks if name in c.plain)
        own = self._metrics.render(openmetrics)
        parts.append(b"".join([*own, b"# EOF\n"] if openmetrics else own))
        return parts

    def _compress(self, parts: list[_Part]) -> list[bytes]:
        """The gzip page: each part's member, kept or made now, joined once.

        Joined here, in the worker, so serving writes slices of one buffer
        instead of copying thousands of small members on every request.
        """
        members = self._header_members
        if len(members) > _HEADER_MEMBERS_MAX:
            members.clear()
        out = []
        for part in parts[:-1]:
            if isinstance(part, bytes):
                packed = members.get(part)
                if packed is None:
                    packed = members[part] = _member(part)
                out.append(packed)
            else:
                out.append(part[0].member(part[1]))
        out.append(_member(_plain(parts[-1])))  # our own metrics: new on every build
        return [b"".join(out)]


def _plain(part: _Part) -> bytes:
    return part if isinstance(part, bytes) else part[0].plain[part[1]]


def _member(data: bytes) -> bytes:
    """``data`` as one gzip member (no file name, mtime 0: equal input, equal bytes)."""
    return zlib.compress(data, _LEVEL, wbits=16 + zlib.MAX_WBITS)


_SLICE = 1 << 18


def _slices(parts: list[bytes]) -> Iterator[bytes | memoryview]:
    """Writes of about 256 KiB: small parts grouped, big ones cut (the transport copies what it cannot send)."""
    pending: list[bytes] = []
    size = 0
    for part in parts:
        if len(part) >= _SLICE:
            if pending:
                yield b"".join(pending)
                pending, size = [], 0
            view = memoryview(part)
            for offset in range(0, len(part), _SLICE):
                yield view[offset : offset + _SLICE]
            continue
        pending.append(part)
        size += len(part)
        if size >= _SLICE:
            yield b"".join(pending)
            pending, size = [], 0
    if pending:
        yield b"".join(pending)
