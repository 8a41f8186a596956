"""Serving the cached gzip /metrics page of the real app, 1,000 nodes in its store.

Why: Prometheus servers (often two, plus ad-hoc curls and federation) scrape
the page; serving it must cost next to nothing while nothing changes, because
the page is cached per store generation. The app is built with ``build_app``
and served on 127.0.0.1 by an AppRunner in this process; its store is filled
with the warm cluster's batches; a separate process (:mod:`bench.kit.loadgen`,
``wrk`` is not used even if installed, so runs compare) keeps several
keep-alive requests in flight for a few seconds. Nothing changes in the store
during the run, so this measures the cached path only.

Peers, served and loaded the same way, interleaved with ours in rounds:

* ``bare``: an aiohttp app whose one handler returns the very same gzip bytes as
  a constant ``web.Response``: what aiohttp itself costs for a body that size;
* ``chunked``: the same bytes written by a ``StreamResponse`` in 256 KiB slices,
  which spares Python 3.11's socket transport from buffering (and re-copying)
  most of an 8 MB body per response.

The page is ~8 MB gzipped, so req/s is mostly memory copying; on this 2-core
machine client and server share the CPU (and other work may run), so server CPU
milliseconds per request are reported too: they are steadier than req/s.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from aiohttp import web

from bench.kit.cluster import HAMI, ROOT, warm
from bench.kit.processes import loopback_socket
from bench.kit.timing import median
from collector.app import STORE, build_app
from collector.settings import CollectorSettings
from core.content import TEXT_CONTENT_TYPE

GOAL_REQ_PER_S = 500.0
CONNECTIONS = 4
SECONDS = 2.0
ROUNDS = 4
CHUNK = 256 << 10


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[int]:
    """Serve ``app`` on a loopback port the kernel picks for the block; yield the port."""
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        await web.SockSite(runner, loopback_socket()).start()
        port: int = runner.addresses[0][1]
        yield port
    finally:
        await runner.cleanup()


async def hammer(port: int) -> dict[str, Any]:
    """Run the load generator against 127.0.0.1:``port``/metrics; add this process's CPU."""
    cpu0 = time.process_time()
    client = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.kit.loadgen",
        "127.0.0.1",
        str(port),
        "/metrics",
        str(CONNECTIONS),
        str(SECONDS),
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    out, _ = await asyncio.wait_for(client.communicate(), timeout=SECONDS + 90)
    if client.returncode != 0:
        raise RuntimeError(f"load generator failed with {client.returncode}")
    result: dict[str, Any] = json.loads(out)
    # The load generator's own warm-up request is served from the cache as well.
    result["server_cpu_ms_per_request"] = (
        (time.process_time() - cpu0) / (result["requests"] + 1) * 1e3
    )
    return result


async def fetch_gzip(port: int) -> bytes:
    """The page's gzip body, as served (the first request builds it)."""
    async with (
        aiohttp.ClientSession(auto_decompress=False) as session,
        session.get(
            f"http://127.0.0.1:{port}/metrics", headers={"Accept-Encoding": "gzip"}
        ) as resp,
    ):
        return await resp.read()


_HEADERS = {"Content-Type": TEXT_CONTENT_TYPE, "Content-Encoding": "gzip"}


def bare_app(body: bytes) -> web.Application:
    """Serve ``body`` (gzip) as a constant ``web.Response``: no collector code at all."""

    async def handle(request: web.Request) -> web.Response:
        return web.Response(body=body, headers=_HEADERS)

    app = web.Application()
    app.router.add_get("/metrics", handle)
    return app


def chunked_app(body: bytes) -> web.Application:
    """Serve ``body`` (gzip) through a ``StreamResponse`` in :data:`CHUNK` slices."""

    async def handle(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers=_HEADERS)
        resp.content_length = len(body)
        await resp.prepare(request)
        view = memoryview(body)
        for start in range(0, len(body), CHUNK):
            await resp.write(view[start : start + CHUNK])
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/metrics", handle)
    return app


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over rounds of one server's figures."""
    return {
        "req_per_s": median([r["req_per_s"] for r in runs]),
        "server_cpu_ms_per_request": median([r["server_cpu_ms_per_request"] for r in runs]),
        "client_cpu_share": median([r["client_cpu_s"] / r["seconds"] for r in runs]),
        "latency_ms_median": median([r["latency_ms_median"] for r in runs]),
        "mb_per_s": median([r["mb_per_s"] for r in runs]),
        "errors": sum(r["errors"] for r in runs),
        "req_per_s_rounds": [r["req_per_s"] for r in runs],
    }


async def measure() -> dict[str, Any]:
    """Start ours and the peers, then load each in turn, ROUNDS times."""
    settings = CollectorSettings(listen="127.0.0.1:0", kubernetes=False, stale_after=3600)
    app = build_app(settings)
    runs: dict[str, list[dict[str, Any]]] = {"collector": [], "bare": [], "chunked": []}
    async with serving(app) as port:
        now = time.monotonic()
        for source, batch in warm(HAMI).held():
            app[STORE].put(source, batch, now)
        body = await fetch_gzip(port)
        async with serving(bare_app(body)) as bare, serving(chunked_app(body)) as chunked:
            ports = {"collector": port, "bare": bare, "chunked": chunked}
            for _ in range(ROUNDS):
                for name, server in ports.items():
                    runs[name].append(await hammer(server))
    ours = summary(runs["collector"])
    peers = {name: summary(runs[name]) for name in ("bare", "chunked")}
    rate = ours["req_per_s"]
    return {
        **ours,
        "body_bytes": len(body),
        "client": "bench.kit.loadgen (asyncio BufferedProtocol, no decompression)",
        "connections": CONNECTIONS,
        "seconds_per_run": SECONDS,
        "rounds": ROUNDS,
        "server_bound_req_per_s": 1e3 / ours["server_cpu_ms_per_request"],
        "peer_bare_aiohttp": peers["bare"],
        "peer_chunked_aiohttp": peers["chunked"],
        "ratio_vs_bare_aiohttp": rate / peers["bare"]["req_per_s"],
        "ratio_vs_chunked_aiohttp": rate / peers["chunked"]["req_per_s"],
        "goal_req_per_s": GOAL_REQ_PER_S,
        "meets_goal": rate >= GOAL_REQ_PER_S and ours["errors"] == 0,
    }


def run() -> dict[str, Any]:
    """Requests per second for the cached gzip page, and for the peers."""
    return asyncio.run(measure())
