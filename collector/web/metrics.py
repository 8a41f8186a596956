"""GET /metrics: the whole cluster as one scrape target.

Nothing is collected during a request. Each node's lines are rendered once per
change of that node and kept per family; a page is the families in name order,
each holding its nodes in name order. A page (and its gzip) is built at most
once per change of the store or of our own metrics, and concurrent scrapes
share that one build. The parts are immutable ``bytes``, and the lists that
hold them change only on the event loop, so a page never mixes two store
generations; compressing and joining run in worker threads.

The gzip page is a series of gzip members (RFC 1952 allows several;
Prometheus, Python and curl read them as one stream): a family header, then
one member per block of :data:`_BLOCK` nodes of that family. A member is
compressed once per change of a node of its block, so one node's push
recompresses a few blocks, not the page.
"""

from __future__ import annotations

import asyncio
import bisect
import gzip
import itertools
import zlib
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping, Sequence
from functools import partial
from typing import Any

from aiohttp import web

from collector.auth.access import Access, access_of
from collector.exposition.render import render_header, render_lines
from collector.normalise import schema
from collector.normalise.labelsets import key_labels
from collector.selfmetrics import SelfMetrics
from collector.store.latest import NodeView, Store
from core.content import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE
from core.tasks import Flights

_Chunks = Mapping[str, bytes]
_Version = tuple[int, int]
"""The store's generation and our own metrics' version: what a page was built of."""

_LEVEL = 1
"""zlib level of every member: level 6 makes the 1,000-node page 13% smaller for twice the CPU."""

_BLOCK = 8
"""Nodes per gzip member of a family: one member per node and family made the
1,000-node page 9.9 MB (each member's header, trailer and code tables, and no
shared window); blocks of 8 make it 8.3 MB (one gzip stream: 8.1 MB) and a
node's change recompresses 8 nodes' lines per family."""

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


