"""The ways a simulated monitor can misbehave, and the bodies it then serves.

:class:`~simulator.monitors.MonitorFarm` switches these on per node to
exercise a scraper. Every deliberate stall is bounded by :data:`MAX_STALL_S`.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from core.content import TEXT_CONTENT_TYPE

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
"""Faults :meth:`~simulator.monitors.MonitorFarm.set_fault` accepts.

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

HTML_PAGE = (
    b"<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\n"
    b"<body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body>\n"
    b"</html>\n"
)
"""The ``html`` fault's body: a proxy's error page."""

_BROKEN_LINE = b'hami_vgpu_memory_used_bytes{namespace="team-a",pod="broken" 12 oops'
_FILLER_FAMILY = "hami_vgpu_memory_used_bytes"

FILLER_HEAD = (
    f"# HELP {_FILLER_FAMILY} vGPU device memory usage in bytes\n# TYPE {_FILLER_FAMILY} gauge\n"
).encode()
"""HELP and TYPE of the family that oversized bodies and the gzip bomb repeat."""


def filler_line(pod: str) -> bytes:
    """One valid sample line of the filler family, for the pod ``pod``."""
    return (
        f'{_FILLER_FAMILY}{{container="cuda",device_uuid="GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec",'
        f'namespace="filler",pod="{pod}",vdevice_index="0",zone="vGPU"}} 2.097152e+10\n'
    ).encode()


def with_broken_line(body: bytes) -> bytes:
    """``body`` with one unparsable line inserted between its middle lines (``malformed``)."""
    lines = body.split(b"\n")
    lines.insert(len(lines) // 2, _BROKEN_LINE)
    return b"\n".join(lines)


async def drip(
    request: web.Request, body: bytes, interval_s: float, max_s: float
) -> web.StreamResponse:
    """Send ``body`` one byte per ``interval_s``, the rest at once after ``max_s`` (``drip``)."""
    response = web.StreamResponse(headers={"Content-Type": TEXT_CONTENT_TYPE})
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_s
    try:
        await response.prepare(request)  # the client may have hung up already
        sent = 0
        while sent < len(body) and loop.time() < deadline:
            await response.write(body[sent : sent + 1])
            sent += 1
            await asyncio.sleep(interval_s)
        if sent < len(body):
            await response.write(body[sent:])
        await response.write_eof()
    except ConnectionError:
        pass  # the client gave up
    return response


async def stream_oversized(
    request: web.Request, filler: bytes, total_bytes: int, limit_s: float
) -> web.StreamResponse:
    """Stream valid lines, ``filler`` after ``filler``, until ``total_bytes`` (``oversized``).

    A client that neither reads nor hangs up within ``limit_s`` has its
    connection dropped.
    """
    response = web.StreamResponse(headers={"Content-Type": TEXT_CONTENT_TYPE})
    try:
        async with asyncio.timeout(limit_s):
            await response.prepare(request)  # the client may have hung up already
            await response.write(FILLER_HEAD)
            written = len(FILLER_HEAD)
            while written < total_bytes:
                await response.write(filler)  # waits for the client: memory stays bounded
                written += len(filler)
            await response.write_eof()
    except ConnectionError:
        pass  # the client gave up
    except TimeoutError:
        if request.transport is not None:
            request.transport.abort()
    return response
