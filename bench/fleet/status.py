"""The status page (``GET /status``) at 5,000 nodes, each fed by a monitor and an agent.

Why: the page walks every source per request; it must stay quick however large
the cluster. Timed: what a request does (walk, filter, sort, make one page of
rows, render), for the first page and for a filtered later page. Peer: the same
page with every source rendered at once, which is what a page without
pagination would cost. Every seventh target's latest scrape failed.

The scrape loops are real but never scrape: their first scrape lies past the
end of the run (a hashed offset within a 10^6 s interval), and their health is
set the way a good or failed scrape sets it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from bench.kit.timing import median, percentile, settle, stopwatch
from collector.app import METRICS, STORE, TASKS, build_app
from collector.normalise.batch import Batch, Source
from collector.normalise.bodies import PassThrough
from collector.normalise.schema import Flavour, SourceKind
from collector.settings import CollectorSettings
from collector.sources.scrape import ScrapeConfig, ScrapeManager
from collector.sources.targets import Target
from collector.web.ui.layout import PAGE_ROWS
from collector.web.ui.status import Query, StatusPage

NODES = 5000
REPEATS = 21
BATCH = Batch({b'hami_host_gpu_utilization_ratio{device_index="0"}': 0.5}, samples=250)


async def measure() -> dict[str, Any]:
    """Fill a collector with sources, then time requests' work and the unpaginated peer."""
    settings = CollectorSettings(listen="127.0.0.1:0", kubernetes=False, interval=1e6, timeout=10)
    app = build_app(settings)
    store, metrics = app[STORE], app[METRICS]
    config = ScrapeConfig(
        settings.interval,
        settings.timeout,
        1 << 20,
        {kind: rank for rank, kind in enumerate(SourceKind)},
        PassThrough([".*"], []),
    )
    async with aiohttp.ClientSession() as session, app[TASKS]:
        manager = ScrapeManager(session, store, metrics, config, app[TASKS])
        targets = [
            Target(
                f"pod/{i}", f"http://127.0.0.1:9/{i}", f"gpu-node-{i:04d}", Flavour.HAMI, f"p{i}"
            )
            for i in range(NODES)
        ]
        await manager.sync("bench", targets)
        for i, loop in enumerate(manager.loops()):
            if i % 7:
                loop.health.succeeded(0.05, BATCH.samples)
                store.put(loop.source, BATCH, time.monotonic())
            else:
                loop.health.failed(0.1, "http: HTTP 500 Internal Server Error")
            node = loop.target.node
            agent = Source(f"agent/{node}", "agent 0123", node, SourceKind.AGENT, 0)
            store.put(agent, BATCH, time.monotonic())
        loops = manager.loops()
        page = StatusPage(store, metrics, settings.interval, lambda _: loops, TASKS, lambda _: None)
        result: dict[str, Any] = {
            "nodes": NODES,
            "sources": 2 * NODES,
            "first_page": _time(page, app, Query()),
            "failing_page_3": _time(page, app, Query(state="failing", page=3)),
            "peer_all_rows": _time(page, app, Query(), every_row=True),
        }
        await manager.close()
    result["ratio_peer_vs_first_page"] = (
        result["peer_all_rows"]["cpu_p50_ms"] / result["first_page"]["cpu_p50_ms"]
    )
    return result


def _time(
    page: StatusPage, app: web.Application, query: Query, every_row: bool = False
) -> dict[str, Any]:
    """Median and p99 of the request's work (context and the body's render: the frame
    around it is the same small template for every page), and the body's size.

    Wall time (the stopwatch), and the process's CPU time: on a shared machine
    the wall time also holds other programs' turns.
    """
    settle()
    times: list[float] = []
    cpu: list[float] = []
    html = ""
    request = make_mocked_request("GET", query.href(), {"Host": "collector"}, app=app)
    for _ in range(REPEATS):
        started = time.process_time()
        with stopwatch(times):
            context = page.context(request, query)
            if every_row:
                census = page.census(app)
                context = {**context, "rows": [census.row(e, 1e6) for e in census.entries]}
            html = page.render(context)
        cpu.append(time.process_time() - started)
    return {
        "cpu_p50_ms": median(cpu) * 1e3,
        "p50_ms": median(times) * 1e3,
        "p99_ms": percentile(times, 99) * 1e3,
        "repeats": REPEATS,
        "bytes": len(html),
        "rows": PAGE_ROWS if not every_row else 2 * NODES,
    }


def run() -> dict[str, Any]:
    """The status page's cost per request at :data:`NODES` nodes."""
    return asyncio.run(measure())