class _Family:
    """One family's nodes in name order, their lines, and a gzip member per block of nodes.

    ``packed[b]`` is the member of nodes ``b * BLOCK`` to ``(b + 1) * BLOCK - 1``,
    None until made; ``stamps[b]`` changes whenever that block's lines may have,
    so a member made from older lines is not kept.
    """

    __slots__ = ("meta", "nodes", "packed", "plain", "stamps")

    def __init__(self, meta: schema.Family) -> None:
        self.meta = meta
        self.nodes: list[str] = []
        self.plain: list[bytes] = []
        self.packed: list[bytes | None] = []
        self.stamps: list[int] = []

    def put(self, node: str, lines: bytes) -> None:
        """Set ``node``'s lines."""
        i = bisect.bisect_left(self.nodes, node)
        if i < len(self.nodes) and self.nodes[i] == node:
            self.plain[i] = lines
            self._stale(i // _BLOCK, i // _BLOCK + 1)
            return
        self.nodes.insert(i, node)
        self.plain.insert(i, lines)
        self._stale(i // _BLOCK, None)  # every later node moved up one place

    def drop(self, node: str) -> None:
        """Take ``node`` out."""
        i = bisect.bisect_left(self.nodes, node)
        del self.nodes[i], self.plain[i]
        self._stale(i // _BLOCK, None)

    def unpacked(self) -> list[tuple[int, int, list[bytes]]]:
        """The blocks without a member: (block, stamp, lines)."""
        return [
            (b, self.stamps[b], self.plain[b * _BLOCK : (b + 1) * _BLOCK])
            for b, member in enumerate(self.packed)
            if member is None
        ]

    def pack(self, block: int, stamp: int, member: bytes) -> None:
        """Keep ``member`` for ``block`` if nothing changed there since ``stamp``."""
        if block < len(self.stamps) and self.stamps[block] == stamp:
            self.packed[block] = member

    def _stale(self, first: int, end: int | None) -> None:
        blocks = -(-len(self.nodes) // _BLOCK)
        del self.packed[blocks:], self.stamps[blocks:]
        self.packed += [None] * (blocks - len(self.packed))
        self.stamps += [0] * (blocks - len(self.stamps))
        for b in range(first, blocks if end is None else min(end, blocks)):
            self.packed[b] = None
            self.stamps[b] += 1


_Todo = list[tuple[str, int, int, list[bytes]]]
"""Blocks whose member is not made yet: (family, block, stamp, lines); family "" for our own."""

_OwnBlock = tuple[bytes, ...]

_BLOCK_LINES = 64
"""Lines of our own metrics per gzip member (thousands of per-source lines, few change at once)."""


class MetricsPage:
    """Builds and caches the /metrics page in both formats, plain and gzipped.

    The page is kept as parts, per family, in node order, and changed where a
    node changed: a build asks the store which nodes changed since the last
    one, renders just them, and swaps their entries in each family's lists, so
    a build costs the changed nodes plus a copy of the lists' references.
    """

    def __init__(
        self, store: Store, metrics: SelfMetrics, external: Sequence[tuple[str, str]] = ()
    ) -> None:
        """``external`` labels are added to every cluster series (not to our own)."""
        self._store = store
        self._metrics = metrics
        self._external = tuple(external)
        self._nodes: dict[str, tuple[int, tuple[str, ...]]] = {}
        self._synced = -1  # the store generation the families were last brought up to
        self._families: dict[str, _Family] = {}
        self._header_members: dict[bytes, bytes] = {}
        self._own_members: dict[bool, dict[_OwnBlock, bytes]] = {False: {}, True: {}}
        self._plain: dict[bool, tuple[_Version, list[bytes]]] = {}
        self._gzip: dict[bool, tuple[_Version, list[bytes]]] = {}
        self._gzip_builds: Flights[tuple[bool, _Version], list[bytes]] = Flights(
            "the gzip /metrics page"
        )

    async def body(self, openmetrics: bool, compressed: bool) -> list[bytes]:
        """Return the current page as parts; build it if the store or our metrics changed.

        The page is never joined into one buffer (at 1,000 nodes the plain one
        is ~50 MB): its parts are written one after the other, and the gzip
        page is its members, kept or compressed now in a worker thread.
        """
        if compressed:
            return await self._gzip_page(openmetrics)
        return self._plain_page(openmetrics)

    async def closing(self, app: web.Application) -> AsyncIterator[None]:
        """A cleanup context: gzip builds still in flight at shutdown are cancelled and
        awaited."""
        yield
        await self._gzip_builds.stop()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Serve /metrics, OpenMetrics if the scraper asks for it, gzip if it accepts it."""
        openmetrics = "application/openmetrics-text" in request.headers.get("Accept", "")
        compressed = "gzip" in request.headers.get("Accept-Encoding", "")
        response = web.StreamResponse(
            headers={"Content-Type": OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE}
        )
        if compressed:
            response.headers["Content-Encoding"] = "gzip"
        access = access_of(request)
        if access.cluster:
            parts = await self.body(openmetrics, compressed)
        else:
            page = self.tenant_page(access, openmetrics)
            parts = [gzip.compress(page, compresslevel=1) if compressed else page]
        response.content_length = sum(map(len, parts))
        await response.prepare(request)
        if request.method == "HEAD":
            return response
        for chunk in _slices(parts):
            await response.write(chunk)
        await response.write_eof()
        return response

    def tenant_page(self, access: Access, openmetrics: bool) -> bytes:
        """The page as a tenant federates it: only series of its namespaces, none of our own.

        Built per request from the store (tenants are few, their pages small); the
        cluster's cached page never serves a tenant.
        """
        by_family: dict[str, list[bytes]] = {}
        for node in self._store.nodes():
            view = self._store.view(node)
            if view is None:
                continue
            items: dict[str, list[tuple[bytes, float]]] = {}
            for key, value in view.series.items():
                name, labels = key_labels(key)
                if access.sees(dict(labels).get("namespace")):
                    items.setdefault(name, []).append((key, value))
            for name, pairs in items.items():
                by_family.setdefault(name, []).append(render_lines(pairs, node, self._external))
        parts = []
        for name in sorted(by_family):
            meta = schema.FAMILIES.get(name) or schema.ALLOCATION_FAMILIES.get(name)
            meta = meta or schema.Family(name, "", "untyped")
            parts.append(render_header(name, meta.type, meta.help, openmetrics))
            parts += by_family[name]
        if openmetrics:
            parts.append(b"# EOF\n")
        return b"".join(parts)

    def _version(self) -> _Version:
        return (self._store.generation, self._metrics.version)

    def _plain_page(self, openmetrics: bool) -> list[bytes]:
        version = self._version()
        cached = self._plain.get(openmetrics)
        if cached is not None and cached[0] == version:
            return cached[1]
        self._sync()
        parts: list[bytes] = []
        for name in sorted(self._families):
            family = self._families[name]
            parts.append(render_header(name, family.meta.type, family.meta.help, openmetrics))
            parts += family.plain
        parts += self._own(openmetrics)
        self._plain[openmetrics] = (version, parts)
        return parts

    async def _gzip_page(self, openmetrics: bool) -> list[bytes]:
        """The gzip page of the current version; concurrent scrapes share one build.

        A build's page is kept until the version moves. Builds of two versions may
        run at once (the store changed during one): each serves its own scrapes,
        and the later one's page is the one kept.
        """
        version = self._version()
        kept = self._gzip.get(openmetrics)
        if kept is not None and kept[0] == version:
            return kept[1]
        key = (openmetrics, version)
        return await self._gzip_builds.join(key, partial(self._gzip_build, openmetrics, version))

    def _gzip_build(self, openmetrics: bool, version: _Version) -> Coroutine[Any, Any, list[bytes]]:
        """What a build of ``version`` compresses, taken now (before its task starts, so our
        own metrics do not count it), and the build."""
        self._sync()
        kept = self._own_members[openmetrics]
        own = {block: kept.get(block) for block in self._own_blocks(openmetrics)}
        todo = [(name, *b) for name, f in self._families.items() for b in f.unpacked()]
        todo += [("", 0, 0, list(block)) for block, member in own.items() if member is None]
        return self._build_gzip(openmetrics, version, own, todo)

    async def _build_gzip(
        self,
        openmetrics: bool,
        version: _Version,
        own: dict[_OwnBlock, bytes | None],
        todo: _Todo,
    ) -> list[bytes]:
        """Compress the blocks that changed, then join the page, in worker threads; keep it
        unless a build of a later version was kept first."""
        loop = asyncio.get_running_loop()
        members = await loop.run_in_executor(None, _compress_blocks, [t[3] for t in todo])
        made: dict[_OwnBlock, bytes] = {}
        for (name, block, stamp, lines), member in zip(todo, members, strict=True):
            family = self._families.get(name)
            if family is not None:
                family.pack(block, stamp, member)
            elif not name:
                made[tuple(lines)] = member
        parts = []
        for name in sorted(self._families):
            family = self._families[name]
            header = render_header(name, family.meta.type, family.meta.help, openmetrics)
            parts.append(self._header_member(header))
            # a build since this one's start changed these blocks: made here, few and small
            for block, stamp, lines in family.unpacked():
                family.pack(block, stamp, _member(b"".join(lines)))
            parts += family.packed  # type: ignore[arg-type]  # every member is made above
        own_members = {block: member or made[block] for block, member in own.items()}
        self._own_members[openmetrics] = own_members
        parts += own_members.values()
        page = [await loop.run_in_executor(None, b"".join, parts)]
        kept = self._gzip.get(openmetrics)
        # versions only grow, both parts, so a build started later has the greater one
        if kept is None or kept[0] < version:
            self._gzip[openmetrics] = (version, page)
        return page

    def _sync(self) -> None:
        """Bring the families up to the store: render the nodes whose view changed, drop the gone."""
        store = self._store
        changed = store.to_revisit(self._synced, self._nodes)
        self._synced = store.generation
        for node in changed:
            view = store.view(node)
            known = self._nodes.get(node)
            if view is None:
                if known is not None:
                    del self._nodes[node]
                    for name in known[1]:
                        self._drop(name, node)
                continue
            if known is not None and known[0] == view.generation:
                continue
            chunks = render_node(view, self._external)
            for name in set(known[1] if known else ()) - chunks.keys():
                self._drop(name, node)
            for name, lines in chunks.items():
                family = self._families.get(name)
                if family is None:
                    meta = (
                        schema.FAMILIES.get(name)
                        or view.families.get(name)
                        or schema.Family(name, "", "untyped")
                    )
                    family = self._families[name] = _Family(meta)
                family.put(node, lines)
            self._nodes[node] = (view.generation, tuple(chunks))

    def _drop(self, name: str, node: str) -> None:
        family = self._families[name]
        family.drop(node)
        if not family.nodes:
            del self._families[name]

    def _own(self, openmetrics: bool) -> list[bytes]:
        """Our own metrics, rendered on every build: prometheus_client's part, then lines."""
        own = self._metrics.render(openmetrics)
        return [*own, b"# EOF\n"] if openmetrics else own

    def _own_blocks(self, openmetrics: bool) -> list[_OwnBlock]:
        """Our own metrics in blocks of lines; a block seen at the last build keeps its member.

        prometheus_client's part is new on every build, so it is a block of its own.
        """
        first, *lines = self._own(openmetrics)
        return [
            (first,),
            *(tuple(lines[i : i + _BLOCK_LINES]) for i in range(0, len(lines), _BLOCK_LINES)),
        ]

    def _header_member(self, header: bytes) -> bytes:
        members = self._header_members
        packed = members.get(header)
        if packed is None:
            if len(members) > _HEADER_MEMBERS_MAX:
                members.clear()
            packed = members[header] = _member(header)
        return packed


def _compress_blocks(blocks: list[list[bytes]]) -> list[bytes]:
    return [_member(b"".join(lines)) for lines in blocks]


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
